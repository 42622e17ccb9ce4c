"""The access log (`django.server`, as the settings configure it) leaves out the completion
protocol's successful calls and keeps everything else (`console.access_log`)."""

from __future__ import annotations

import logging

import pytest


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def kept():
    logger = logging.getLogger("django.server")
    handler = Kept()
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _access(request_line: str, status: str) -> None:
    logger = logging.getLogger("django.server")
    level = logging.WARNING if status.startswith(("4", "5")) else logging.INFO
    logger.log(level, '"%s" %s %s', request_line, status, "100", extra={"status_code": int(status)})


def test_successful_protocol_calls_are_left_out_and_the_rest_kept(kept):
    _access(
        "GET /segmentConsumed?instance=S&name=t__0__0__x&streamPartitionMsgOffset=4 HTTP/1.1", "200"
    )
    _access("POST /segmentCommitEndWithMetadata?instance=S&name=x HTTP/1.1", "200")
    _access("GET /segmentCommitStart?name=x HTTP/1.1", "401")  # refused: kept
    _access("GET /segments/t/t__0__0__x HTTP/1.1", "200")  # a download: kept
    _access("GET /tables HTTP/1.1", "200")
    assert [line.split('"')[1].split("?")[0] for line in kept.lines] == [
        "GET /segmentCommitStart",
        "GET /segments/t/t__0__0__x HTTP/1.1",
        "GET /tables HTTP/1.1",
    ]


def test_at_debug_every_line_is_kept(kept):
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        _access("GET /segmentConsumed?name=x HTTP/1.1", "200")
    finally:
        root.setLevel(level)
    assert len(kept.lines) == 1
