"""The SparkSession of this process: created lazily, once, after any fork; stopped on shutdown.

Never call `get_session` before a fork (Celery's prefork pool, gunicorn): the children would share
the parent's py4j socket and read each other's replies. Celery workers call it inside tasks and
`stop_session` from `worker_process_shutdown`.

`SPARK_LOCAL_IP=127.0.0.1` is set when absent, so the driver binds to loopback instead of the first
non-loopback interface; the UI is off.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["get_session", "stop_session"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_session: SparkSession | None = None


def get_session(master: str = "local[2]", driver_memory: str = "1g") -> SparkSession:
    """This process's session, built on first use with the project's fixed configuration."""
    global _session
    with _lock:
        if _session is not None:
            return _session
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        _session = (
            SparkSession.builder.master(master)
            .appName(f"pinot-console-{os.getpid()}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
            .getOrCreate()
        )
        _session.sparkContext.setLogLevel("WARN")
        return _session


def stop_session() -> None:
    """Stop this process's session, if any. A JVM that is already gone is not an error: a Ctrl-C
    reaches the JVM (same process group) before the worker's shutdown hook runs."""
    global _session
    with _lock:
        session, _session = _session, None
    if session is None:
        return
    from py4j.protocol import Py4JError

    try:
        session.stop()
    except (Py4JError, OSError) as exc:  # py4j cannot reach the JVM any more
        log.info("Spark JVM already gone at shutdown (%s)", exc)
