"""A store that is down answers 503 with the reason, never 500 (console.middleware)."""

from __future__ import annotations

import json

import pytest
import redis
from django.test import RequestFactory
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kombu.exceptions import OperationalError

from console.middleware import StoreUnavailableMiddleware
from tables.cluster.errors import Unavailable
from tables.streams import StreamUnavailable
from tables.zk.client import ZooKeeperUnavailable


def middleware() -> StoreUnavailableMiddleware:
    return StoreUnavailableMiddleware(lambda request: None)


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (ConnectionLoss(), "ZooKeeper"),
        (SessionExpiredError(), "ZooKeeper"),
        (ZooKeeperUnavailable("ZooKeeper at x is unreachable"), "unreachable"),
        (Unavailable("ZooKeeper at x is unreachable"), "unreachable"),
        (redis.ConnectionError("Connection refused"), "Redis"),
        (redis.TimeoutError("Timeout reading from socket"), "Redis"),
        (StreamUnavailable("Redis is not reachable: stalled"), "Redis"),
        (OperationalError("Error 111 connecting"), "task queue"),
    ],
)
def test_an_outage_is_a_503_with_its_reason(exc, says):
    request = RequestFactory().get("/tables", HTTP_ACCEPT="application/json")
    response = middleware().process_exception(request, exc)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    body = json.loads(response.content)
    assert body["code"] == 503 and says in body["error"]


def test_a_browser_gets_a_page_that_reloads_itself():
    request = RequestFactory().get("/", HTTP_ACCEPT="text/html,application/xhtml+xml")
    response = middleware().process_exception(request, redis.ConnectionError("refused"))
    assert response.status_code == 503
    assert b"Temporarily unavailable" in response.content
    assert b'http-equiv="refresh"' in response.content


def test_any_other_error_is_left_to_django():
    request = RequestFactory().get("/tables")
    assert middleware().process_exception(request, ValueError("a bug")) is None
    assert middleware().process_exception(request, KeyError("x")) is None
