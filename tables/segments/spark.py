"""The SparkSession of this process: created lazily, once, after any fork; stopped on shutdown.

Never call `get_session` before a fork (Celery's prefork pool, gunicorn): the children would share
the parent's py4j socket and read each other's replies. Celery workers call it inside tasks and
`stop_session` from `worker_process_shutdown`. One process has one session: asking for another
master while one runs raises `ValueError` (stop it first).

The driver binds to and advertises `SPARK_LOCAL_IP` (set to 127.0.0.1 when absent: loopback, as
for `local[N]`); the UI is off. Other Spark properties come from Spark's own
`$SPARK_CONF_DIR/spark-defaults.conf` (for example `spark.executor.memory`, `spark.cores.max`),
except the ones set here, which win.

On a cluster (`spark://host:port`, any master that is not `local...`), executors run the Python
at `PYSPARK_PYTHON` (set to this interpreter when absent: the same path must exist on every worker
host, with the same Python minor version and the project's requirements), and get the project's
code from the driver: the `tables` package, zipped at session start and added with
`SparkContext.addPyFile`, so nothing of the project is installed on the workers. The session then
runs one small job whose function is pickled by reference to this module: it fails at once, with
the executors' error, when they cannot import the project's code or run that Python, or when no
executor takes the job within `EXECUTOR_WAIT_SECONDS` (a cluster without free cores or memory for
`spark.executor.memory`). What else executors need (the build's work directory on a shared file
system, a reachable deep store and stream) is in the builder's docstring and the README.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

__all__ = ["EXECUTOR_WAIT_SECONDS", "get_session", "stop_session"]

log = logging.getLogger(__name__)

#: How long a new cluster session waits for an executor to run its first job.
EXECUTOR_WAIT_SECONDS = 180.0
_CODE_ZIP = "tables.zip"

_lock = threading.Lock()
_session: SparkSession | None = None
_code_dir: str | None = None


def get_session(master: str = "local[2]", driver_memory: str = "1g") -> SparkSession:
    """This process's session, built on first use with the project's fixed configuration."""
    global _session
    with _lock:
        if _session is not None:
            running = _session.sparkContext.master
            if running != master:
                raise ValueError(f"this process's Spark session runs on {running}, not {master}")
            return _session
        host = os.environ["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1"
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        session = (
            SparkSession.builder.master(master)
            .appName(f"pinot-console-{os.getpid()}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.bindAddress", host)
            .config("spark.driver.host", host)
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("WARN")
        if not master.startswith("local"):
            try:
                _prepare_executors(session.sparkContext)
            except BaseException:
                _stop(session)
                raise
        _session = session
        return _session


def _prepare_executors(sc: SparkContext) -> None:
    """Ship the project's code to the executors, then check that they can run it."""
    global _code_dir
    _code_dir = tempfile.mkdtemp(prefix="spark-pyfiles-")
    atexit.register(shutil.rmtree, _code_dir, True)  # also when stop_session never runs
    archive = Path(_code_dir) / _CODE_ZIP
    package = Path(__file__).resolve().parent.parent  # the `tables` package
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for source in sorted(package.rglob("*.py")):
            out.write(source, source.relative_to(package.parent).as_posix())
    before = list(sys.path)
    sc.addPyFile(str(archive))
    sys.path[:] = before  # the driver keeps importing its own checkout, not the copy

    tag = f"executor-check-{os.getpid()}"
    sc.addJobTag(tag)
    timer = threading.Timer(EXECUTOR_WAIT_SECONDS, sc.cancelJobsWithTag, [tag])
    timer.start()
    try:
        found = sc.parallelize([0], 1).map(_executor_facts).collect()
    except Exception as exc:
        waited = "" if timer.is_alive() else f" (no executor ran it in {EXECUTOR_WAIT_SECONDS} s)"
        raise RuntimeError(
            f"Spark executors on {sc.master} cannot run the project's code{waited}: "
            f"{_last_error_line(str(exc))}"
        ) from exc
    finally:
        timer.cancel()
        sc.removeJobTag(tag)
    log.info("Spark executors on %s: %s", sc.master, found[0])


def _last_error_line(text: str) -> str:
    """The Python error at the end of an executor's traceback, else the message's first line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]
    return (errors or lines or [""])[-1 if errors else 0]


def _executor_facts(_: object) -> dict[str, str]:
    """Runs on an executor (pickled by reference: it imports this module from the shipped zip)."""
    return {"python": sys.version.split()[0], "executable": sys.executable, "code": __file__}


def _stop(session: SparkSession) -> None:
    global _code_dir
    from py4j.protocol import Py4JError

    try:
        session.stop()
    except (Py4JError, OSError) as exc:  # py4j cannot reach the JVM any more
        log.info("Spark JVM already gone at shutdown (%s)", exc)
    finally:
        if _code_dir is not None:
            shutil.rmtree(_code_dir, ignore_errors=True)
            _code_dir = None


def stop_session() -> None:
    """Stop this process's session, if any. A JVM that is already gone is not an error: a Ctrl-C
    reaches the JVM (same process group) before the worker's shutdown hook runs."""
    global _session
    with _lock:
        session, _session = _session, None
    if session is not None:
        _stop(session)
