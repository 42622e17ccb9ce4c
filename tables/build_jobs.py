"""The `Job` rows of builds and re-ingestions (`tables.builds`): each attempt's row is started
before it runs and records its outcome after; a batched build's tasks look their outcome up by
task id (the column is indexed).

Contract:
- `start_job` (one attempt) and `start_build_jobs` (a batch's requests, in one transaction) first
  mark every RUNNING row of the same work ABANDONED: its process died or was killed.
- `record(job, outcome, duration_ms, batch)` sets the row's outcome fields (the caller saves
  them: `job.save()`, or `save_outcomes` for a batch: one UPDATE by primary key executed for all
  of them) and returns the job, or the error of a failed outcome; `details.failure` classifies a
  failure (`tables.domain.build_backoff.classify`).
- `outcome_of(job)` is what a recorded success answers (`BuildOutcome`); `built_outcome` the same
  made from the build's result before the row is recorded (a batch hands it over early), equal
  field for field.
- `recorded(task id)`: the outcome of the newest finished attempt of that task (a failure as the
  `BuildError` to raise), None when none finished; `recorded_among(task ids)`: which of them have
  one, in one query.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from tables.build_batches import PendingBuild
from tables.domain.build_backoff import classify
from tables.domain.names import raw_table_name
from tables.models import Job
from tables.segments.builder import BuildResult
from tables.segments.errors import BuildError

__all__ = [
    "BuildOutcome",
    "batch_details",
    "built_outcome",
    "outcome_of",
    "record",
    "recorded",
    "recorded_among",
    "save_outcomes",
    "start_build_jobs",
    "start_job",
]


@dataclass(frozen=True)
class BuildOutcome:
    segment: str
    download_uri: str
    rows: int
    incomplete_rows: int
    size_bytes: int
    crc: int
    start_time_ms: int
    end_time_ms: int
    job_id: int

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


_SUPERSEDED = "superseded by a later attempt (its process died or was killed)"


def start_job(kind: str, table: str, segment: str, task_id: str) -> Job:
    Job.objects.filter(kind=kind, table=table, segment=segment, status=Job.Status.RUNNING).update(
        status=Job.Status.ABANDONED,
        error=_SUPERSEDED,
        finished_at=timezone.now(),
    )
    return Job.objects.create(
        kind=kind,
        table=table,
        segment=segment,
        task_id=task_id,
        worker=f"{socket.gethostname()}:{os.getpid()}",
        started_at=timezone.now(),
    )


def start_build_jobs(batch: list[PendingBuild]) -> list[Job]:
    """`start_job` for every request of a batch, in one transaction (two statements)."""
    now = timezone.now()
    worker = f"{socket.gethostname()}:{os.getpid()}"
    with transaction.atomic():
        Job.objects.filter(
            kind=Job.Kind.BUILD, segment__in=[b.segment for b in batch], status=Job.Status.RUNNING
        ).update(
            status=Job.Status.ABANDONED,
            error=_SUPERSEDED,
            finished_at=now,
        )
        jobs = [
            Job(
                kind=Job.Kind.BUILD,
                table=raw_table_name(b.table),
                segment=b.segment,
                task_id=b.task_id,
                worker=worker,
                started_at=now,
            )
            for b in batch
        ]
        if len(jobs) == 1:
            jobs[0].save()
        else:
            Job.objects.bulk_create(jobs)
    return jobs


_OUTCOME_FIELDS = (
    "status",
    "rows",
    "incomplete_rows",
    "bytes",
    "duration_ms",
    "error",
    "details",
    "finished_at",
)


def save_outcomes(jobs: list[Job]) -> None:
    """Save the outcome fields of `jobs` (what `record` sets): one UPDATE by primary key,
    executed for every job at once. `bulk_update`'s one CASE statement per field cost the
    spark worker ~90 ms of Python for a 64-segment batch, while the commits ran."""
    fields = [Job._meta.get_field(name) for name in _OUTCOME_FIELDS]
    quote = connection.ops.quote_name
    sql = "UPDATE {} SET {} WHERE {} = %s".format(
        quote(Job._meta.db_table),
        ", ".join(f"{quote(f.column)} = %s" for f in fields),
        quote(Job._meta.pk.column),
    )
    rows = [
        [f.get_db_prep_save(getattr(job, f.attname), connection) for f in fields] + [job.pk]
        for job in jobs
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def batch_details(
    batch: list[PendingBuild], build: PendingBuild, leader: str, started_ms: int
) -> dict[str, object]:
    """`details.batch` of a Job: the batch's size and leader, and how long this request waited
    between its registration and the batch's start."""
    details: dict[str, object] = {"size": len(batch)}
    if leader:
        details["leader"] = leader
    if build.registered_ms:
        details["queued_ms"] = max(0, started_ms - build.registered_ms)
    return details


def record(
    job: Job,
    outcome: tuple[BuildResult, str] | Exception | None,
    duration_ms: int,
    batch: dict[str, object] | None = None,
) -> Job | Exception:
    """Set `job`'s outcome (the caller saves it and counts failures); the job or the error."""
    job.duration_ms = duration_ms
    job.finished_at = timezone.now()
    if not isinstance(outcome, tuple):
        exc = outcome if outcome is not None else BuildError("not built")
        job.status = Job.Status.FAILED
        job.error = f"{type(exc).__name__}: {exc}"[:4000]
        job.details = {"batch": batch} if batch is not None else {}
        job.details["failure"] = str(classify(type(exc).__name__, str(exc)))
        return exc
    result, uri = outcome
    job.status = Job.Status.SUCCEEDED
    job.rows = result.total_docs
    job.incomplete_rows = result.incomplete_rows
    job.bytes = result.size_bytes
    job.details = {
        "crc": result.crc,
        "incomplete_by_column": result.incomplete_by_column,
        "problems": result.problems[:10],
        "phase_seconds": result.phase_seconds,
        "download_uri": uri,
        "start_time_ms": result.start_time_ms,
        "end_time_ms": result.end_time_ms,
    }
    if batch is not None:
        job.details["batch"] = batch
    return job


def built_outcome(build: PendingBuild, result: BuildResult, uri: str, job_id: int) -> BuildOutcome:
    """What `outcome_of` answers for the Job row `record` makes of `(result, uri)`."""
    return BuildOutcome(
        segment=build.segment,
        download_uri=uri,
        rows=result.total_docs,
        incomplete_rows=result.incomplete_rows,
        size_bytes=result.size_bytes,
        crc=result.crc,
        start_time_ms=result.start_time_ms,
        end_time_ms=result.end_time_ms,
        job_id=job_id,
    )


def outcome_of(job: Job) -> BuildOutcome:
    details = job.details
    return BuildOutcome(
        segment=job.segment,
        download_uri=details["download_uri"],
        rows=int(job.rows or 0),
        incomplete_rows=int(job.incomplete_rows or 0),
        size_bytes=int(job.bytes or 0),
        crc=int(details["crc"]),
        start_time_ms=int(details["start_time_ms"]),
        end_time_ms=int(details["end_time_ms"]),
        job_id=job.pk,
    )


def _finished(task_ids: list[str]) -> QuerySet[Job]:
    """The finished attempts (succeeded or failed) of the build tasks `task_ids`."""
    return Job.objects.filter(
        kind=Job.Kind.BUILD,
        task_id__in=task_ids,
        status__in=[Job.Status.SUCCEEDED, Job.Status.FAILED],
    )


def recorded_among(task_ids: list[str]) -> set[str]:
    """The build tasks of `task_ids` with a finished attempt recorded (one query)."""
    return set(_finished(task_ids).values_list("task_id", flat=True))


def recorded(task_id: str) -> BuildOutcome | BuildError | None:
    """The recorded outcome of the build task `task_id`, if an attempt finished (a failure as the
    error to raise again); None when none did."""
    job = _finished([task_id]).order_by("-id").first()
    if job is None:
        return None
    if job.status == Job.Status.FAILED:
        return BuildError(job.error or "the build failed")
    try:
        return outcome_of(job)
    except (KeyError, TypeError, ValueError):  # recorded before outcomes were kept: build again
        return None
