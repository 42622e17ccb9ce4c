"""IdealState contention: 16 threads x 50 updates of one table's IdealState, group-committed,
against one writer doing the same 800 updates alone, measured in the same run.

Each update adds one segment (two replicas, CONSUMING) to the IdealState of a table, so the
record grows from 0 to 800 segments, as Pinot's commits grow it. Every scenario starts from a
fresh IdealState znode in a ZooKeeper chroot of its own (deleted at the end), through one client
(one process, one session), as the controller writes:

- group:  `--threads` (16) threads x `--per-thread` (50) updates through
          `tables.zk.group_commit.update_idealstate` (the controller's path);
- alone:  one thread doing the same updates one after another through `update_record`;
- old:    the same threads through plain `update_record` (compare-and-set, each writer retries on
          its own), the path before the group commit (`--no-old` skips it: it is the slow one).

    make test-services-up
    .venv/bin/python bench/idealstate.py [--runs 3] [--threads 16] [--per-thread 50]
                                         [--zk-hosts 127.0.0.1:21811] [--no-old]

Prints each run's times with the number of znode writes, the medians, and the ratios to the lone
writer (goal: group at most 2x). Checks that no update was lost (exit status 1 if one was); no
assertion on timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tables.domain.znrecord import ZNRecord  # noqa: E402
from tables.zk.client import new_client  # noqa: E402
from tables.zk.group_commit import update_idealstate  # noqa: E402
from tables.zk.records import create_record, read_record, update_record  # noqa: E402
from tables.zk.zookeeper import as_store  # noqa: E402

TABLE = "benchTable_REALTIME"
GOAL = 2.0
Update = Callable[..., object]


@dataclass(frozen=True)
class Figure:
    seconds: float
    writes: int
    segments: int


def _segment(worker: int, i: int) -> str:
    return f"benchTable__{worker}__{i}__20240101T0000Z"


def _adder(name: str) -> Callable[[ZNRecord], ZNRecord]:
    def add(record: ZNRecord) -> ZNRecord:
        record.map_fields[name] = {"Server_a_8098": "CONSUMING", "Server_b_8099": "CONSUMING"}
        return record

    return add


def _fresh(store, path: str) -> None:
    create_record(
        store,
        path,
        ZNRecord(
            id=TABLE,
            simple_fields={
                "IDEAL_STATE_MODE": "CUSTOMIZED",
                "NUM_PARTITIONS": "0",
                "REBALANCE_MODE": "CUSTOMIZED",
                "REPLICAS": "2",
                "STATE_MODEL_DEF_REF": "SegmentOnlineOfflineStateModel",
                "STATE_MODEL_FACTORY_NAME": "DEFAULT",
            },
        ),
    )


def _run(store, path: str, update: Update, threads: int, per_thread: int) -> Figure:
    """`threads` threads x `per_thread` updates (threads=1: one writer does all of them)."""
    _fresh(store, path)
    start = threading.Barrier(threads + 1)

    def work(worker: int, count: int) -> None:
        start.wait()
        for i in range(count):
            update(store, path, _adder(_segment(worker, i)))

    workers = [threading.Thread(target=work, args=(w, per_thread)) for w in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - began
    found = read_record(store, path)
    assert found is not None
    store.delete(path)
    return Figure(seconds, found.version, len(found.record.map_fields))


def _print_run(run: int, figures: dict[str, Figure]) -> None:
    parts = [f"{k} {f.seconds:6.2f} s ({f.writes} writes)" for k, f in figures.items()]
    print(f"run {run}: " + ", ".join(parts), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--per-thread", type=int, default=50)
    parser.add_argument("--zk-hosts", default="127.0.0.1:21811", help="the test ZooKeeper")
    parser.add_argument("--no-old", action="store_true", help="skip plain update_record x 16")
    args = parser.parse_args()
    total = args.threads * args.per_thread
    chroot = f"/bench-idealstate-{uuid.uuid4().hex[:10]}"
    client = new_client(args.zk_hosts + chroot)
    store = as_store(client)
    path = f"/PinotCluster/IDEALSTATES/{TABLE}"
    scenarios: dict[str, tuple[Update, int, int]] = {
        "group": (update_idealstate, args.threads, args.per_thread),
        "alone": (update_record, 1, total),
    }
    if not args.no_old:
        scenarios["old"] = (update_record, args.threads, args.per_thread)
    print(
        f"{args.threads} threads x {args.per_thread} updates = {total} segments added to one "
        f"IdealState, ZooKeeper {args.zk_hosts}{chroot}",
        flush=True,
    )
    runs: list[dict[str, Figure]] = []
    try:
        for run in range(1, args.runs + 1):
            figures = {name: _run(store, path, *spec) for name, spec in scenarios.items()}
            _print_run(run, figures)
            runs.append(figures)
    finally:
        client.stop()
        client.close()
        root = new_client(args.zk_hosts)
        root.delete(chroot, recursive=True)
        root.stop()
        root.close()
    return _summary(runs, total)


def _summary(runs: list[dict[str, Figure]], total: int) -> int:
    medians = {k: statistics.median(r[k].seconds for r in runs) for k in runs[0]}
    print("medians: " + ", ".join(f"{k} {s:.2f} s" for k, s in medians.items()))
    ratio = medians["group"] / medians["alone"]
    print(f"group / alone: {ratio:.2f}x (goal: at most {GOAL:g}x)")
    if "old" in medians:
        print(f"old / alone:   {medians['old'] / medians['alone']:.2f}x (plain update_record)")
    lost = [(k, f.segments) for r in runs for k, f in r.items() if f.segments != total]
    if lost:
        print(f"LOST UPDATES: {lost} (expected {total} segments each)")
        return 1
    print(f"no update lost: every scenario ended with {total} segments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
