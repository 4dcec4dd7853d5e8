"""The ``sparse submit`` of a run, made from the run's stored record (``keysplit run wordcount --load-only``), so
that what runs on the cluster is what the record says: the shape through the ``KEYSPLIT_*`` variables the
topology file reads when sparse imports it, everything else through ``-o``, ``topology.workers`` through
``--workers``. (The components also record the configuration they received, and ``--collect`` reports that:
storm/components.py ``received_configuration``.)

Before submitting, Nimbus is asked for its version (Storm's Thrift ``getClusterInfo``: each ``NimbusSummary``
carries one, through streamparse's client and its ssh tunnel when the env asks for it), and a run with
``keysplit.route=direct`` is refused on Storm 2.6.0 and later, where a multi-lang direct emit crashes the router
(apache/storm ``storm-client/src/jvm/org/apache/storm/multilang/JsonSerializer.java`` casts the task id to
``Long``; json-smart parses it as ``Integer``).
"""

from __future__ import annotations

import shlex
import warnings
from dataclasses import dataclass
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.storm.settings import ENV_PREFIX, RunSettings

#: The first Storm release whose multi-lang direct emits fail (storm/router.py).
DIRECT_BROKEN_SINCE = (2, 6, 0)
#: What the topology file reads from the environment when sparse imports it: the shape (topologies/wordcount.py).
SHAPE = ("spouts", "sources", "workers", "counter_tasks", "aggregators", "flush_secs")
#: Settings passed with -o (the rest of the run's record that the components read).
OPTIONS = ("grouping", "cpu_delay_ms", "top_k", "route", "split", "delivery", "rate", "window", "stats_secs", "batch",
           "batch_ms", "aimd_increase", "aimd_decrease", "aimd_min")


@dataclass
class Submission:
    """The command: the environment it needs and its argument vector."""

    env: dict[str, str]
    argv: list[str]

    def shell(self) -> str:
        """One line a user can paste."""
        return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in self.env.items()), shlex.join(self.argv)])


def submission(config: dict[str, Any], *, env_name: str, jar: str, redis_url: str, password_file: str = "",
               password_env: str = "", name: str = "wordcount") -> Submission:
    """The ``sparse submit`` of the run whose stored config (``RunKeys.config``) is ``config``. ``redis_url`` is
    the Redis the workers reach, without a password; the password is read on the workers from ``password_file``
    or the variable ``password_env`` names."""
    settings = RunSettings.from_conf(config)
    env = {ENV_PREFIX + field.upper(): str(getattr(settings, field)) for field in SHAPE}
    options = {f"keysplit.{field}": getattr(settings, field) for field in OPTIONS}
    options.update({"keysplit.run_id": settings.run_id, "keysplit.redis_url": redis_url,
                    "topology.max.spout.pending": config["max_pending"],
                    "topology.message.timeout.secs": config["message_timeout_secs"]})
    return _sparse_submit(env, options, config, env_name=env_name, name=name, jar=jar, redis_url=redis_url,
                          password_file=password_file, password_env=password_env)


def _sparse_submit(env: dict[str, str], options: dict[str, Any], config: dict[str, Any], *, env_name: str, name: str,
                   jar: str, redis_url: str, password_file: str, password_env: str) -> Submission:
    """What every run's ``sparse submit`` shares: a workers' Redis URL without a password (Storm prints its
    configuration in its logs and UI), the password's file or variable as ``-o`` options after ``options``,
    ``--workers`` from the record, and ``LEIN_ROOT`` (sparse refuses to run as root without it; harmless otherwise)."""
    from keysplit.storm.settings import split_password

    if split_password(redis_url)[1] is not None:
        raise KeysplitError("the workers' Redis URL must not carry a password (Storm prints its configuration in "
                            "its logs and UI): give the workers --workers-password-file or --workers-password-env")
    if password_file:
        options["keysplit.redis_password_file"] = password_file
    if password_env:
        options["keysplit.redis_password_env"] = password_env
    argv = ["sparse", "submit", "-e", env_name, "-n", name, "-j", jar,
            "--workers", str(config.get("worker_processes") or 1)]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    return Submission({**env, "LEIN_ROOT": "1"}, argv)


def parse_version(text: str) -> tuple[int, ...]:
    """``"2.8.8"`` -> ``(2, 8, 8)``; a suffix (``-SNAPSHOT``) is dropped; unparseable -> ``()``.

    >>> parse_version("2.6.0-SNAPSHOT"), parse_version("VERSION_NOT_PROVIDED")
    ((2, 6, 0), ())
    """
    parts = []
    for piece in text.split("-", 1)[0].split("."):
        if not piece.isdigit():
            return tuple(parts) if parts else ()
        parts.append(int(piece))
    return tuple(parts)


def nimbus_version(env_config: dict[str, Any]) -> str:
    """The Storm version Nimbus reports (``getClusterInfo``), through streamparse's client (and its ssh tunnel when
    the env's ``use_ssh_for_nimbus`` is true); a one-line KeysplitError when Nimbus cannot be asked."""
    with warnings.catch_warnings():  # streamparse's CLI imports paramiko and pkg_resources, which warn on import
        warnings.simplefilter("ignore")
        from streamparse.util import get_nimbus_client, get_nimbus_host_port, ssh_tunnel

    where = ":".join(map(str, get_nimbus_host_port(dict(env_config))))
    try:
        with ssh_tunnel(dict(env_config)) as (host, port):
            summary = get_nimbus_client(dict(env_config), host=host, port=port).getClusterInfo()
    except Exception as exc:  # a refused connection, a timeout, an ssh failure: all say the same to the user
        raise KeysplitError(f"cannot ask Nimbus at {where} for its version ({type(exc).__name__}: {exc}); "
                            "check config.json's env (nimbus, use_ssh_for_nimbus) or give --storm-version") from None
    for nimbus in summary.nimbuses or []:
        if parse_version(nimbus.version):
            return nimbus.version
    return "unknown"


def check_route(route: str, storm_version: str) -> None:
    """Refuse ``direct`` where Storm cannot run it (see the module docstring)."""
    version = parse_version(storm_version)
    if route == "direct" and (not version or version >= DIRECT_BROKEN_SINCE):
        said = f"Storm {storm_version}" if version else f"a Storm whose version is {storm_version}"
        raise KeysplitError(f"keysplit.route=direct cannot run on {said} (multi-lang direct emits crash the routers "
                            "from 2.6.0 on); load the run again with --route fields, which works on every release")


#: The record's fields a topology file's run passes with -o, as `keysplit run FILE` passes them to the local runner.
TOPOLOGY_OPTIONS = {"topology.max.spout.pending": "max_pending",
                    "topology.message.timeout.secs": "message_timeout_secs", "keysplit.delivery": "delivery"}


def topology_submission(config: dict[str, Any], *, env_name: str, jar: str, redis_url: str, password_file: str = "",
                        password_env: str = "") -> Submission:
    """The ``sparse submit`` of a topology file's run (``keysplit run FILE --load-only``), to be run in the file's
    project (the folder holding ``config.json`` and ``topologies/``): ``-n`` is the file's stem (what sparse reads
    from ``topologies/``), ``--workers`` the run's ``--worker-processes``, and ``-o`` the run id, the workers'
    Redis and the Storm settings the run recorded."""
    from pathlib import Path

    options: dict[str, Any] = {"keysplit.run_id": config["run_id"], "keysplit.redis_url": redis_url}
    options.update({option: config[field] for option, field in TOPOLOGY_OPTIONS.items() if field in config})
    return _sparse_submit({}, options, config, env_name=env_name, name=Path(config["topology_path"]).stem, jar=jar,
                          redis_url=redis_url, password_file=password_file, password_env=password_env)
