"""CPU seconds used by groups of processes (each a process and all its descendants), from /proc.

A bench names its process trees (`{"controller": pid, "servers": [pid, pid, pid], ...}`) and takes
`snapshot()` before and after what it measures; `used(before, after)` is the CPU (user + system,
every thread) each group spent in between. A process is counted in the first group whose tree
holds it (or under a `split` label); processes that matched no tree but whose command line
holds one of `by_command`'s patterns are counted under that label (the test services: ZooKeeper,
Redis). A process that exited in between is not counted (its CPU went to its parent only once
waited for). Linux only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["CpuGroups", "format_used"]

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of `pid`, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name may hold spaces and parentheses
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


class CpuGroups:
    def __init__(
        self,
        roots: Mapping[str, Iterable[int]],
        by_command: Mapping[str, str] | None = None,
        split: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        """`split`: label -> (group, command pattern): the processes of that group whose command
        line holds the pattern are counted under the label instead (a worker's Spark JVM)."""
        self.roots = {label: set(pids) for label, pids in roots.items()}
        self.by_command = dict(by_command or {})
        self.split = dict(split or {})

    def snapshot(self) -> dict[int, tuple[str, float]]:
        """Every counted process: pid -> (group, CPU seconds so far)."""
        stats = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
                stats[int(entry.name)] = found
        out: dict[int, tuple[str, float]] = {}
        for pid, (_, cpu) in stats.items():
            label = self._group(pid, stats)
            if label is not None:
                out[pid] = (label, cpu)
        return out

    def _group(self, pid: int, stats: Mapping[int, tuple[int, float]]) -> str | None:
        seen, current = set(), pid
        while current in stats and current not in seen:
            seen.add(current)
            for label, pids in self.roots.items():
                if current in pids:
                    return self._refined(label, pid)
            current = stats[current][0]
        command = _command(pid)
        return next((label for label, part in self.by_command.items() if part in command), None)

    def _refined(self, label: str, pid: int) -> str:
        for refined, (group, part) in self.split.items():
            if group == label and part in _command(pid):
                return refined
        return label

    @staticmethod
    def used(
        before: Mapping[int, tuple[str, float]], after: Mapping[int, tuple[str, float]]
    ) -> dict[str, float]:
        """CPU seconds per group between the two snapshots (processes started in between count
        from zero)."""
        totals: dict[str, float] = {}
        for pid, (label, cpu) in after.items():
            start = before.get(pid, (label, 0.0))[1]
            totals[label] = totals.get(label, 0.0) + max(0.0, cpu - start)
        return totals


def format_used(used: Mapping[str, float], order: Iterable[str]) -> str:
    """`label 0.00 s, ...` in `order`, then the total."""
    labels = list(order) + sorted(set(used) - set(order))
    parts = [f"{label} {used.get(label, 0.0):.2f}" for label in labels]
    return ", ".join(parts) + f"; total {sum(used.values()):.2f} s"
