"""The SparkSession of the replay: every Spark setting lives here, and nowhere else.

``local[*]`` by default (every core of this machine), ``--master URL`` for a cluster; inside
``spark-submit`` the master chosen there is kept. Logs are quiet (log4j at ERROR, no console progress bar,
no UI), the executors run this interpreter, and a missing Java or a JVM that will not start is reported as
one :class:`~keysplit.errors.KeysplitError` line instead of a Java stack trace.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import zipfile
from typing import Any

from keysplit.errors import KeysplitError, SpecError

DEFAULT_MASTER = "local[*]"
#: Driver heap: the driver only holds aggregates (checkpoint matrices, histograms), never the dataset.
DEFAULT_DRIVER_MEMORY = "2g"
APP_NAME = "keysplit-replay"

#: Settings for every replay session (master and driver memory are added by :func:`get_session`).
SETTINGS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.reuse": "true",  # numba kernels compile once per Python worker, not per task
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
}
#: Added for ``local[...]`` masters only (a cluster's executors must reach the driver on a real address).
LOCAL_SETTINGS: dict[str, str] = {
    "spark.driver.host": "127.0.0.1",  # local runs need no network name resolution
    "spark.driver.bindAddress": "127.0.0.1",
}

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


def java_executable() -> str | None:
    """The ``java`` Spark will launch: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def require_java() -> None:
    """A KeysplitError naming the fix when Spark could not find Java."""
    if java_executable() is None:
        where = f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java" if os.environ.get("JAVA_HOME") \
            else "no java on PATH and JAVA_HOME is not set"
        raise KeysplitError(f"Spark cannot start: Java 17 or newer is required ({where}); "
                            "install a JDK (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME")


def inside_spark_submit() -> bool:
    """True when this driver was launched by ``spark-submit`` (the JVM exists and owns the settings)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


_private: list[str] = []


def _private_dir() -> str:
    """This process's folder for the JVM's log and log4j settings: ``<state folder>/spark`` (0700), or a
    fresh private temporary folder when the state folder cannot be created. Never a fixed name in the shared
    /tmp, where another user could plant the log4j file or a symlink for the log to be appended through."""
    if not _private:
        from keysplit.home import keysplit_home, private_dir

        try:
            _private.append(str(private_dir(keysplit_home() / "spark")))
        except OSError:
            _private.append(tempfile.mkdtemp(prefix="keysplit-spark-"))
    return _private[0]


def _log_config() -> str:
    path = os.path.join(_private_dir(), "log4j2.properties")
    with open(path, "w", encoding="utf-8") as fh:  # written each time: the folder is ours alone
        fh.write(_LOG4J2)
    return path


def jvm_log_path() -> str:
    """Where the JVM's own stderr goes (Spark's warnings, executor crashes): one file per driver process."""
    return os.path.join(_private_dir(), f"jvm-{os.getpid()}.log")


def jvm_failure() -> str | None:
    """The JVM's own reason for dying, from its log: the last ``Exception in thread`` or ``Error:`` line."""
    try:
        with open(jvm_log_path(), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    reasons = [line.split("Exception: ", 1)[-1] if "Exception: " in line else line
               for line in lines if line.startswith(("Exception in thread", "Error:"))]
    reasons += [f"the master gave up the application: {line.split('Reason: ', 1)[1]}"  # e.g. a master that
                for line in lines if "Application has been killed. Reason: " in line]  # never answers
    return reasons[-1].strip() if reasons else None


def parse_conf(items: list[str] | None) -> dict[str, str]:
    """``--conf KEY=VALUE`` (repeatable) as a dict; a one-line SpecError for an item without ``=``."""
    conf: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--conf {item!r}: expected KEY=VALUE (e.g. --conf spark.executor.memory=4g)")
        conf[key.strip()] = value
    return conf


class _NotPy4j(logging.Filter):
    """Drops the records py4j's own code writes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


_NOT_PY4J = _NotPy4j()


def quiet_py4j() -> None:
    """py4j logs every gateway call that breaks, with its traceback, and then raises the error to its caller
    anyway, whose one line says what happened. A Ctrl-C, which the terminal sends to the JVM too, breaks several
    calls at once: about 50 lines of tracebacks before that one line. Its records are shown with ``--verbose``
    only: those of its loggers (``py4j.*``), and those it writes through the root logger itself
    (``logging.exception`` in ``py4j/java_gateway.py``), which only a filter on the root logger can tell apart."""
    if logging.getLogger().getEffectiveLevel() > logging.INFO:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        if _NOT_PY4J not in logging.getLogger().filters:
            logging.getLogger().addFilter(_NOT_PY4J)


def get_session(master: str | None = None, driver_memory: str = DEFAULT_DRIVER_MEMORY,
                conf_overrides: dict[str, str] | None = None) -> tuple[Any, bool]:
    """The active SparkSession, or a new one; returns ``(session, created)``.

    A session that already exists (a test suite's, or spark-submit's) is reused as it is, so the caller
    stops the session only when ``created`` is true, with :func:`stop_session`. A session started here sends
    the JVM's stderr to :func:`jvm_log_path` so that the terminal shows keysplit's output only.
    ``conf_overrides`` (``--conf``) are set last, so they win over keysplit's own settings.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    quiet_py4j()
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this interpreter and its packages
    conf = SparkConf().setAppName(APP_NAME)
    for key, value in SETTINGS.items():
        conf.set(key, value)
    gateway = None
    if inside_spark_submit():
        if master:
            conf.setMaster(master)
    else:
        require_java()
        start_secs()  # a bad KEYSPLIT_SPARK_START_SECS is refused before the JVM starts
        check_master(master or DEFAULT_MASTER)
        conf.setMaster(master or DEFAULT_MASTER).set("spark.driver.memory", driver_memory)
        if (master or DEFAULT_MASTER).startswith("local"):
            for key, value in LOCAL_SETTINGS.items():
                conf.set(key, value)
        conf.set("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log_config()}")
    for key, value in (conf_overrides or {}).items():
        conf.set(key, value)
    try:
        if not inside_spark_submit():
            with open(os.open(jvm_log_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600),
                      "ab") as log:
                gateway = launch_gateway(conf, popen_kwargs={"stderr": log, "stdout": log})
        sc = _keeping_the_sigint_handler(lambda: SparkContext(conf=conf, gateway=gateway))
        session = SparkSession(sc)
    except Exception as exc:  # the JVM failed to start: one line, not the gateway's traceback
        text = str(exc).strip()
        first = jvm_failure() or (text.splitlines()[0] if text else type(exc).__name__)
        raise KeysplitError(f"Spark could not start: {first} (check Java 17+ and the --master URL; "
                            f"JVM log: {jvm_log_path()})") from None
    sc.setLogLevel("ERROR")
    try:
        if not sc.master.startswith("local"):
            ship_code(sc)
        check_workers(sc)
    except BaseException:
        stop_session(session)
        raise
    return session, True


def _keeping_the_sigint_handler(make: Any) -> Any:
    """A SparkContext made in the main thread puts its own SIGINT handler in place, which calls the JVM from inside
    the signal handler: when Ctrl-C lands while the main thread is in the middle of a py4j call, the two calls share
    one socket and the replay ends in py4j's traceback. The caller's handler stays instead; stopping the session
    on the way out (:func:`stop_session`) cancels the session's jobs."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    made = make()
    if main and previous is not None:
        signal.signal(signal.SIGINT, previous)
    return made


def stop_session(session: Any) -> None:
    """Stop a session :func:`get_session` created and remove what it left in the temporary folder (the code
    zip it shipped, the JVM log of a run that went well). Best effort: a JVM that is already gone (a signal that
    stopped the replay reached it too) has nothing left to stop, and the reason the replay ends is what is said."""
    with contextlib.suppress(Exception):  # py4j's errors when the gateway or the JVM's classes are gone
        session.stop()
    folder = _shipped.pop(id(session.sparkContext), None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    if not inside_spark_submit():
        with contextlib.suppress(OSError):
            os.remove(jvm_log_path())


#: The temporary folder of the code zip shipped by each SparkContext (removed by :func:`stop_session`).
_shipped: dict[int, str] = {}


def ship_code(sc: Any) -> None:
    """On a cluster, send the keysplit and spark_replay packages to the executors (``addPyFile``).

    Every ``.py`` file of both packages goes in, with a directory entry per package folder (zipimport finds
    packages by those entries). Their third-party dependencies (mmh3, numpy, numba, pyarrow, pandas) must be
    installed on the worker nodes. The zip stays until :func:`stop_session`: the driver serves it from there.
    """
    import keysplit
    import spark_replay

    folder = tempfile.mkdtemp(prefix="keysplit-code-")
    _shipped[id(sc)] = folder
    path = os.path.join(folder, "keysplit_code.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in (keysplit, spark_replay):
            root = os.path.dirname(package.__file__)
            base = os.path.dirname(root)
            for folder_path, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                zf.write(folder_path, os.path.relpath(folder_path, base) + "/")
                for name in sorted(files):
                    if name.endswith(".py"):
                        full = os.path.join(folder_path, name)
                        zf.write(full, os.path.relpath(full, base))
    sc.addPyFile(path)


#: What the executors must import: keysplit (installed or shipped) and its dependencies.
WORKER_MODULES = ("keysplit", "spark_replay", "numpy", "numba", "mmh3", "pyarrow", "pandas")


#: Seconds the first task may wait for an executor: a master that never grants one (no free worker, workers
#: that cannot reach this driver, a master that is not one) otherwise keeps the replay waiting for ever.
#: ``KEYSPLIT_SPARK_START_SECS`` sets another bound (a busy cluster may need longer; the tests wait seconds).
START_SECS = 120.0
START_ENV = "KEYSPLIT_SPARK_START_SECS"


def start_secs() -> float:
    """The first task's bound: ``$KEYSPLIT_SPARK_START_SECS`` if set (a positive number of seconds), else
    :data:`START_SECS`."""
    text = os.environ.get(START_ENV, "").strip()
    if not text:
        return START_SECS
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise KeysplitError(f"{START_ENV}={text!r}: expected a positive number of seconds (default {START_SECS:g})")
    return value


def _collect_within(sc: Any, rdd: Any, seconds: float) -> list:
    """``rdd.collect()``, cancelled with a one-line KeysplitError when it has not finished within ``seconds``."""
    import threading

    group = f"keysplit-start-{os.getpid()}"
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            sc.setJobGroup(group, "keysplit: the executors' first task", interruptOnCancel=True)
            done["value"] = rdd.collect()
        except BaseException as exc:  # handed to the caller's thread
            done["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        with contextlib.suppress(Exception):
            sc.cancelJobGroup(group)
        raise KeysplitError(f"no Spark executor ran the first task within {seconds:g} s (master {sc.master}): the "
                            "cluster has no free worker, or its workers cannot reach this driver (set --conf "
                            "spark.driver.host=ADDRESS)")
    if "error" in done:
        raise done["error"]
    return done["value"]


def check_master(master: str, timeout: float = 10.0) -> None:
    """A one-line KeysplitError when no master of a ``spark://host:port[,host:port]`` URL accepts a connection
    (Spark itself would retry for minutes, then leave the replay waiting for executors that never come)."""
    import socket

    if not master.startswith("spark://"):
        return
    problems = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or address, int(port or 7077)), timeout=timeout):
                return
        except (OSError, ValueError) as exc:
            problems.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    raise KeysplitError(f"cannot reach the Spark master {master} ({'; '.join(problems)}): check the URL and that "
                        "the master runs")


def check_workers(sc: Any) -> None:
    """One tiny task that imports what the replay needs on an executor; its problems become one line each.

    A worker Python of another minor version, or one that cannot import keysplit or a dependency, would
    otherwise fail the first real stage with a 40-line traceback from each task.
    """
    modules = WORKER_MODULES

    def probe(_: Any) -> list:  # nested, so cloudpickle ships it by value (the worker may lack keysplit)
        import importlib
        import sys as worker_sys

        missing = []
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                missing.append(f"{name} ({exc})")
        return [worker_sys.executable, missing]

    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    try:
        [[executable, missing]] = _collect_within(sc, sc.parallelize([0], 1).map(probe), start_secs())
    except Exception as exc:
        problem = worker_problem(str(exc), python, sc.master)
        if problem is None:
            raise
        raise KeysplitError(problem) from None
    if missing:
        raise KeysplitError(missing_modules(missing, executable, sc.master))


def missing_modules(missing: list[str], executable: str, master: str) -> str:
    """The one line for modules an executor's Python cannot import, with the fix for this kind of master."""
    names = ", ".join(m.split(" ", 1)[0] for m in missing)
    if master.startswith("local") and any(m.startswith(("keysplit", "spark_replay")) for m in missing):
        fix = (f"install keysplit in that Python, or unset PYSPARK_PYTHON so the executors run this one "
               f"({sys.executable})")
    elif any(m.startswith(("keysplit", "spark_replay")) for m in missing):
        fix = "the code zip keysplit ships did not reach the executors; check spark.submit.pyFiles"
    else:
        fix = ("install keysplit's dependencies (numpy, numba, mmh3, pyarrow, pandas) in the worker nodes' Python, "
               "or point PYSPARK_PYTHON at one that has them")
    return f"the Spark executors' Python ({executable}) cannot import {names}: {fix}"


_VERSION_MISMATCH = re.compile(r"Python in worker has different version:? \(?(\d+)[,.] ?(\d+)\)? than that in "
                               r"driver:? \(?(\d+)[,.] ?(\d+)")


def worker_problem(text: str, python: str, master: str) -> str | None:
    """The one-line explanation of a worker failure keysplit recognises in a Spark error's text, else None."""
    match = _VERSION_MISMATCH.search(text)
    if match is not None:
        worker, driver = ".".join(match.group(1, 2)), ".".join(match.group(3, 4))
        return (f"the Spark executors run Python {worker} ({python}) but this driver runs Python {driver}; "
                f"PySpark needs the same minor version on both: set PYSPARK_PYTHON to a Python {driver} that has "
                f"keysplit's dependencies on every worker node")
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", text)
    if missing is not None:
        return missing_modules([missing.group(1)], python, master)
    return None
