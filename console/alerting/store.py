"""Alertmanager's webhook payload, checked, and the alerts it reports, stored.

`parse(body)` turns the JSON Alertmanager posts (webhook format version "4": `status`, `receiver`,
`alerts` each with `status`, `labels`, `annotations`, `startsAt`, `endsAt`, `generatorURL`,
`fingerprint`) into `Reported` alerts, or raises `BadPayload` with the reason (the view answers
400). `apply(reported, now)` upserts them by fingerprint: a firing alert is (again) firing, a
resolved one resolved; nothing else changes. `active(table=None)` is what the pages show: the
firing alerts, all or those whose `table` label is the raw table name, critical first.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from console.models import AlertmanagerAlert

__all__ = ["RESOLVED_RETENTION", "BadPayload", "Reported", "active", "apply", "parse"]

RESOLVED_RETENTION = dt.timedelta(days=7)
MAX_ALERTS = 1000
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
_ZERO_TIME_YEAR = 1  # Go's zero time ("0001-01-01T00:00:00Z"): no end yet


class BadPayload(ValueError):
    """The body is not an Alertmanager webhook notification; the message says why."""


@dataclass(frozen=True)
class Reported:
    fingerprint: str
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: dt.datetime
    ends_at: dt.datetime | None
    generator_url: str


def _string_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise BadPayload(f"{where} must be an object of strings")
    return value


def _time(value: Any, where: str, *, optional: bool = False) -> dt.datetime | None:
    if optional and value in (None, ""):
        return None
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None or parsed.tzinfo is None:
        raise BadPayload(f"{where} must be an RFC 3339 time, got {value!r}")
    if optional and parsed.year == _ZERO_TIME_YEAR:
        return None
    return parsed


def _alert(raw: Any, index: int) -> Reported:
    where = f"alerts[{index}]"
    if not isinstance(raw, dict):
        raise BadPayload(f"{where} must be an object")
    status = raw.get("status")
    if status not in AlertmanagerAlert.Status.values:
        raise BadPayload(f"{where}.status must be 'firing' or 'resolved', got {status!r}")
    labels = _string_map(raw.get("labels"), f"{where}.labels")
    if not labels.get("alertname"):
        raise BadPayload(f"{where}.labels has no alertname")
    fingerprint = raw.get("fingerprint")
    if not isinstance(fingerprint, str) or not 0 < len(fingerprint) <= 64:
        raise BadPayload(f"{where}.fingerprint must be a string of 1 to 64 characters")
    generator = raw.get("generatorURL", "")
    if not isinstance(generator, str) or len(generator) > 2048:
        raise BadPayload(f"{where}.generatorURL must be a string of at most 2048 characters")
    return Reported(
        fingerprint=fingerprint,
        status=status,
        labels=labels,
        annotations=_string_map(raw.get("annotations", {}), f"{where}.annotations"),
        starts_at=_time(raw.get("startsAt"), f"{where}.startsAt"),  # type: ignore[arg-type]
        ends_at=_time(raw.get("endsAt"), f"{where}.endsAt", optional=True),
        generator_url=generator,
    )


def parse(body: Any) -> tuple[str, list[Reported]]:
    """The receiver's name and the alerts of one webhook notification; BadPayload if not one."""
    if not isinstance(body, dict):
        raise BadPayload("the body must be a JSON object (Alertmanager's webhook notification)")
    version = body.get("version", "4")
    if version != "4":
        raise BadPayload(f"webhook format version {version!r} is not supported (only '4')")
    alerts = body.get("alerts")
    if not isinstance(alerts, list):
        raise BadPayload("'alerts' must be a list")
    if len(alerts) > MAX_ALERTS:
        raise BadPayload(f"at most {MAX_ALERTS} alerts per notification, got {len(alerts)}")
    receiver = body.get("receiver", "")
    if not isinstance(receiver, str):
        raise BadPayload("'receiver' must be a string")
    return receiver[:256], [_alert(raw, i) for i, raw in enumerate(alerts)]


def _partition(labels: dict[str, str]) -> int | None:
    value = labels.get("partition", "")
    return int(value) if value.isdigit() and len(value) < 10 else None


def apply(receiver: str, reported: list[Reported], now: dt.datetime) -> dict[str, int]:
    """Upsert the reported alerts by fingerprint; returns how many are firing and resolved."""
    counts = {"firing": 0, "resolved": 0}
    with transaction.atomic():
        for alert in reported:
            AlertmanagerAlert.objects.update_or_create(
                fingerprint=alert.fingerprint,
                defaults={
                    "alertname": alert.labels["alertname"][:256],
                    "status": alert.status,
                    "severity": alert.labels.get("severity", "")[:32],
                    "table": alert.labels.get("table", "")[:256],
                    "partition": _partition(alert.labels),
                    "labels": alert.labels,
                    "annotations": alert.annotations,
                    "starts_at": alert.starts_at,
                    "ends_at": alert.ends_at,
                    "generator_url": alert.generator_url,
                    "receiver": receiver,
                    "received_at": now,
                },
            )
            counts[alert.status] += 1
        AlertmanagerAlert.objects.filter(
            status=AlertmanagerAlert.Status.RESOLVED, received_at__lt=now - RESOLVED_RETENTION
        ).delete()
    return counts


def active(table: str | None = None) -> list[AlertmanagerAlert]:
    """The firing alerts (of one raw table name if given), critical first, then the oldest."""
    rows = AlertmanagerAlert.objects.filter(status=AlertmanagerAlert.Status.FIRING)
    if table is not None:
        rows = rows.filter(table=table)
    found = list(rows.order_by("starts_at")[:200])
    found.sort(key=lambda a: SEVERITY_ORDER.get(a.severity, len(SEVERITY_ORDER)))
    return found
