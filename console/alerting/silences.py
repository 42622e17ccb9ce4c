"""Silences created from the console through Alertmanager's API v2 (`POST /api/v2/silences`).

`create(request, fingerprint, duration, comment)` silences one alert the console stores (every
label of it matched exactly, as Alertmanager's own "Silence" button does) for `duration` (a Pinot
period: "30m", "2h", "1d"; at most `MAX_SILENCE`), created by the signed-in user, and audits the
outcome (action `silence_alert`, target `alertname{labels}`) whatever it is. It returns
Alertmanager's silence id, or raises `Refused` with an HTTP status and a reason: 403 for a role
that may not silence, 400 for bad input or a silence Alertmanager rejects (its message), 404 for
an unknown alert, 409 when no Alertmanager is configured (`ALERTMANAGER_URL`), 502 when it cannot
be reached or fails.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from typing import Any

from django.conf import settings
from django.utils import timezone

from console import roles
from console.audit import record
from console.models import AlertmanagerAlert
from tables.domain.periods import parse_period
from tables.models import AuditEntry

__all__ = ["ACTION", "MAX_SILENCE", "Refused", "create", "post_silence"]

ACTION = "silence_alert"
MAX_SILENCE = dt.timedelta(days=7)
MAX_COMMENT = 1000


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _duration(text: str) -> dt.timedelta:
    try:
        seconds = parse_period(text.strip())
    except ValueError:
        seconds = None
    if not seconds or seconds <= 0:
        raise Refused(400, f"duration {text!r} is not a positive period such as 30m, 2h or 1d")
    if seconds > MAX_SILENCE.total_seconds():
        raise Refused(400, f"duration {text!r} is longer than {MAX_SILENCE.days} days")
    return dt.timedelta(seconds=seconds)


def post_silence(base_url: str, silence: dict[str, Any], timeout_s: float) -> str:
    """POST one silence to Alertmanager's API v2; its id, or Refused (400 or 502) with why."""
    request = urllib.request.Request(
        f"{base_url}/api/v2/silences",
        data=json.dumps(silence).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            body = json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        text = exc.read(2000).decode(errors="replace").strip()
        status = 400 if 400 <= exc.code < 500 else 502
        raise Refused(
            status, f"Alertmanager refused the silence (HTTP {exc.code}): {text}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Refused(502, f"Alertmanager at {base_url} cannot be reached: {reason}") from None
    except ValueError:
        raise Refused(
            502, f"Alertmanager at {base_url} answered something that is not JSON"
        ) from None
    silence_id = body.get("silenceID") if isinstance(body, dict) else None
    if not isinstance(silence_id, str) or not silence_id:
        raise Refused(502, f"Alertmanager at {base_url} answered without a silenceID: {body!r}")
    return silence_id


def _target(alert: AlertmanagerAlert | None, fingerprint: str) -> str:
    if alert is None:
        return f"alert {fingerprint}"
    shown = ",".join(f"{k}={v}" for k, v in sorted(alert.labels.items()) if k != "alertname")
    return f"{alert.alertname}{{{shown}}}"


def _silence(alert: AlertmanagerAlert, length: dt.timedelta, comment: str, user: str) -> dict:
    now = timezone.now()
    return {
        "matchers": [
            {"name": name, "value": value, "isRegex": False, "isEqual": True}
            for name, value in sorted(alert.labels.items())
        ],
        "startsAt": now.isoformat(),
        "endsAt": (now + length).isoformat(),
        "createdBy": user,
        "comment": comment,
    }


def _checked(
    alert: AlertmanagerAlert | None, fingerprint: str, duration: str, comment: str
) -> tuple[dt.timedelta, str]:
    if alert is None:
        raise Refused(404, f"no alert with fingerprint {fingerprint!r} is stored")
    length = _duration(duration)
    comment = comment.strip()
    if not comment:
        raise Refused(400, "a comment is required: say why the alert is silenced")
    if len(comment) > MAX_COMMENT:
        raise Refused(400, f"the comment is longer than {MAX_COMMENT} characters")
    if not settings.ALERTMANAGER_URL:
        raise Refused(409, "no Alertmanager is configured: set ALERTMANAGER_URL")
    return length, comment


def create(request: Any, fingerprint: str, duration: str, comment: str) -> str:
    """Silence the stored alert `fingerprint` in Alertmanager; audited. Refused on any failure."""
    alert = AlertmanagerAlert.objects.filter(fingerprint=fingerprint[:64]).first()
    target = _target(alert, fingerprint[:64])
    if not roles.can(request.user, ACTION):
        record(request, ACTION, target, AuditEntry.Result.DENIED, status_code=403)
        raise Refused(403, "your role may not silence alerts (operators and admins may)")
    try:
        length, comment = _checked(alert, fingerprint, duration, comment)
        silence = _silence(alert, length, comment, request.user.username)
        silence_id = post_silence(
            settings.ALERTMANAGER_URL, silence, settings.ALERTMANAGER_TIMEOUT_SECONDS
        )
    except Refused as exc:
        result = AuditEntry.Result.FAILED if exc.status >= 500 else AuditEntry.Result.REJECTED
        record(
            request,
            ACTION,
            target,
            result,
            reason=comment,
            status_code=exc.status,
            detail={"error": exc.reason},
        )
        raise
    AlertmanagerAlert.objects.filter(pk=alert.pk).update(
        silence_id=silence_id, silenced_until=dt.datetime.fromisoformat(silence["endsAt"])
    )
    record(
        request,
        ACTION,
        target,
        AuditEntry.Result.OK,
        reason=comment,
        status_code=200,
        detail={
            "silenceID": silence_id,
            "endsAt": silence["endsAt"],
            "alertmanager": settings.ALERTMANAGER_URL,
        },
    )
    return silence_id
