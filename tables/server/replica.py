"""A server's replica of one segment, and the exception a transition step raises to wait.

`Replica` is the state `tables.server.instance.ServerInstance` keeps per hosted segment (its
contract is in that module); `WaitingFor` defers a transition step that cannot go on yet (a
COMMITTING segment without a download URL, a consumer still committing): the step is tried again
after `delay_s` and no transition thread is held meanwhile.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tables.domain.segment_states import SegmentState

from .consumer import SegmentConsumer
from .local_segments import DownloadWait

__all__ = ["WAIT_POLL_S", "Replica", "WaitingFor"]

WAIT_POLL_S = 1.0  # a waiting transition looks again this often (Pinot sleeps 30 s)


class WaitingFor(Exception):
    """Raised by a transition step that cannot go on yet: it is tried again after `delay_s`."""

    def __init__(self, what: str, delay_s: float = WAIT_POLL_S) -> None:
        super().__init__(what)
        self.what, self.delay_s = what, delay_s


@dataclass
class Replica:
    """This instance's replica of one segment."""

    state: SegmentState | None = None  # None: never hosted (Helix's initial OFFLINE)
    busy: bool = False
    consumer: SegmentConsumer | None = None
    error: str | None = None
    since_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    failures: int = 0  # transitions failed in a row: the next try waits (capped back-off)
    retry_at: float = 0.0  # time.monotonic() before which no transition is tried again
    failed_consumer: SegmentConsumer | None = None  # kept after a failure: why it stopped
    waiting: str | None = None  # what a deferred transition waits for (module contract)
    download_wait: DownloadWait | None = None  # since the segment was first seen COMMITTING

    def end_wait(self) -> None:
        self.waiting, self.download_wait = None, None
