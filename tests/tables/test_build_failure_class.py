"""A failed build's class in its Job row (`details.failure`, `tables.build_jobs.record`), and the
fault points that fail a build: `spark.<segment>.build_fails` once (transient),
`spark.<segment>.build_rejects` for as long as it exists (deterministic)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from tables import build_jobs, builds
from tables.domain.build_backoff import FailureKind, classify
from tables.models import Job
from tables.segments.errors import BuildError

SEGMENT = "events__0__3__20261126T2000Z"


def _job() -> Job:
    return Job(kind=Job.Kind.BUILD, table="events", segment=SEGMENT, started_at=timezone.now())


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (BuildError("cannot build x: unsupported date-time pattern 'uuuu'"), "deterministic"),
        (
            BuildError("the Spark job failed: AnalysisException: [UNRESOLVED_COLUMN]"),
            "deterministic",
        ),
        (BuildError("the Spark job failed: Py4JNetworkError: gone"), "transient"),
        (OSError("the deep store is unreachable"), "transient"),
    ],
)
def test_a_failed_attempt_records_its_class(error: Exception, failure: str) -> None:
    job = _job()
    assert build_jobs.record(job, error, 5, {"size": 2}) is error
    assert job.status == Job.Status.FAILED
    assert job.details == {"batch": {"size": 2}, "failure": failure}
    assert job.error.startswith(type(error).__name__ + ": ")


def test_the_fault_points_fail_once_or_for_as_long_as_armed(settings, tmp_path) -> None:
    settings.FAULT_INJECTION_DIR = str(tmp_path)
    (tmp_path / f"spark.{SEGMENT}.build_fails").touch()
    with pytest.raises(BuildError) as once:
        builds._injected_failure(SEGMENT)
    assert classify("BuildError", str(once.value)) is FailureKind.TRANSIENT
    builds._injected_failure(SEGMENT)  # consumed: the next build runs
    rejects = tmp_path / f"spark.{SEGMENT}.build_rejects"
    rejects.touch()
    for _ in range(2):
        with pytest.raises(BuildError) as held:
            builds._injected_failure(SEGMENT)
        assert classify("BuildError", str(held.value)) is FailureKind.DETERMINISTIC
    assert rejects.exists()
    rejects.unlink()
    builds._injected_failure(SEGMENT)
