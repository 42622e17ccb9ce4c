"""The web processes' access log (Django's `django.server` logger) without the completion
protocol's successful calls.

Every replica of a committing or paused table calls `segmentConsumed` again and again while it is
held, and every commit makes three more calls: at 64 partitions that is hundreds of access lines
a second, each formatted and written under the logging lock by a request thread (py-spy of the
controller during `bench/pause.py`: 4 % of its samples). What those calls decided is logged by
the completion FSM itself. So a call to one of the protocol paths
(`console.api.protocol_route.PATHS`) that answered below 400 is left out; its warnings and errors
(4xx, 5xx) are kept, and at `LOG_LEVEL=DEBUG` every line is.

This module imports nothing of Django: the logging configuration loads it before the apps.
"""

from __future__ import annotations

import logging

__all__ = ["QuietProtocolCalls"]


class QuietProtocolCalls(logging.Filter):
    _paths: frozenset[str] | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or logging.getLogger().isEnabledFor(logging.DEBUG):
            return True
        request_line = record.args[0] if isinstance(record.args, tuple) and record.args else ""
        parts = str(request_line).split(" ", 2)
        if len(parts) < 2:
            return True
        return parts[1].split("?", 1)[0] not in self._protocol_paths()

    @classmethod
    def _protocol_paths(cls) -> frozenset[str]:
        if cls._paths is None:
            from console.api.protocol_route import PATHS  # after Django's setup

            cls._paths = frozenset(PATHS)
        return cls._paths
