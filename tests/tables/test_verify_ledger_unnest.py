"""`manage.py verify_ledger --rows` for a table that unnests arrays (complexTypeConfig
.fieldsToUnnest), on the cluster of `tests/tables/test_verify_ledger.py`: the githubEvents rows of
partition 0 unnest `payload.commits` (a PushEvent gives one row per commit, any other event one
row), the segments declare it (`UNNEST_FILE` in their tar) and the ledger counts their offsets.
"""

from __future__ import annotations

import json

import pytest

from tables import builds
from tables.domain.ledger import UNNEST_FILE
from tables.segments.segment_format import pack_segment, read_segment_files
from tests.cluster_fixtures import github_rows
from tests.tables.test_verify_ledger import KEYED_ROWS, TABLE, verify
from tests.tables.test_verify_ledger import ledger as ledger  # the fixture

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.spark]


def commits(row: bytes) -> int:
    found = json.loads(row).get("payload", {}).get("commits")
    return max(1, len(found)) if isinstance(found, list) else 1


def test_an_unnesting_tables_rows_are_counted_by_offset(ledger):
    config = ledger.manager.get_table_config(TABLE).rest
    config["ingestionConfig"]["complexTypeConfig"] = {"fieldsToUnnest": ["payload.commits"]}
    ledger.manager.update_table(TABLE, config)
    first = ledger.commit(0, 1, 11, built=(1, 11))
    second = ledger.commit(1, 11, 22, built=(11, 22))
    rows = 1 + sum(commits(row) for row in github_rows()[:KEYED_ROWS])  # offset 1: one row
    assert rows > 21  # some PushEvents have several commits

    out, error = verify("--rows")
    assert error is None, out
    lines = out.splitlines()
    assert lines[0].startswith(f"ledger of {TABLE}: ok: ")
    assert lines[0].endswith(f"2 DONE segments, 3 open, {rows} rows checked")
    assert any(f"note: partition 0: segment {first} [1, 11): " in line for line in lines)
    assert any("several rows per offset excused" in line for line in lines)

    # Without its declaration, the segment's sibling rows are duplicates.
    store = builds.deep_store()
    key = store.segment_key(TABLE, second)
    packed = store.download(key, ledger.work / "declared.tar.gz")
    assert read_segment_files(packed)[UNNEST_FILE] == b"payload.commits\n"
    unpacked = ledger.work / "undeclared" / second
    unpacked.mkdir(parents=True)
    for name, data in read_segment_files(packed).items():
        if name != UNNEST_FILE:
            (unpacked / name).write_bytes(data)
    pack_segment(unpacked, ledger.work / "undeclared.tar.gz")
    store.publish(ledger.work / "undeclared.tar.gz", key)
    out, error = verify("--rows")
    assert error is not None
    assert "PROBLEM partition 0: duplicated rows: offsets [15, 16) (1 offset) are twice in " in out
