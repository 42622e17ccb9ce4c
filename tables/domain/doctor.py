"""The ingestion doctor: why one stream partition is (not) consuming, and what fixes it (pure).

`diagnose(view, timing)` judges one partition from what the database mirror knows of it
(`PartitionView`: its segments with IdealState / ExternalView states, ZK status, offsets and
metadata mtime; what its replicas last published; the stream's partition count or why it could not
be read; the pause state; the triage verdict) and returns a `Diagnosis`:
- `headline`: one line, "why is this partition not consuming" (or "consuming normally");
- `evidence`: the chain of facts behind it, each with its `Source` (ZooKeeper metadata,
  IdealState, ExternalView, server report, stream, healer) and its time where there is one;
- `fix`: what the healer will do about it and when (empty when it is not the healer's to fix),
  `due_ms` that time, and `actions`: what an operator can do (`Action`).

The healer's part is not guessed: `outlook(...)` runs the healer's own decisions
(`tables.domain.healing.plan_consuming_repairs` and `plan_error_repairs`) on the mirror's facts,
so the doctor says what the next run would do, in the healer's order: a consuming repair or guard
wait of the partition first, then an unexpected state the healer leaves alone, then ERROR replicas,
then what only the servers or the stream can fix (not reporting, data dropped by the stream, a
stalled or lagging consumer). A paused table gets no consuming repair (the healer skips them, as
Pinot does) but its ERROR replicas are still reset. `Outlook.due()` lists the repairs a run would
make now: what `tables.mirror.sync` uses to request a run as soon as the mirror sees one.

When: a repair due now happens on the next run: within seconds when the mirror requests runs
(`HealerTiming.mirror_triggers`), else at the next scheduled run. A guarded case waits until the
metadata's mtime plus `max.segment.completion.time.millis` (a commit may still be finishing); the
first `STEP_GRACE_MS` of that wait read as a commit still in flight, not yet as a controller that
stopped between commit steps.

The inputs and outputs (`PartitionView`, `HealerTiming`, `Diagnosis`, ...) and `outlook` live in
`tables.domain.doctor_facts` and are re-exported here. Nothing here reads the clock:
`HealerTiming.now_ms` is given. Times are written in UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from tables.domain.doctor_facts import (
    ACTION_LABELS,
    DEFAULT_MAX_COMPLETION_MS,
    Action,
    Diagnosis,
    Evidence,
    HealerTiming,
    Outlook,
    PartitionView,
    ReplicaReport,
    SegmentView,
    Source,
    clock,
    custom_map,
    outlook,
    repair_text,
    wait_text,
    when_due,
    when_waiting,
)
from tables.domain.healing import ErrorRepair, ErrorRepairKind, RepairKind, Wait

__all__ = [
    "ACTION_LABELS",
    "DEFAULT_MAX_COMPLETION_MS",
    "STEP_GRACE_MS",
    "Action",
    "Diagnosis",
    "Evidence",
    "HealerTiming",
    "Outlook",
    "PartitionView",
    "ReplicaReport",
    "SegmentView",
    "Source",
    "clock",
    "custom_map",
    "diagnose",
    "outlook",
]

STEP_GRACE_MS = 30_000  # a DONE segment younger than this may be a commit still finishing
HEALTHY_VERDICTS = frozenset({"CONSUMING", "NO_UPSTREAM_DATA", "COMMITTING", "STARTING", ""})
CONSUMING, ONLINE, OFFLINE, ERROR = "CONSUMING", "ONLINE", "OFFLINE", "ERROR"


# --- the diagnosis ----------------------------------------------------------------------------


class _Doctor:
    def __init__(self, view: PartitionView, timing: HealerTiming) -> None:
        self.view, self.timing = view, timing
        self.now = timing.now_ms
        self.by_name = {s.name: s for s in view.segments}
        ranked = sorted(
            (s for s in view.segments if s.partition == view.partition),
            key=lambda s: (s.sequence, bool(s.ideal), s.name),
        )
        self.segments = ranked
        self.consuming = next((s for s in reversed(ranked) if CONSUMING in s.ideal.values()), None)
        self.latest = next((s for s in reversed(ranked) if s.ideal), None)
        self.reports = {r.server: r for r in view.reports}
        exists = (
            view.stream_partitions
            if view.stream_partitions is None
            else [view.partition]
            if view.partition < view.stream_partitions
            else []
        )
        self.outlook = outlook(
            ranked,
            now_ms=self.now,
            max_completion_ms=timing.max_completion_ms,
            stream_partitions=exists,
            paused=view.table_paused,
            paused_partitions=[view.partition] if view.partition_paused else [],
            error_auto_reset=timing.error_auto_reset,
            partial_offline_repair=timing.partial_offline_repair,
            pauseless=view.pauseless,
        )

    # --- texts ------------------------------------------------------------------------------
    def at(self, ms: int | None) -> str:
        return "" if ms is None else clock(ms, self.now)

    def evidence(self, source: Source, text: str, at_ms: int | None = None) -> Evidence:
        return Evidence(source, text, at_ms, self.at(at_ms))

    def when_due(self) -> str:
        return when_due(self.timing)

    def when_waiting(self, until_ms: int) -> str:
        return when_waiting(self.timing, until_ms)

    # --- evidence chains --------------------------------------------------------------------
    def segment_chain(self, segment: SegmentView | None) -> list[Evidence]:
        if segment is None:
            return []
        out = []
        name = segment.name
        if segment.status:
            offsets = f"offsets {segment.start_offset or '?'} to {segment.end_offset or '…'}"
            out.append(
                self.evidence(
                    Source.METADATA,
                    f"{name}: status {segment.status}, {offsets}",
                    segment.mtime_ms,
                )
            )
            custom = _skipped(segment)
            if custom:
                out.append(self.evidence(Source.METADATA, f"{name}: {custom}"))
        else:
            out.append(self.evidence(Source.METADATA, f"{name}: no segment metadata mirrored"))
        out.append(
            self.evidence(
                Source.IDEALSTATE,
                f"{name}: {_states(segment.ideal)}" if segment.ideal else f"{name}: not in it",
            )
        )
        out.append(
            self.evidence(
                Source.EXTERNALVIEW,
                f"{name}: {_states(segment.external)}"
                if segment.external
                else f"{name}: not in it",
            )
        )
        return out

    def report_chain(self) -> list[Evidence]:
        out = []
        expected = sorted(set(self.view.replicas) | set(self.reports))
        for server in expected:
            report = self.reports.get(server)
            if report is None or report.updated_ms is None:
                live = self.view.live_servers
                gone = live is not None and server not in live
                why = "not live in ZooKeeper" if gone else "no recent live state"
                out.append(self.evidence(Source.SERVER, f"{server}: {why}"))
                continue
            out.append(self.evidence(Source.SERVER, _report_text(report), report.updated_ms))
        return out

    def stream_chain(self) -> list[Evidence]:
        view = self.view
        if view.stream_error:
            return [self.evidence(Source.STREAM, f"cannot be read: {view.stream_error}")]
        out = []
        if view.stream_partitions is not None:
            out.append(self.evidence(Source.STREAM, f"{view.stream_partitions} partition(s)"))
        latest = [r.upstream_offset for r in view.reports if r.upstream_offset is not None]
        if latest:
            out.append(
                self.evidence(
                    Source.STREAM,
                    f"latest offset of partition {view.partition}: {max(latest)} "
                    "(as the replicas last saw it)",
                )
            )
        return out

    def healer_chain(self) -> list[Evidence]:
        timing = self.timing
        out = []
        if timing.last_run_ms is not None:
            out.append(self.evidence(Source.HEALER, "last run on this table", timing.last_run_ms))
        else:
            out.append(self.evidence(Source.HEALER, "no run recorded on this table"))
        if timing.next_run_ms is not None:
            out.append(self.evidence(Source.HEALER, "next scheduled run", timing.next_run_ms))
        return out

    def chain(self, *segments: SegmentView | None) -> tuple[Evidence, ...]:
        seen: set[str] = set()
        out: list[Evidence] = []
        for segment in segments:
            if segment is not None and segment.name not in seen:
                seen.add(segment.name)
                out += self.segment_chain(segment)
        return tuple(out + self.report_chain() + self.stream_chain() + self.healer_chain())

    # --- the cases --------------------------------------------------------------------------
    def run(self) -> Diagnosis:
        view = self.view
        for step in (
            self.paused,
            self.consuming_repair,
            self.unexpected,
            self.errors,
            self.stream_trouble,
            self.lost_offsets,
            self.not_reporting,
            self.triage,
        ):
            found = step()
            if found is not None:
                return replace(found, next_step=self.next_step(found))
        shown = self.consuming or self.latest
        detail = view.verdict_detail or "its replicas consume"
        words = {"COMMITTING": "committing normally", "STARTING": "starting"}
        head = words.get(view.verdict, "consuming normally")
        return Diagnosis(
            view.partition,
            True,
            f"{head}: {detail}",
            self.chain(shown),
            kind="healthy",
        )

    def next_step(self, found: Diagnosis) -> str:
        """The fix in a few words: when the healer acts, else the operator's actions."""
        labels = [ACTION_LABELS[a] for a in found.actions if a is not Action.RUN_HEALER]
        if found.due_ms is None:
            return ", ".join(labels or [ACTION_LABELS[a] for a in found.actions])
        if found.due_ms > self.now:
            when = f"at {self.at(found.due_ms)} (guard)"
        elif self.timing.mirror_triggers:
            when = "within seconds"
        elif self.timing.next_run_ms is not None:
            when = f"at {self.at(self.timing.next_run_ms)}"
        else:
            when = "on its next run"
        return f"the healer acts {when}, or " + ", or ".join(
            [ACTION_LABELS[Action.RUN_HEALER], *labels]
        )

    def paused(self) -> Diagnosis | None:
        view = self.view
        if not view.table_paused and not view.partition_paused:
            return None
        what = "the table" if view.table_paused else f"partition {view.partition}"
        head = f"consumption of {what} is paused" + (
            f" ({view.pause_text})" if view.pause_text else ""
        )
        errors = self.outlook.error_repairs(view.partition)
        fix = "the healer does not repair consumption while paused (as Pinot does)"
        actions = [Action.RESUME]
        if errors:
            fix += "; " + self.error_fix(errors)
            actions += [Action.RUN_HEALER, Action.RESET_SEGMENT]
        return Diagnosis(
            view.partition,
            False,
            head,
            self.chain(self.consuming or self.latest, *(self.by_name[e.segment] for e in errors)),
            fix,
            self.now if errors and self.timing.error_auto_reset else None,
            tuple(actions),
            errors[0].segment if errors else "",
            "paused",
        )

    def consuming_repair(self) -> Diagnosis | None:
        item = self.outlook.consuming_item(self.view.partition)
        if item is None:
            return None
        segment = self.by_name.get(item.segment or "")
        if isinstance(item, Wait):
            young = segment is not None and self.now - (segment.mtime_ms or 0) < STEP_GRACE_MS
            head = _headline(item.kind, segment, self, in_flight=young)
            fix = f"the healer will repair it {self.when_waiting(item.until_ms)}"
            fix += f": {wait_text(item, segment)}"
            fix += "; Run healer now after that time to repair it at once"
            due, actions = item.until_ms, (Action.RUN_HEALER,)
        else:
            head = _headline(item.kind, segment, self)
            fix = f"the healer will repair it {self.when_due()}: {repair_text(item)}"
            fix += "; or Run healer now"
            due, actions = self.now, (Action.RUN_HEALER,)
            errors = self.outlook.error_repairs(self.view.partition)
            if errors:
                fix += "; " + self.error_fix(errors)
        others = [s for s in (self.consuming, self.latest) if s is not segment]
        return Diagnosis(
            self.view.partition,
            False,
            head,
            self.chain(segment, *others),
            fix,
            due,
            actions,
            item.segment or "",
            str(item.kind),
        )

    def unexpected(self) -> Diagnosis | None:
        problems = self.outlook.problems(self.view.partition)
        if not problems:
            return None
        text = problems[0].split(": ", 1)[1]
        return Diagnosis(
            self.view.partition,
            False,
            f"unexpected state: {text}",
            self.chain(self.latest, self.consuming),
            "the healer leaves this state alone (as Pinot does); Reset segment makes its replicas "
            "follow the IdealState again",
            None,
            (Action.RESET_SEGMENT,),
            self.latest.name if self.latest else "",
            "unexpected",
        )

    def error_fix(self, errors: Sequence[ErrorRepair]) -> str:
        names = ", ".join(e.segment for e in errors)
        if any(e.kind is ErrorRepairKind.REINGEST for e in errors):
            when = self.when_due()
            return f"{names} needs re-ingestion from the stream; the healer asks for it {when}"
        if not self.timing.error_auto_reset:
            return (
                f"automatic reset is off (controller.segment.error.autoReset): Reset segment "
                f"{names} to bring its replicas back"
            )
        return (
            f"the healer resets {names} {self.when_due()} (Helix-style: to OFFLINE, then back "
            "to the IdealState); or Reset segment, or Run healer now"
        )

    def errors(self) -> Diagnosis | None:
        view = self.view
        repairs = self.outlook.error_repairs(view.partition)
        if repairs:
            segment = self.by_name[repairs[0].segment]
            bad = sorted(i for i, s in segment.external.items() if s == ERROR)
            head = f"{segment.name} is ERROR on {', '.join(bad)}" + self.reasons(bad)
            return Diagnosis(
                view.partition,
                False,
                head,
                self.chain(segment, self.consuming),
                self.error_fix(repairs),
                self.now if self.timing.error_auto_reset else None,
                (Action.RESET_SEGMENT, Action.RUN_HEALER),
                segment.name,
                str(repairs[0].kind),
            )
        for segment in reversed(self.segments):
            bad = sorted(i for i, s in segment.external.items() if s == ERROR)
            if bad and segment.ideal:
                head = f"{', '.join(bad)} stopped consuming {segment.name}" + self.reasons(bad)
                head += "; the other replicas go on"
                return Diagnosis(
                    view.partition,
                    False,
                    head,
                    self.chain(segment, self.consuming),
                    "the healer leaves a consuming segment with only some replicas in ERROR "
                    "(as Pinot does: the others go on and commit it); Reset segment brings "
                    f"{', '.join(bad)} back",
                    None,
                    (Action.RESET_SEGMENT,),
                    segment.name,
                    "partialError",
                )
        return None

    def reasons(self, servers: Iterable[str]) -> str:
        found = [
            f"{s}: {self.reports[s].stopped_reason}"
            for s in servers
            if s in self.reports and self.reports[s].stopped_reason
        ]
        return f" ({'; '.join(found)})" if found else ""

    def stream_trouble(self) -> Diagnosis | None:
        view = self.view
        gone = view.stream_partitions is not None and view.partition >= view.stream_partitions
        if not view.stream_error and not gone:
            return None
        if not view.stream_error and self.consuming is None:
            head = f"the stream no longer has partition {view.partition} (it has "
            head += f"{view.stream_partitions}): the partition reached its end"
            return Diagnosis(
                view.partition, True, head, self.chain(self.latest), kind="partitionEnded"
            )
        if not view.stream_error:
            return None
        stopped = [r for r in view.reports if r.stopped_reason]
        if self.consuming is not None and not stopped and view.verdict in HEALTHY_VERDICTS:
            return None  # the replicas still consume: the mirror's own read failed
        head = f"the stream cannot be read: {view.stream_error}"
        return Diagnosis(
            view.partition,
            False,
            head,
            self.chain(self.consuming or self.latest),
            "nothing the healer can repair until the stream is back",
            None,
            (Action.CHECK_STREAM,),
            kind="streamUnavailable",
        )

    def lost_offsets(self) -> Diagnosis | None:
        lost = max((r.lost_offsets for r in self.view.reports), default=0)
        if lost <= 0:
            return None
        who = sorted(r.server for r in self.view.reports if r.lost_offsets > 0)
        head = (
            f"the stream dropped {lost} offset(s) before {', '.join(who)} could read them "
            "(retention or a trim): those rows are lost"
        )
        return Diagnosis(
            self.view.partition,
            False,
            head,
            self.chain(self.consuming or self.latest),
            "nothing to repair: the replicas went on from the stream's earliest offset and the "
            "loss is counted; check the stream's retention against how far consumers lag",
            None,
            (Action.CHECK_STREAM,),
            kind="dataLost",
        )

    def not_reporting(self) -> Diagnosis | None:
        view = self.view
        if view.verdict != "NOT_REPORTING" or self.consuming is None:
            return None
        live = view.live_servers
        down = sorted(s for s in view.replicas if live is not None and s not in live)
        head = f"no replica reports on {self.consuming.name}"
        if down:
            head += f": {', '.join(down)} not live in ZooKeeper"
        return Diagnosis(
            view.partition,
            False,
            head,
            self.chain(self.consuming),
            "nothing in ZooKeeper to repair: the servers must come back (or be replaced) and "
            "publish their live state",
            None,
            (Action.CHECK_SERVERS,),
            self.consuming.name,
            "notReporting",
        )

    def triage(self) -> Diagnosis | None:
        view = self.view
        if view.verdict in HEALTHY_VERDICTS:
            return None
        detail = view.verdict_detail or view.verdict
        label = view.verdict.replace("_", " ").lower()
        actions = (Action.CHECK_SERVERS,)
        if view.verdict == "MISSING_CONSUMING_SEGMENT":
            fix = "the healer sees nothing to repair yet (the stream's partitions are unknown)"
            actions = (Action.RUN_HEALER, Action.CHECK_STREAM)
        else:
            fix = "nothing in ZooKeeper for the healer to repair: look at the servers"
        return Diagnosis(
            view.partition,
            False,
            f"{label}: {detail}",
            self.chain(self.consuming or self.latest),
            fix,
            None,
            actions,
            kind=view.verdict,
        )


def _headline(
    kind: RepairKind, segment: SegmentView | None, doctor: _Doctor, in_flight: bool = False
) -> str:
    view = doctor.view
    name = segment.name if segment else ""
    at = doctor.at(segment.mtime_ms if segment else None)
    if kind is RepairKind.COMMIT_STOPPED_AFTER_STEP1:
        why = (
            "a commit is finishing its last steps (or the controller stopped between them)"
            if in_flight
            else "the controller stopped between commit steps"
        )
        return f"{name} DONE at {at} but still CONSUMING in the IdealState: {why}"
    if kind is RepairKind.PARTITION_ENDED:
        return (
            f"{name} DONE at {at} but still CONSUMING, and the stream no longer has partition "
            f"{view.partition}"
        )
    if kind is RepairKind.COMMIT_STOPPED_AFTER_STEP2:
        why = (
            "a commit is finishing its last step (or the controller stopped after step 2)"
            if in_flight
            else "the controller stopped after commit step 2"
        )
        return f"{name} created at {at} but not in the IdealState: {why}"
    if kind is RepairKind.ALL_REPLICAS_OFFLINE:
        servers = sorted(segment.ideal) if segment else []
        return f"every replica of {name} is OFFLINE: the servers stopped consuming" + (
            doctor.reasons(servers)
        )
    if kind is RepairKind.NO_CONSUMING_SEGMENT:
        status = segment.status if segment else "?"
        return (
            f"no CONSUMING segment after {name} ({status}, ONLINE): the consuming segment was "
            "deleted, or consumption stopped without a next segment"
        )
    if kind is RepairKind.NEW_PARTITION:
        return (
            f"stream partition {view.partition} has no segment yet (the stream has "
            f"{view.stream_partitions} partitions)"
        )
    if kind is RepairKind.PARTIAL_OFFLINE:
        offline = sorted(i for i, s in (segment.ideal if segment else {}).items() if s == OFFLINE)
        return f"{', '.join(offline)} stopped consuming {name} while the other replicas go on"
    return f"{name}: {kind}"


def _states(states: Mapping[str, str]) -> str:
    return ", ".join(f"{server} {state}" for server, state in sorted(states.items()))


def _skipped(segment: SegmentView) -> str:
    previous = segment.custom.get("consumption.previousOffset")
    reason = segment.custom.get("consumption.startReason")
    if not previous or not reason:
        return ""
    return f"starts at {segment.start_offset}, not {previous} ({reason})"


def _report_text(report: ReplicaReport) -> str:
    text = f"{report.server}: {report.phase or '?'} ({report.consumer_state or '?'})"
    if report.current_offset is not None:
        text += f" at offset {report.current_offset}"
        if report.upstream_offset is not None:
            text += f" of {report.upstream_offset}"
    if report.stopped_reason:
        text += f"; stopped: {report.stopped_reason}"
    if report.lost_offsets:
        text += f"; {report.lost_offsets} offset(s) lost upstream"
    return text


def diagnose(view: PartitionView, timing: HealerTiming) -> Diagnosis:
    """The diagnosis of one stream partition; see the module docstring."""
    return _Doctor(view, timing).run()
