"""The console's own data that mirrors nothing in ZooKeeper: the alerts Alertmanager reports.

`AlertmanagerAlert` is one alert as Alertmanager's webhook last described it, keyed by
Alertmanager's fingerprint (a hash of the labels, stable across notifications). A firing alert stays
firing until a notification says it resolved; resolved rows are kept a while for the record
(`console.alerting.store.RESOLVED_RETENTION`). The pages show the firing ones
(`console.alerting.store.active`).
"""

from __future__ import annotations

from django.db import models

__all__ = ["AlertmanagerAlert"]


class AlertmanagerAlert(models.Model):
    class Status(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    fingerprint = models.CharField(max_length=64, unique=True)
    alertname = models.CharField(max_length=256, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, db_index=True)
    severity = models.CharField(max_length=32, blank=True)
    # The `table` label (Pinot's raw table name, as the metrics carry it), "" for cluster alerts.
    table = models.CharField(max_length=256, blank=True, db_index=True)
    partition = models.IntegerField(null=True, blank=True)
    labels = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    generator_url = models.URLField(max_length=2048, blank=True)
    receiver = models.CharField(max_length=256, blank=True)
    # When the console last heard of it (the webhook's arrival).
    received_at = models.DateTimeField()
    # The last silence made from the console for this alert (Alertmanager's id) and its end.
    silence_id = models.CharField(max_length=64, blank=True)
    silenced_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-starts_at"]

    def __str__(self) -> str:
        return f"{self.alertname} {self.status} {self.labels}"
