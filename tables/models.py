"""Console-side records. ZooKeeper stays the truth for the cluster; these rows are what only the
console keeps: background jobs and durable counters.

- `Job`: one row per attempt of a background run (a Spark segment build, a re-ingestion). An
  attempt that died with its process stays RUNNING until the next attempt of the same work marks it
  ABANDONED.
- `DurableCounter`: monotonically increasing counts (segmentBuildFailures, reingestionFailures,
  ...) per table, incremented atomically in the database, so they survive worker restarts and are
  shared by every process. `monitoring` exposes them on /metrics.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F


class Job(models.Model):
    """An attempt of a background job, with its outcome."""

    class Kind(models.TextChoices):
        BUILD = "BUILD", "segment build"
        REINGEST = "REINGEST", "re-ingestion"

    class Status(models.TextChoices):
        RUNNING = "RUNNING"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"
        ABANDONED = "ABANDONED"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    table = models.CharField(max_length=255, db_index=True)
    segment = models.CharField(max_length=255, db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=255, blank=True, help_text="host:pid of the attempt")
    rows = models.BigIntegerField(null=True)
    incomplete_rows = models.BigIntegerField(null=True)
    bytes = models.BigIntegerField(null=True)
    duration_ms = models.BigIntegerField(null=True)
    error = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["kind", "table", "segment", "status"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.segment} {self.status}"


class DurableCounter(models.Model):
    """A named count per table (empty table = cluster-wide)."""

    name = models.CharField(max_length=64)
    table = models.CharField(max_length=255, blank=True, default="")
    value = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "table"], name="counter_per_table")]

    def __str__(self) -> str:
        return f"{self.name}{{{self.table}}}={self.value}"

    @classmethod
    def increment(cls, name: str, table: str = "", by: int = 1) -> None:
        """Atomic in the database: concurrent increments from any process all count."""
        cls.objects.get_or_create(name=name, table=table)
        cls.objects.filter(name=name, table=table).update(value=F("value") + by)

    @classmethod
    def value_of(cls, name: str, table: str = "") -> int:
        row = cls.objects.filter(name=name, table=table).first()
        return 0 if row is None else row.value
