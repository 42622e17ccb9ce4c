"""What a healing run reports: its actions, what it left waiting, what it skipped, its errors.

Plain data (JSON-safe through `as_dict`); the Celery task records it for the console's history.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["HealingAction", "HealingReport"]


@dataclass(frozen=True)
class HealingAction:
    """One repair a run made (or a reset it sent)."""

    kind: str
    detail: str
    partition: int | None = None
    segment: str | None = None
    new_segment: str | None = None
    instances: tuple[str, ...] = ()
    data_loss: bool = False

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["instances"] = list(self.instances)
        return out


@dataclass
class HealingReport:
    """What one run did on one table: `actions` made, `waiting` (partitions left alone for now,
    with why and until when, and states it would not touch), `skipped` (parts of the run that did
    not happen, e.g. paused), and `error` when a step failed."""

    table: str
    run_id: str
    trigger: str
    started_ms: int
    finished_ms: int = 0
    actions: list[HealingAction] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None

    def fail(self, step: str, exc: BaseException) -> None:
        text = f"{step}: {type(exc).__name__}: {exc}"
        self.error = text if self.error is None else f"{self.error}; {text}"

    def as_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "runId": self.run_id,
            "trigger": self.trigger,
            "startedMs": self.started_ms,
            "finishedMs": self.finished_ms,
            "actions": [a.as_dict() for a in self.actions],
            "waiting": list(self.waiting),
            "skipped": list(self.skipped),
            "error": self.error,
        }
