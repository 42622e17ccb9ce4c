"""A store that is down answers 503 with the reason, never 500.

ZooKeeper or Redis may stall or restart under any request. Whatever view was running, an error
that `tables.outages.outage_reason` recognises becomes HTTP 503 with a `Retry-After`: Pinot's error
JSON (`{"code": 503, "error": ...}`) for API clients, a short page for browsers. Every other
exception is left to Django (a 500 and a logged traceback: a bug).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from tables.domain.backoff import LogThrottle
from tables.outages import outage_reason

__all__ = ["StoreUnavailableMiddleware", "unavailable_response"]

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5
_throttle = LogThrottle(every_s=60.0)


def _wants_html(request: HttpRequest) -> bool:
    accept = request.headers.get("Accept", "")
    return "text/html" in accept and "application/json" not in accept


class StoreUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        return unavailable_response(request, exc)


def unavailable_response(request: HttpRequest, exc: Exception) -> HttpResponse | None:
    """The 503 of an outage `exc` (logged once a minute per cause); None for any other error."""
    reason = outage_reason(exc)
    if reason is None:
        return None
    write, held = _throttle.allow(type(exc).__name__, time.monotonic())
    if write:
        log.warning(
            "%s %s: 503, %s (%d similar held back)", request.method, request.path, reason, held
        )
    if _wants_html(request):
        body = render_to_string("console/unavailable.html", {"reason": reason}, request)
        response: HttpResponse = HttpResponse(body, status=503)
    else:
        response = JsonResponse({"code": 503, "error": reason}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    response._has_been_logged = True  # logged above, once a minute: not one ERROR per request
    return response
