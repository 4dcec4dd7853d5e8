"""``keysplit submit``: submit a run loaded with `keysplit run --load-only` to a Storm cluster (sparse submit).

Submit a loaded run (the word count's or a topology file's) to a Storm cluster with exactly the settings its record
holds."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys

from keysplit.cli import command_summary
from keysplit.commands.common import add_redis_options, print_json, redis_url
from keysplit.errors import KeysplitError

DEFAULT_JAR = os.path.join("_build", "wordcount.jar")

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Build the topology jar and run `sparse submit` with the shape, the -o options and the worker "
        "count taken from the run's stored record, so that what runs is what the record says. The command is "
        "printed before it runs. A topology file's run is submitted from its project (the folder holding its "
        "config.json and topologies/), with the jar of its src/. Nimbus is asked for its Storm version first, and the "
        "word count's keysplit.route=direct is refused where Storm cannot run it (2.6.0 and later); the word count "
        "is submitted from the current folder (the repository root, with its config.json).",
        epilog="example:\n  RUN_ID=$(keysplit run wordcount --load-only --grouping pkg --dataset text:zipf.txt "
        "-S 5 -W 10 \\\n      --redis redis://redis-host:6379/0 --redis-password-file ~/.keysplit-redis)\n"
        "  keysplit submit $RUN_ID -e prod --redis redis://redis-host:6379/0 --redis-password-file "
        "~/.keysplit-redis \\\n      --workers-password-file /etc/keysplit/redis.pass",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the run, as --load-only printed it: the word count's, or a "
                   "topology file's (keysplit run path/to/topology.py --load-only), submitted from its project")
    p.add_argument("-e", "--env", default="prod", help="the config.json env to submit to (default prod)")
    add_redis_options(p, "the Redis holding the run (default: the project-managed server)")
    p.add_argument("--workers-redis", metavar="URL",
                   help="the Redis URL as the Storm workers reach it, without a password (default: --redis "
                   "without its password)")
    p.add_argument("--workers-password-file", metavar="PATH",
                   help="the password file on every supervisor host (default: --redis-password-file's path)")
    p.add_argument("--workers-password-env", metavar="VAR",
                   help="or the workers' environment variable holding the password")
    p.add_argument("--jar", metavar="FILE", help=f"where to build the jar (default {DEFAULT_JAR}, or "
                   "PROJECT/_build/NAME.jar for a topology file's run)")
    p.add_argument("--name", default="wordcount", help="the topology name (default wordcount)")
    p.add_argument("--storm-version", metavar="X.Y.Z", help="the cluster's Storm version (default: ask Nimbus)")
    p.add_argument("--dry-run", action="store_true", help="print the command and run nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object (command, env, storm version)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from keysplit.runs.records import check_run_id, read_record
    from keysplit.runs.redis_server import session
    from keysplit.storm.keys import RunKeys
    from keysplit.storm.settings import split_password

    url = redis_url(args)
    check_run_id(args.run_id)
    with session(url) as (conn, used):
        record = read_record(conn, args.run_id)
        raw = conn.get(RunKeys(args.run_id).config)
    if record is None:
        raise KeysplitError(f"no run {args.run_id!r} in this Redis (see `keysplit runs`)")
    if record.get("state") not in ("loaded",):
        raise KeysplitError(f"run {args.run_id} is {record.get('state')}: only a run loaded with --load-only and "
                            "never started can be submitted")
    config = json.loads(raw) if raw else {}
    topology_run = config.get("topology", "wordcount") != "wordcount"
    project = _project(config) if topology_run else "."
    env_config = _read_env(project, args.env)
    workers_url = args.workers_redis or split_password(used)[0]
    password_file = args.workers_password_file or (os.path.abspath(args.redis_password_file)
                                                   if args.redis_password_file else "")
    if split_password(used)[1] is not None and not (password_file or args.workers_password_env):
        raise KeysplitError("the run's Redis has a password: say where the workers read it, "
                            "--workers-password-file PATH or --workers-password-env VAR")
    warning = refuse_loopback_for_a_cluster(workers_url, env_config, args.env)
    if warning:
        print(f"keysplit: warning: {warning}", file=sys.stderr)
    storm = args.storm_version or _nimbus_version(env_config)
    stem = os.path.splitext(os.path.basename(config.get("topology_path", "")))[0]
    jar = args.jar or (os.path.join(project, "_build", f"{stem}.jar") if topology_run else DEFAULT_JAR)
    if topology_run:
        from keysplit.runs.submit import topology_submission

        command = topology_submission(config, env_name=args.env, jar=os.path.abspath(jar), redis_url=workers_url,
                                      password_file=password_file, password_env=args.workers_password_env or "")
    else:
        from keysplit.runs.submit import check_route, submission
        from keysplit.storm.settings import RunSettings

        check_route(RunSettings.from_conf(config).route, storm)
        command = submission(config, env_name=args.env, jar=jar, redis_url=workers_url, password_file=password_file,
                             password_env=args.workers_password_env or "", name=args.name)
    where = "" if project == "." else f"cd {shlex.quote(project)} && "
    if args.json:
        print_json({"run_id": args.run_id, "storm_version": storm, "env": command.env, "argv": command.argv,
                    "cwd": os.path.abspath(project), "command": where + command.shell(), "dry_run": args.dry_run})
    else:
        print(f"Storm {storm}; submitting run {args.run_id}:\n{where}{command.shell()}", flush=True)
    if args.dry_run:
        return 0
    from keysplit.commands.jar import refuse_foreign_jar
    from keysplit.local.submission import write_jar

    refuse_foreign_jar(jar, "--jar")
    os.makedirs(os.path.dirname(jar) or ".", exist_ok=True)  # _build/ on a fresh clone, as `sparse jar` makes it
    src = os.path.join(project, "src")
    # keysplit travels in the jar beside the project's src/ (the workers' Python has only its dependencies:
    # virtualenvs/pageviews.txt); a src/ holding its own keysplit package keeps that one
    write_jar(jar, src if topology_run and os.path.isdir(src) else None, with_keysplit=True)
    try:
        done = subprocess.run(command.argv, env={**os.environ, **command.env}, cwd=project)
    except FileNotFoundError:
        raise KeysplitError("sparse is not on PATH: install streamparse (pip install -e .) in this "
                            "environment") from None
    if done.returncode != 0:
        print(f"keysplit: sparse submit exited with {done.returncode}", file=sys.stderr)
    return done.returncode


def _project(config: dict) -> str:
    """The streamparse project of a topology file's run: the folder whose config.json and topologies/ sparse reads
    (sparse submit -n NAME deploys topology_specs/NAME.py); one line when the file is not where sparse looks."""
    path = config.get("topology_path")
    if not path:
        raise KeysplitError(f"run {config.get('run_id')} ran {config.get('topology')} but its record has no file "
                            "path (loaded by an older keysplit): load it again with --load-only")
    if not os.path.isfile(path):
        raise KeysplitError(f"run {config.get('run_id')}'s topology file {path} is gone")
    project = os.path.dirname(os.path.dirname(path))
    specs = "topologies/"
    config_file = os.path.join(project, "config.json")
    if os.path.isfile(config_file):
        try:
            with open(config_file, encoding="utf-8") as fh:
                specs = json.load(fh).get("topology_specs", specs)
        except (OSError, ValueError, AttributeError):
            pass  # _read_env says what is wrong with it
    expected = os.path.join(project, specs, os.path.basename(path))
    if os.path.realpath(expected) != os.path.realpath(path):
        raise KeysplitError(f"{path}: sparse submit reads a topology from the project's {specs} folder (config.json's "
                            "topology_specs); keep the file in PROJECT/topologies/ beside PROJECT/config.json")
    return project


def _read_env(project: str, env: str) -> dict:
    from keysplit.local.submission import read_env

    config_file = os.path.join(project, "config.json")
    if not os.path.isfile(config_file):
        raise KeysplitError(f"{os.path.abspath(config_file)} does not exist: sparse submit reads Nimbus's address "
                            "from the project's config.json (docs/guides/your-topology.md, section 5, writes one)")
    return read_env(config_file, env)


def _nimbus_version(env_config: dict) -> str:
    from keysplit.runs.submit import nimbus_version

    return nimbus_version(env_config)


def _host(address: str) -> str:
    """The host of ``host``, ``host:port``, ``[v6]:port`` or ``user@host``."""
    address = address.rpartition("@")[2].strip()
    if address.startswith("["):
        return address[1:].partition("]")[0]
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    import ipaddress

    if host.lower() in ("localhost", "localhost.localdomain", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_loopback_for_a_cluster(workers_url: str, env_config: dict, env_name: str) -> str | None:
    """A one-line KeysplitError when the workers would be told to reach Redis at a loopback address (the
    managed server, or ``--redis redis://127.0.0.1...``) or through a Unix socket while the env's Nimbus or
    workers are other hosts: a remote worker's loopback is itself, and a socket is a file of this machine, so the
    topology would never read its feed. For a socket and a cluster on this machine: a warning to print (only a
    supervisor here, running as a user who may open the socket, reaches it; the managed server's is in a 0700
    folder)."""
    from urllib.parse import urlsplit

    parts = urlsplit(workers_url)
    socket = parts.scheme == "unix"
    redis_host = parts.hostname or ""
    if not socket and not is_loopback(redis_host):
        return None
    nimbus = os.environ.get("STREAMPARSE_NIMBUS") or str(env_config.get("nimbus") or "")
    remote = [h for h in [nimbus, *map(str, env_config.get("workers") or [])] if not is_loopback(_host(h))]
    where = f"through the Unix socket {parts.path}, a file" if socket else \
        f"at {redis_host} ({workers_url}), a loopback address"
    fix = ("load the run into a Redis the cluster reaches (--redis redis://HOST:6379/0) or name it as the workers "
           "reach it (--workers-redis URL)")
    if remote:
        raise KeysplitError(f"the workers would reach Redis {where} of this machine, but env {env_name!r} runs on "
                            f"{', '.join(sorted(set(remote)))}; {fix}")
    if socket:
        return (f"the workers will reach Redis through the Unix socket {parts.path}: only a Storm supervisor on this "
                f"machine, running as a user who may open it, can; else {fix}")
    return None
