"""Reads of schemas, tables, IdealStates and segment metadata, as the services see them.

Contract:
- `ClusterReader(ctx)` only reads ZooKeeper; the controller's `ResourceManager` (the writes)
  builds on it, and the server and the build jobs use it directly.
- Names are checked before any read: a malformed table, schema or segment name is `BadRequest`
  naming the rule it breaks; table names may be raw or with type and mean the REALTIME table.
- A missing table, schema or segment is `NotFound` (a segment's table is checked first, so the
  404 names what is really missing); a missing folder reads as empty.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tables.domain.names import (
    InvalidName,
    check_schema_name,
    check_segment_name,
    check_table_name,
    raw_table_name,
    table_name_with_type,
)
from tables.domain.schema import Schema, schema_from_znrecord
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import TableConfig, table_config_from_znrecord
from tables.zk.errors import NoNode
from tables.zk.records import VersionedRecord, read_record, read_records

from .context import ClusterContext
from .errors import BadRequest, NotFound

__all__ = ["ClusterReader", "metadata_as_map"]


class ClusterReader:
    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx = ctx
        self.zk = ctx.client
        self.paths = ctx.paths

    # --- schemas ---------------------------------------------------------------------------------
    def schema_name(self, name: str) -> str:
        """`name` when it is a valid schema name; 400 naming the rule it breaks otherwise."""
        try:
            return check_schema_name(name)
        except InvalidName as exc:
            raise BadRequest(str(exc)) from None

    def get_schema(self, name: str) -> Schema:
        found = read_record(self.zk, self.paths.schema(self.schema_name(name)))
        if found is None:
            raise NotFound(f"schema {name} not found")
        return schema_from_znrecord(found.record)

    def list_schemas(self) -> list[str]:
        return sorted(self._children(self.paths.schemas))

    # --- tables ----------------------------------------------------------------------------------
    def list_tables(self) -> list[str]:
        """Tables with their type (`t_REALTIME`), sorted."""
        return sorted(self._children(self.paths.table_configs))

    def table_name(self, name: str) -> str:
        """`name` (raw or with type) as the REALTIME table's name with type; 400 when malformed."""
        try:
            return table_name_with_type(check_table_name(name), "REALTIME")
        except InvalidName as exc:
            raise BadRequest(str(exc)) from None

    def _config(self, name_with_type: str) -> TableConfig:
        found = read_record(self.zk, self.paths.table_config(name_with_type))
        if found is None:
            raise NotFound(f"table {raw_table_name(name_with_type)} not found")
        return table_config_from_znrecord(found.record)

    def get_table_config(self, name: str) -> TableConfig:
        return self._config(self.table_name(name))

    def tagged_instances(self, tag: str) -> list[str]:
        """Servers whose instance config carries `tag`, enabled or not (as Pinot's default)."""
        names = self._children(self.paths.participant_configs)
        records = read_records(self.zk, [self.paths.participant_config(i) for i in names])
        return sorted(
            instance
            for instance, found in zip(names, records, strict=True)
            if found is not None and tag in found.record.list_fields.get("TAG_LIST", [])
        )

    # --- views of a table ------------------------------------------------------------------------
    def idealstate(self, name: str) -> dict[str, dict[str, str]]:
        table = self.table_name(name)
        self._config(table)
        found = read_record(self.zk, self.paths.idealstate(table))
        return {} if found is None else found.record.map_fields

    def externalview(self, name: str) -> dict[str, dict[str, str]]:
        table = self.table_name(name)
        self._config(table)
        found = read_record(self.zk, self.paths.externalview(table))
        return {} if found is None else found.record.map_fields

    def segment_names(self, name: str) -> list[str]:
        table = self.table_name(name)
        self._config(table)
        return sorted(self._children(self.paths.segments(table)))

    def segment_metadata(self, name: str, segment: str) -> SegmentZKMetadata:
        return SegmentZKMetadata.from_znrecord(self.segment_metadata_record(name, segment).record)

    def segment_metadata_record(self, name: str, segment: str) -> VersionedRecord:
        """The segment's metadata znode as read, with its version (for a later compare-and-set
        that need not read it again, `tables.zk.records.update_record(known=...)`)."""
        table = self.table_name(name)
        segment = self.segment_name(segment)
        found = read_record(self.zk, self.paths.segment(table, segment))
        if found is None:
            self._config(table)  # 404 for the table itself when that is what is missing
            raise NotFound(f"segment {segment} of table {raw_table_name(table)} not found")
        return found

    def segments_metadata(
        self, segments: Sequence[tuple[str, str]]
    ) -> list[SegmentZKMetadata | None]:
        """The metadata of each (table, segment), None where there is none, all read at once
        (one round trip's wait on a real ZooKeeper: a batch of builds reads 64 of them)."""
        paths = [
            self.paths.segment(self.table_name(table), self.segment_name(segment))
            for table, segment in segments
        ]
        return [
            None if found is None else SegmentZKMetadata.from_znrecord(found.record)
            for found in read_records(self.zk, paths)
        ]

    def config_and_segment(self, name: str, segment: str) -> tuple[TableConfig, SegmentZKMetadata]:
        """`get_table_config(name)` and `segment_metadata(name, segment)`, both read at once (one
        round trip's wait on a real ZooKeeper: a consumer's start waits for them)."""
        table, segment = self.table_name(name), self.segment_name(segment)
        config, meta = read_records(
            self.zk, [self.paths.table_config(table), self.paths.segment(table, segment)]
        )
        if config is None:
            raise NotFound(f"table {raw_table_name(table)} not found")
        if meta is None:
            raise NotFound(f"segment {segment} of table {raw_table_name(table)} not found")
        return table_config_from_znrecord(config.record), SegmentZKMetadata.from_znrecord(
            meta.record
        )

    @staticmethod
    def segment_name(name: str) -> str:
        """`name` when it is a valid segment name; 400 naming the rule it breaks otherwise."""
        try:
            return check_segment_name(name)
        except InvalidName as exc:
            raise BadRequest(str(exc)) from None

    # --- helpers ---------------------------------------------------------------------------------
    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNode:
            return []


def metadata_as_map(metadata: SegmentZKMetadata) -> dict[str, str]:
    """Pinot's `GET /segments/{t}/{s}/metadata` shape: the simpleFields, plus custom.map as JSON."""
    record = metadata.to_znrecord()
    out = dict(sorted(record.simple_fields.items()))
    if record.map_fields.get("custom.map"):
        out["custom.map"] = json.dumps(record.map_fields["custom.map"], separators=(",", ":"))
    return out
