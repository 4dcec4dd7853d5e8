"""Word count / top-k with a skew-aware grouping: the topology `sparse submit -n wordcount` deploys.

The shape (parallelism, flush period T) is read from the environment when sparse imports this file; the
components read the rest from the topology configuration, which `-o` overrides at submit time (docs/guides/cluster.md
has the whole sequence):

    keysplit jar --out _build/wordcount.jar
    KEYSPLIT_SOURCES=5 KEYSPLIT_WORKERS=10 KEYSPLIT_AGGREGATORS=2 KEYSPLIT_FLUSH_SECS=1 \\
        LEIN_ROOT=1 sparse submit -e prod -n wordcount -j _build/wordcount.jar \\
        -o keysplit.grouping=pkg:d=2 -o keysplit.cpu_delay_ms=0.4 -o keysplit.top_k=10 -o keysplit.route=fields \\
        -o keysplit.batch=100 -o keysplit.batch_ms=20 \\
        -o keysplit.redis_url=redis://redis-host:6379/0 -o keysplit.redis_password_file=/etc/keysplit/redis.pass \\
        -o keysplit.run_id=RUN_ID

The Redis password never goes in `-o` (Storm logs the configuration and shows it in its UI): it is read on
the workers from `keysplit.redis_password_file` or the variable `keysplit.redis_password_env` names.
`keysplit.route` is `fields` (every Storm release) or `direct` (Storm < 2.6.0 only); `keysplit.batch` is how
many words a router sends a counter in one tuple at most (1: one tuple per word), `keysplit.batch_ms` how long the
first of them may wait.

Environment variables (defaults in keysplit.storm.settings.RunSettings): KEYSPLIT_SPOUTS,
KEYSPLIT_SOURCES, KEYSPLIT_WORKERS, KEYSPLIT_COUNTER_TASKS, KEYSPLIT_AGGREGATORS, KEYSPLIT_FLUSH_SECS, and
the defaults of every ``keysplit.*`` option: KEYSPLIT_GROUPING, KEYSPLIT_CPU_DELAY_MS, KEYSPLIT_TOP_K,
KEYSPLIT_REDIS_URL, KEYSPLIT_ROUTE, KEYSPLIT_BATCH, KEYSPLIT_BATCH_MS, KEYSPLIT_RUN_ID. `keysplit run wordcount
--load-only` fills the run's feed in Redis.
"""

from keysplit.storm.settings import RunSettings
from keysplit.storm.topology import wordcount_topology

WordCount = wordcount_topology(RunSettings.from_env())
