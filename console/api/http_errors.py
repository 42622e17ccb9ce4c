"""Errors that Django answers before or around a view, as Pinot's JSON on the API paths.

Pinot's controller answers every error as `{"code": <status>, "error": <message>}`. DRF views do
already (`console.api.errors`); this covers what Django itself answers:
- `not_found` is `handler404` (console/urls.py): an unknown path, or a plain view raising Http404.
- `JsonMethodNotAllowedMiddleware` rewrites the empty 405 of Django's `require_GET`/`require_POST`
  views (the completion protocol, /healthz, /metrics), keeping the `Allow` header.
The console's own pages keep Django's HTML: the root page and everything under /ui/, /admin/,
/login/, /logout/ and /api/docs. Every other path is an API path.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found

__all__ = ["JsonMethodNotAllowedMiddleware", "is_api_path", "json_not_allowed", "not_found"]

PAGE_PREFIXES = ("/ui/", "/admin/", "/login/", "/logout/", "/api/docs")


def is_api_path(path: str) -> bool:
    """Whether `path` is Pinot's or the console's JSON API, not one of the console's pages."""
    if path in ("", "/"):
        return False
    return not any(path.startswith(p) or path == p.rstrip("/") for p in PAGE_PREFIXES)


def _pinot_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"code": status, "error": message}, status=status)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not is_api_path(request.path_info):
        return page_not_found(request, exception)
    return _pinot_error(404, f"not found: {request.method} {request.path_info[:200]}")


class JsonMethodNotAllowedMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return json_not_allowed(request, self.get_response(request))


def json_not_allowed(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """`response` itself, unless it is Django's empty 405 on an API path: then Pinot's JSON."""
    if (
        response.status_code == 405
        and is_api_path(request.path_info)
        and not response.get("Content-Type", "").startswith("application/json")
    ):
        allowed = response.get("Allow", "")
        json = _pinot_error(405, f'Method "{request.method}" not allowed (allowed: {allowed})')
        if allowed:
            json["Allow"] = allowed
        return json
    return response
