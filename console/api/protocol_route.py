"""The segment completion protocol's calls go straight to their views, first in the middleware.

Servers call the lead controller's protocol endpoints (`segmentConsumed` and the rest, `PATHS`)
for every commit, and every replica of a paused table polls `segmentConsumed` while it is held:
hundreds of calls a second during a pause. They are internal calls, authenticated by the cluster
token (`console.api.completion.protocol_call`), and use nothing the rest of the middleware gives
a browser or an API client: sessions, CSRF, login, messages, HTMX, static files, security headers.
Walking that chain and the URL resolver's patterns (the pages', /api/v1's and Pinot's, in that
order) cost the controller more per call than the protocol views themselves (`bench/pause.py`, 64
partitions, py-spy: 24 % of the controller's samples in the other middleware and 9.5 % in URL
resolution, against 30 % in the protocol views).

So this middleware, listed first, answers exactly those paths with the view the URLconf routes
them to (resolved once per URLconf), and keeps what the rest of the chain would have done for
them: a store outage answers 503 (`console.middleware.unavailable_response`), a wrong method
Pinot's JSON 405 (`console.api.http_errors.json_not_allowed`), the Content-Length that
CommonMiddleware sets (without it Django's HTTP server closes the connection after each reply, and
the servers keep theirs alive: `tables.server.http_pool`); any other exception propagates to
Django's handler (a logged 500). Every other path goes down the chain unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from console.api.http_errors import json_not_allowed
from console.middleware import unavailable_response

__all__ = ["PATHS", "ProtocolRouteMiddleware"]

#: The protocol's paths (console/api/urls.py), as servers call them.
PATHS = (
    "/segmentConsumed",
    "/segmentStoppedConsuming",
    "/segmentCommitStart",
    "/segmentCommitEndWithMetadata",
    "/extendBuildTime",
)

View = Callable[[HttpRequest], HttpResponse]


class ProtocolRouteMiddleware:
    def __init__(self, get_response: View) -> None:
        self.get_response = get_response
        self._views: dict[str, dict[str, View]] = {}

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = self._routes().get(request.path_info)
        if view is None:
            return self.get_response(request)
        try:
            response = view(request)
        except Exception as exc:
            unavailable = unavailable_response(request, exc)
            if unavailable is None:
                raise
            response = unavailable
        response = json_not_allowed(request, response)
        if not response.streaming and not response.has_header("Content-Length"):
            # CommonMiddleware's: the connection stays open (module docstring)
            response.headers["Content-Length"] = str(len(response.content))
        return response

    def _routes(self) -> dict[str, View]:
        """Each path's view as the current URLconf routes it (resolved at its first call: the
        URLconf may import what is not ready when the middleware is made); a URLconf without the
        protocol (a test's) routes nothing here."""
        urlconf = settings.ROOT_URLCONF
        views = self._views.get(urlconf)
        if views is None:
            views = self._views[urlconf] = {}
            for path in PATHS:
                try:
                    views[path] = resolve(path, urlconf).func
                except Resolver404:
                    continue
        return views
