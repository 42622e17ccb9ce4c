"""Who should lead which leadControllerResource partition (pure): the cluster leader's plan and
each controller's following of it (reference §8, pinot-round2 §D).

Contract:
- The assignment is the resource's IdealState listFields, `leadControllerResource_<i>` -> `[owner]`
  (`[]`: unassigned). Only the cluster leader writes it, by compare-and-set.
- `plan` spreads the partitions evenly over the live, enabled controllers (24 over 3 is 8/8/8),
  moving as few as it can: an owner keeps its partitions up to its share; the controllers that
  already hold the most get the remainder's extra partitions.
- A controller that is not live keeps its partitions while its absence is shorter than the
  rebalance delay (`REBALANCE_DELAY`, Pinot's `controller.resource.rebalance.delay_ms`), so that a
  restart gets them back; it loses them at once when the delay is 0, when it handed its
  partitions over (a graceful shutdown; a live controller that handed over gets nothing either),
  when it is disabled, or when its instance config is gone. Its partitions then go to the live
  controllers with the fewest.
- A partition moves in two steps so that two controllers never hold it as MASTER together: a
  partition taken from any owner is first unassigned, and a partition is given to a controller
  only while it is unassigned and no other live controller holds it as MASTER in its CURRENTSTATE
  (`holders`). The first step is needed even when the owner is not live or is disabled: between
  the cluster leader's read and its compare-and-set write, a disabled owner (still live) or a
  restarted one (a new session) can claim the partition from the assignment it reads and confirm
  it before the write lands; after an unassigning write, such a claim is either seen in its
  CURRENTSTATE by the next plan or not confirmed. So a move takes two plans: the caller plans
  again after a write that changed the assignment (`Plan.changed`), without waiting for time.
  A controller that is not live holds nothing: its session, and every write it could make, is
  gone.
- `follow`: a controller is MASTER of exactly the partitions assigned to it, and of none while
  the resource is disabled (the cluster leader then leads every table, Pinot's fallback).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.znrecord import ZNRecord

__all__ = [
    "DEFAULT_REBALANCE_DELAY_MS",
    "ControllerFacts",
    "Move",
    "Plan",
    "assignment_of",
    "assignment_record",
    "follow",
    "lead_view",
    "masters_of",
    "plan",
]

DEFAULT_REBALANCE_DELAY_MS = 300_000  # Pinot's controller.resource.rebalance.delay_ms
MASTER = "MASTER"


@dataclass(frozen=True)
class ControllerFacts:
    """What the cluster leader knows of one controller participant."""

    live: bool
    enabled: bool = True
    offline_since_ms: int | None = None  # when it was seen to go (None: live, or not known)
    handed_over: bool = False  # it shut down gracefully and gave its partitions up


@dataclass(frozen=True)
class Move:
    """One change of a partition's owner in the assignment."""

    partition: int
    from_controller: str | None
    to_controller: str | None
    reason: str


@dataclass
class Plan:
    assignment: dict[int, str | None]
    moves: list[Move] = field(default_factory=list)
    next_due_ms: int | None = None  # when a kept partition's delay runs out

    @property
    def changed(self) -> bool:
        return bool(self.moves)


def assignment_of(ideal: ZNRecord, num_partitions: int) -> dict[int, str | None]:
    """The owners in the resource's IdealState listFields."""
    out: dict[int, str | None] = {}
    for i in range(num_partitions):
        owners = ideal.list_fields.get(partition_name(i)) or []
        out[i] = owners[0] if owners else None
    return out


def assignment_record(ideal: ZNRecord, assignment: Mapping[int, str | None]) -> ZNRecord:
    """`ideal` with its listFields set to `assignment` (other fields kept)."""
    record = ideal.copy()
    for i, owner in assignment.items():
        record.list_fields[partition_name(i)] = [owner] if owner else []
    return record


def masters_of(view: ZNRecord | None, num_partitions: int) -> dict[int, str | None]:
    """Partition -> its MASTER in the resource's EXTERNALVIEW (the first by name if several)."""
    out: dict[int, str | None] = {}
    for i in range(num_partitions):
        states = view.map_fields.get(partition_name(i), {}) if view is not None else {}
        masters = sorted(c for c, s in states.items() if s == MASTER)
        out[i] = masters[0] if masters else None
    return out


def lead_view(num_partitions: int, held: Mapping[str, frozenset[int]]) -> ZNRecord:
    """The EXTERNALVIEW: each partition's MASTER as the live controllers' CURRENTSTATEs say."""
    maps: dict[str, dict[str, str]] = {partition_name(i): {} for i in range(num_partitions)}
    for controller, partitions in held.items():
        for i in partitions:
            if 0 <= i < num_partitions:
                maps[partition_name(i)][controller] = MASTER
    return ZNRecord(
        id=LEAD_CONTROLLER_RESOURCE,
        simple_fields={"BUCKET_SIZE": "0", "STATE_MODEL_DEF_REF": "MasterSlave"},
        map_fields=maps,
    )


def _gone_reason(name: str, facts: ControllerFacts | None, delay_ms: int, now_ms: int) -> str:
    if facts is None:
        return f"{name} is no longer a controller"
    if not facts.enabled:
        return f"{name} is disabled"
    if facts.handed_over:
        return f"{name} shut down and handed its partitions over"
    if delay_ms <= 0:
        return f"{name} is not live (rebalance delay 0)"
    since = facts.offline_since_ms if facts.offline_since_ms is not None else now_ms
    return f"{name} not live for {(now_ms - since) / 1000:.0f} s (rebalance delay {delay_ms} ms)"


def _kept_until(facts: ControllerFacts | None, delay_ms: int, now_ms: int) -> int | None:
    """Until when a controller that is not live keeps its partitions (None: it does not)."""
    if facts is None or facts.live or not facts.enabled or facts.handed_over or delay_ms <= 0:
        return None
    since = facts.offline_since_ms if facts.offline_since_ms is not None else now_ms
    due = since + delay_ms
    return due if due > now_ms else None


def _shares(members: list[str], current: Mapping[int, str | None], total: int) -> dict[str, int]:
    """How many partitions each member should own: even, extras to those holding most."""
    if not members:
        return {}
    base, extra = divmod(total, len(members))
    held = {m: sum(1 for owner in current.values() if owner == m) for m in members}
    order = sorted(members, key=lambda m: (-held[m], m))
    return {m: base + (1 if rank < extra else 0) for rank, m in enumerate(order)}


def plan(
    num_partitions: int,
    current: Mapping[int, str | None],
    controllers: Mapping[str, ControllerFacts],
    holders: Mapping[int, frozenset[str]],
    delay_ms: int,
    now_ms: int,
) -> Plan:
    """The next assignment from `current`; `holders`: partition -> live controllers holding it
    as MASTER (their CURRENTSTATEs)."""
    live = sorted(c for c, f in controllers.items() if f.live and f.enabled and not f.handed_over)
    kept: dict[str, int] = {}
    for name in {o for i in range(num_partitions) if (o := current.get(i))}:
        due = _kept_until(controllers.get(name), delay_ms, now_ms)
        if due is not None:
            kept[name] = due
    result = Plan(dict(current), next_due_ms=min(kept.values()) if kept else None)
    if not live:
        return result
    frozen = {i for i in range(num_partitions) if current.get(i) in kept}
    shares = _shares(live, current, num_partitions - len(frozen))
    owned: dict[str, list[int]] = {m: [] for m in live}
    free: list[tuple[int, str | None, str]] = []  # partition, previous owner, why it is free
    for i in range(num_partitions):
        owner = current.get(i)
        if i in frozen:
            continue
        if owner in owned:
            if len(owned[owner]) < shares[owner]:
                owned[owner].append(i)
            else:
                free.append((i, owner, "rebalance over the live controllers"))
        elif owner is None:
            free.append((i, None, "unassigned"))
        else:
            free.append((i, owner, _gone_reason(owner, controllers.get(owner), delay_ms, now_ms)))
    for i, previous, why in free:
        taker = min(live, key=lambda m: (len(owned[m]) - shares[m], len(owned[m]), m))
        owned[taker].append(i)
        if previous is not None:
            # Unassign first, whoever the owner is: the next plan gives it to `taker`.
            result.assignment[i] = None
            result.moves.append(Move(i, previous, None, f"{why}: released for {taker}"))
        elif not holders.get(i, frozenset()) - {taker}:
            result.assignment[i] = taker
            result.moves.append(Move(i, None, taker, why))
    return result


def follow(
    me: str, assignment: Mapping[int, str | None], held: frozenset[int], enabled: bool
) -> tuple[frozenset[int], frozenset[int]]:
    """(partitions to take as MASTER, partitions to give up) for controller `me`."""
    wanted = frozenset(i for i, owner in assignment.items() if owner == me) if enabled else None
    if wanted is None:
        return frozenset(), held
    return wanted - held, held - wanted
