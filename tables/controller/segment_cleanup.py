"""Deleting a consuming segment's metadata that lost a race, without losing one that won.

A commit (step 2) and a healing run both create the next segment's metadata before the IdealState
write that names it; when that write does not happen, the metadata is deleted again. Someone else
may have put that very segment into the IdealState meanwhile (the healer adopts a commit's next
segment when the controller stopped after step 2), so `drop_unless_in_idealstate` deletes only in
one ZooKeeper transaction that checks the IdealState is still the version it read and does not
name the segment.
"""

from __future__ import annotations

from tables.cluster.context import ClusterContext
from tables.zk.errors import BadVersion, NoNode, ZooKeeperError
from tables.zk.records import read_record

__all__ = ["drop_unless_in_idealstate"]

ATTEMPTS = 10


def drop_unless_in_idealstate(ctx: ClusterContext, table: str, segment: str) -> bool:
    """Delete `segment`'s metadata unless the IdealState names it, in one transaction that checks
    the IdealState is still the version read (so a writer that adds it meanwhile wins)."""
    ideal_path = ctx.paths.idealstate(table)
    for _ in range(ATTEMPTS):
        found = read_record(ctx.client, ideal_path)
        if found is not None and segment in found.record.map_fields:
            return False
        txn = ctx.client.transaction()
        if found is not None:
            txn.check(ideal_path, found.version)
        txn.delete(ctx.paths.segment(table, segment))
        results = txn.commit()
        errors = [r for r in results if isinstance(r, ZooKeeperError)]
        if not errors:
            return True
        if any(isinstance(r, NoNode) for r in errors) and not any(
            isinstance(r, BadVersion) for r in errors
        ):
            return False  # gone already
    return False
