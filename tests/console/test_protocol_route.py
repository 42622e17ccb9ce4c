"""The completion protocol's calls are answered first in the middleware
(console.api.protocol_route): by the view the URLconf routes them to, with the rest of the
chain's 503 and 405, and no more."""

from __future__ import annotations

import pytest
import redis
from django.test import Client
from django.urls import resolve

from console.api import completion
from console.api.protocol_route import PATHS, ProtocolRouteMiddleware
from tables.domain.completion import Response, Status


class _Manager:
    """Stands in for the controller's CompletionManager: answers `status`, or raises `error`."""

    def __init__(self, status: Status = Status.HOLD, error: Exception | None = None) -> None:
        self.status, self.error, self.calls = status, error, []

    def authenticate(self, *args: object) -> None:
        if self.error is not None:
            raise self.error

    def segment_consumed(self, *args: object) -> Response:
        self.calls.append(args)
        return Response(self.status, offset="7")


@pytest.fixture
def manager(monkeypatch):
    found = _Manager()
    monkeypatch.setattr(completion, "manager", lambda: found)
    return found


CALL = {
    "instance": "Server_a_1",
    "name": "t__0__0__20260101T0000Z",
    "streamPartitionMsgOffset": "7",
}


def test_every_path_is_the_urlconfs_view():
    middleware = ProtocolRouteMiddleware(lambda request: pytest.fail("went down the chain"))
    assert middleware._routes() == {p: resolve(p).func for p in PATHS}


def test_a_urlconf_without_the_protocol_routes_nothing_here(settings):
    middleware = ProtocolRouteMiddleware(lambda request: pytest.fail("not asked"))
    settings.ROOT_URLCONF = "tests.console.test_protocol_route"
    assert middleware._routes() == {}
    settings.ROOT_URLCONF = "console.urls"
    assert set(middleware._routes()) == set(PATHS)


urlpatterns: list = []  # the URLconf of the test above


def test_a_call_reaches_its_view_and_skips_the_rest_of_the_chain(manager):
    response = Client().get("/segmentConsumed", CALL)
    assert response.status_code == 200
    assert response.json()["status"] == "HOLD"
    assert manager.calls == [("Server_a_1", CALL["name"], 7, None, -1, False)]
    # SecurityMiddleware and XFrameOptionsMiddleware, next in the chain, add these to the rest.
    assert "X-Content-Type-Options" not in response
    assert "X-Frame-Options" not in response
    assert "X-Frame-Options" in Client().get("/nope")
    # CommonMiddleware's Content-Length is kept: Django's HTTP server keeps the connection open.
    assert response["Content-Length"] == str(len(response.content))


def test_an_outage_answers_503_and_a_bug_500(manager):
    manager.error = redis.ConnectionError("Connection refused")
    response = Client().get("/segmentConsumed", CALL)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response["Content-Length"] == str(len(response.content))
    assert "Redis" in response.json()["error"]
    manager.error = ValueError("a bug")
    assert Client(raise_request_exception=False).get("/segmentConsumed", CALL).status_code == 500


def test_a_wrong_method_answers_pinots_405(manager):
    response = Client().post("/segmentConsumed", CALL)
    assert response.status_code == 405
    assert response.json() == {"code": 405, "error": 'Method "POST" not allowed (allowed: GET)'}
    assert response["Allow"] == "GET"
    assert response["Content-Length"] == str(len(response.content))
    assert manager.calls == []
