"""ZooKeeper calls from a busy process: kazoo's stock threading handler against
`tables.zk.poll_handler.PollThreadingHandler` without and with its buffered receives, in one run,
on the same ZooKeeper.

The load is the controller's under a 64-partition pause: `--callers` threads each doing
read-then-compare-and-set updates of a znode of their own (a commit's step 1) while `--spinners`
threads run Python code without pause (the other request threads' Django work), all in this one
process. Each handler gets its own client and `--rounds` rounds, alternating, so a drift of the
machine hits both alike. Prints per handler: updates/s and the per-update latency (median, p99),
then the ratios poll/stock and buffered/poll of the throughputs and of the median latencies.

    make test-services-up
    .venv/bin/python bench/zk_client.py [--callers 16] [--spinners 4] [--updates 100] [--rounds 3]

Needs the test services' ZooKeeper (TEST_ZK_PORT, default 21811); works under /bench-zk-client,
removed at the end. No assertions; exit 1 when ZooKeeper is unreachable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kazoo.client import KazooClient  # noqa: E402
from kazoo.handlers.threading import SequentialThreadingHandler  # noqa: E402

from tables.zk.poll_handler import PollThreadingHandler  # noqa: E402

BASE = "/bench-zk-client"


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--spinners", type=int, default=4)
    parser.add_argument("--updates", type=int, default=100, help="per caller and round")
    parser.add_argument("--rounds", type=int, default=3, help="per handler")
    parser.add_argument(
        "--switch-interval", type=float, default=None, help="sys.setswitchinterval (s) first"
    )
    return parser.parse_args()


def _round(client: KazooClient, args: argparse.Namespace) -> tuple[float, list[float]]:
    """One round: (updates/s, per-update latencies in ms)."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(args.callers)]

    def spin() -> None:
        total = 0
        while not stop.is_set():
            total += sum(range(200))

    def call(index: int) -> None:
        path = f"{BASE}/n{index}"
        for _ in range(args.updates):
            started = time.perf_counter()
            data, stat = client.get(path)
            client.set(path, data, version=stat.version)
            latencies[index].append((time.perf_counter() - started) * 1000)

    spinners = [threading.Thread(target=spin) for _ in range(args.spinners)]
    callers = [threading.Thread(target=call, args=(i,)) for i in range(args.callers)]
    for thread in spinners:
        thread.start()
    started = time.perf_counter()
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    elapsed = time.perf_counter() - started
    stop.set()
    for thread in spinners:
        thread.join()
    return args.callers * args.updates / elapsed, [x for one in latencies for x in one]


def main() -> int:
    args = _args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    hosts = f"127.0.0.1:{os.environ.get('TEST_ZK_PORT', '21811')}"
    clients = {
        "stock": KazooClient(hosts=hosts, handler=SequentialThreadingHandler()),
        "poll": KazooClient(hosts=hosts, handler=PollThreadingHandler(buffered=False)),
        "buffered": KazooClient(hosts=hosts, handler=PollThreadingHandler()),
    }
    try:
        for client in clients.values():
            client.start(timeout=10)
    except Exception as exc:
        print(f"ZooKeeper at {hosts} unreachable ({exc}): make test-services-up first")
        return 1
    setup = clients["stock"]
    if setup.exists(BASE):
        setup.delete(BASE, recursive=True)
    for index in range(args.callers):
        setup.create(f"{BASE}/n{index}", b"x" * 600, makepath=True)
    print(
        f"{args.callers} callers x {args.updates} get+set per round, {args.spinners} spinning "
        f"threads, {args.rounds} rounds per handler, ZooKeeper {hosts}"
    )
    results: dict[str, list[tuple[float, list[float]]]] = {name: [] for name in clients}
    for _ in range(args.rounds):
        for name, client in clients.items():
            results[name].append(_round(client, args))
    summary = {}
    for name, rounds in results.items():
        rate = statistics.median(r for r, _ in rounds)
        lat = sorted(x for _, one in rounds for x in one)
        summary[name] = (rate, statistics.median(lat), lat[int(len(lat) * 0.99)])
        print(
            f"{name:8s} updates/s median of rounds {rate:8.0f}  (rounds: "
            f"{', '.join(f'{r:.0f}' for r, _ in rounds)});  latency median "
            f"{summary[name][1]:.2f} ms, p99 {summary[name][2]:.2f} ms"
        )
    for new, old in (("poll", "stock"), ("buffered", "poll")):
        a, b = summary[new], summary[old]
        print(
            f"ratio {new}/{old}: throughput {a[0] / b[0]:.2f}x, "
            f"median latency {a[1] / b[1]:.2f}x, p99 latency {a[2] / b[2]:.2f}x"
        )
    setup.delete(BASE, recursive=True)
    for client in clients.values():
        client.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
