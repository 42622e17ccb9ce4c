"""The alerting endpoints.

- `POST /api/v1/alerts/webhook`: Alertmanager's webhook receiver (deploy/alertmanager/).
  Authenticated by `Authorization: Bearer <ALERT_WEBHOOK_TOKEN>` (401 without or with a wrong
  token, 403 while no token is configured); the body is Alertmanager's notification JSON (400 with
  the reason otherwise). Answers `{"firing": n, "resolved": m}`. Not a console API: no session, no
  CSRF, not in the OpenAPI schema.
- `POST /ui/alerts/silence/` (a page form, CSRF-protected): silences one stored alert through
  Alertmanager (`console.alerting.silences`), then back to the page it came from with
  `?silenced=<id>`; a refusal renders the reason with its status.
"""

from __future__ import annotations

import hmac
import json
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from console.alerting import silences, store

__all__ = ["silence", "webhook"]


def _error(status: int, reason: str) -> JsonResponse:
    response = JsonResponse({"code": status, "error": reason}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


def _token_error(request: HttpRequest) -> JsonResponse | None:
    expected = settings.ALERT_WEBHOOK_TOKEN
    if not expected:
        return _error(403, "the alert webhook is off: set ALERT_WEBHOOK_TOKEN")
    parts = request.headers.get("Authorization", "").split()
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return _error(401, "the alert webhook needs 'Authorization: Bearer <ALERT_WEBHOOK_TOKEN>'")
    if not hmac.compare_digest(parts[1].encode(), expected.encode()):
        return _error(401, "invalid alert webhook token")
    return None


@csrf_exempt
@login_not_required
@require_POST
def webhook(request: HttpRequest) -> JsonResponse:
    refused = _token_error(request)
    if refused is not None:
        return refused
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError) as exc:
        return _error(400, f"the body is not JSON: {exc}")
    except RecursionError:
        return _error(400, "the body is nested too deeply")
    try:
        receiver, reported = store.parse(body)
    except store.BadPayload as exc:
        return _error(400, str(exc))
    return JsonResponse(store.apply(receiver, reported, timezone.now()))


def _back(request: HttpRequest) -> str:
    target = request.POST.get("next", "")
    if not target or not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("console:home")
    return target.split("?")[0]


@require_POST
def silence(request: HttpRequest) -> HttpResponse:
    try:
        silence_id = silences.create(
            request,
            request.POST.get("alert", ""),
            request.POST.get("duration", ""),
            request.POST.get("comment", ""),
        )
    except silences.Refused as exc:
        response = render(
            request, "console/pages/refused.html", {"reason": exc.reason}, status=exc.status
        )
        response["Cache-Control"] = "no-store"
        return response
    return redirect(f"{_back(request)}?{urlencode({'silenced': silence_id})}")
