"""Fault injection, for tests only: named points where a process fails on purpose.

Contract:
- Off unless the setting `FAULT_INJECTION_DIR` names a directory (empty: off, the default). Off,
  `trip` returns False without touching the file system and never raises.
- A point is armed by creating the file `<FAULT_INJECTION_DIR>/<point>` (any content).
  `trip(point)` deletes it (`os.unlink`) and returns True; only the caller whose unlink succeeds
  wins, so one file trips exactly once, even with several threads or processes watching the
  same point. A missing file (or one that cannot be deleted: logged) is False.
- `exit_if(point)`: when `trip(point)`, log CRITICAL "fault injection: exiting at <point>" and end
  the process at once with `os._exit(EXIT_CODE)` (86): no cleanup, like a crash.
- `held(point)`: True while the file `<FAULT_INJECTION_DIR>/<point>` exists (it is not deleted):
  a hold, not a one-off failure; the test removes the file to let the process go on.
- Point names are plain file names (no "/"); a bad name raises ValueError when injection is on.
  The points in use: `controller.commit.after_step1` and `controller.commit.after_step2`
  (`tables.controller.llc`), `server.<instanceId>.<segment>.consumer_fails`,
  `server.<instanceId>.consumer_fails` and
  `server.any.consumer_fails` (`tables.server.consumer`), `server.<instanceId>.download_fails` and
  `server.any.download_fails` (`tables.server.local_segments`), `spark.<segment>.build_fails`
  and `spark.build_fails` (`tables.builds`: a committer's Spark build fails; checked in the spark
  worker, so its FAULT_INJECTION_DIR is the one to arm), `server.<instanceId>.upload_fails` and
  `server.any.upload_fails` (`tables.server.committer`: the committer's deep-store upload of the
  segment it built fails; with a peer download scheme it commits `peer:///<segment>`); held:
  `spark.<segment>.build_rejects` (`tables.builds`: while it exists, every build of that segment
  fails DETERMINISTICALLY, as a config the build refuses would: the build back-off's test point;
  armed in the spark worker's directory), `server.<instanceId>.consumer_holds`
  (`tables.server.consumer`: no consumer of that server fetches while it exists) and
  `server.<instanceId>.commit_holds` (`tables.server.committer`: its committer does not send
  commit end while it exists).
- This module imports neither `tables.server` nor `tables.controller`: both import it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path

from django.conf import settings

__all__ = ["EXIT_CODE", "exit_if", "held", "trip"]

log = logging.getLogger(__name__)

EXIT_CODE = 86


def _directory() -> str:
    return str(getattr(settings, "FAULT_INJECTION_DIR", "") or "")


def _check(point: str) -> None:
    if not point or "/" in point or "\\" in point or point in (".", ".."):
        raise ValueError(f"{point!r} is not a fault-injection point name")


def held(point: str) -> bool:
    """True while the fault file of `point` exists (a hold: the file is left in place)."""
    directory = _directory()
    if not directory:
        return False
    _check(point)
    return (Path(directory) / point).is_file()


def trip(point: str) -> bool:
    """Consume the fault file of `point`; True when this caller deleted it (see the contract)."""
    directory = _directory()
    if not directory:
        return False
    _check(point)
    try:
        (Path(directory) / point).unlink()  # os.unlink: exactly one caller succeeds
    except FileNotFoundError:
        return False
    except OSError as exc:  # a directory of that name, no permission: not armed
        log.warning("fault injection: cannot consume %s in %s: %s", point, directory, exc)
        return False
    log.warning("fault injection: tripped %s", point)
    return True


def exit_if(point: str) -> None:
    """End the process (exit status 86) when `point` trips."""
    if not trip(point):
        return
    log.critical("fault injection: exiting at %s", point)
    # Dying anyway: flush what can be flushed and never fail on the way out.
    for flushable in (*logging.getLogger().handlers, sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            flushable.flush()
    os._exit(EXIT_CODE)
