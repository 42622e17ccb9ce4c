"""Schemas and tables in ZooKeeper: Pinot's PinotHelixResourceManager, for realtime tables.

Every request is validated completely before anything is written, so bad input changes nothing.
Creating a table writes the table config, every first segment's metadata, the IdealState and the
brokerResource entry in ONE ZooKeeper transaction (guarded by the brokerResource's version): a
crash or a concurrent create leaves either the whole table or none of it. Deleting is idempotent
and removes the IdealState first, so servers stop consuming before the metadata goes.

The reads (configs, schemas, IdealStates, segment metadata, name checks) are the cluster layer's
`tables.cluster.reads.ClusterReader`, which `ResourceManager` extends with the writes.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from tables.cluster.errors import BadRequest, Conflict, NotFound, Unavailable
from tables.cluster.reads import ClusterReader
from tables.domain.assignment import AssignmentError
from tables.domain.idealstate import consuming_segments, pause_state
from tables.domain.names import raw_table_name
from tables.domain.new_table import plan_new_table
from tables.domain.pause import with_stream_change
from tables.domain.schema import Schema, SchemaError, parse_schema, schema_to_znrecord
from tables.domain.segment_metadata import SegmentZKMetadata
from tables.domain.table_config import (
    TableConfig,
    TableConfigError,
    parse_table_config,
    table_config_to_znrecord,
)
from tables.streams.base import StreamError, provider_for
from tables.zk import codec
from tables.zk.cluster import BROKER_RESOURCE, is_initialised
from tables.zk.errors import BadVersion, NodeExists, NoNode, NotEmpty
from tables.zk.group_commit import update_idealstate
from tables.zk.records import read_record, update_record

if TYPE_CHECKING:
    from tables.segments.deepstore import DeepStore

__all__ = ["ResourceManager"]

MAX_CREATE_ATTEMPTS = 10


class ResourceManager(ClusterReader):
    """The writes: schemas and tables created, replaced and deleted (the reads are inherited)."""

    def _require_cluster(self) -> None:
        if not is_initialised(self.zk, self.paths):
            raise Unavailable(
                f"cluster {self.paths.cluster} is not initialised: "
                "run `python manage.py init_cluster`"
            )

    # --- schemas ---------------------------------------------------------------------------------
    def add_schema(self, data: Any, override: bool = True) -> Schema:
        self._require_cluster()
        try:
            schema = parse_schema(data, for_write=True)
        except SchemaError as exc:
            raise BadRequest(f"invalid schema: {exc}", exc.problems) from None
        path = self.paths.schema(schema.name)
        record = schema_to_znrecord(schema)
        try:
            self.zk.create(path, codec.encode(record), makepath=True)
        except NodeExists:
            if not override:
                raise Conflict(f"schema {schema.name} already exists") from None
            update_record(self.zk, path, lambda _: record)
        return schema

    def delete_schema(self, name: str) -> None:
        self.get_schema(name)
        users = [t for t in self.list_tables() if self._config(t).schema_name == name]
        if users:
            raise Conflict(f"cannot delete schema {name}: used by table(s) {', '.join(users)}")
        with contextlib.suppress(NoNode):
            self.zk.delete(self.paths.schema(name))

    # --- tables ----------------------------------------------------------------------------------
    def add_table(self, data: Any) -> TableConfig:
        """Validate everything, then create the table in one transaction."""
        self._require_cluster()
        config = self._validated_config(data)
        table = config.table_name_with_type
        if self.zk.exists(self.paths.table_config(table)) is not None:
            raise Conflict(f"table {table} already exists")
        offsets = self._start_offsets(config)
        instances = self.tagged_instances(config.server_tag)
        try:
            plan = plan_new_table(config, offsets, instances, self.ctx.now_ms())
        except AssignmentError as exc:
            raise BadRequest(
                f"cannot assign table {table}: {exc} (tag {config.server_tag})"
            ) from None
        for _ in range(MAX_CREATE_ATTEMPTS):
            if self._create_in_one_transaction(config, plan.idealstate, plan.segments):
                return config
        raise Conflict(f"table {table}: brokerResource kept changing; try again")

    def _validated_config(self, data: Any) -> TableConfig:
        problems: list[str] = []
        schema = None
        try:
            provisional = parse_table_config(data, for_write=True)
        except TableConfigError as exc:
            raise BadRequest(f"invalid table config: {exc}", exc.problems) from None
        if provisional.table_type != "REALTIME":
            raise BadRequest("only REALTIME tables are supported by this controller")
        try:
            schema = self.get_schema(provisional.schema_name)
        except NotFound:
            problems.append(
                f"schema {provisional.schema_name} not found: POST it to /schemas before the table"
            )
        try:
            config = parse_table_config(data, schema, for_write=True)
        except TableConfigError as exc:
            problems.extend(exc.problems)
            config = provisional
        if problems:
            raise BadRequest(f"invalid table config: {'; '.join(problems)}", problems)
        return config

    def _start_offsets(self, config: TableConfig) -> dict[int, int]:
        try:
            provider = provider_for(config.stream_config, self.ctx.redis_url)
        except StreamError as exc:
            raise BadRequest(str(exc)) from None
        try:
            count = provider.partition_count()
            if count < 1:
                raise BadRequest(f"topic {config.topic_name} has no partitions")
            criteria = (
                config.offset_reset if config.offset_reset in ("smallest", "largest") else "largest"
            )
            return {p: provider.offset_for_criteria(p, criteria) for p in range(count)}
        except StreamError as exc:
            raise BadRequest(f"stream of table {config.table_name_with_type}: {exc}") from None
        finally:
            provider.close()

    def _create_in_one_transaction(
        self, config: TableConfig, idealstate, segments: tuple[SegmentZKMetadata, ...]
    ) -> bool:
        table = config.table_name_with_type
        broker = read_record(self.zk, self.paths.idealstate(BROKER_RESOURCE))
        if broker is None:
            raise Unavailable("brokerResource is missing: run `python manage.py init_cluster`")
        broker_record = broker.record.copy()
        broker_record.map_fields.setdefault(table, {})
        broker_record.simple_fields["NUM_PARTITIONS"] = str(len(broker_record.map_fields))

        tx = self.zk.transaction()
        tx.create(self.paths.table_config(table), codec.encode(table_config_to_znrecord(config)))
        segments_path = self.paths.segments(table)
        if self.zk.exists(segments_path) is None:
            tx.create(segments_path, b"")
        for segment in segments:
            tx.create(
                self.paths.segment(table, segment.segment_name), codec.encode(segment.to_znrecord())
            )
        tx.create(self.paths.idealstate(table), codec.encode(idealstate))
        tx.set_data(
            self.paths.idealstate(BROKER_RESOURCE),
            codec.encode(broker_record),
            version=broker.version,
        )
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            return True
        if any(isinstance(r, NodeExists) for r in failures):
            raise Conflict(f"table {table} already exists")
        if any(isinstance(r, BadVersion) for r in failures):
            return False  # brokerResource changed under us: recompute and retry
        raise failures[0]

    def update_table(self, name: str, data: Any) -> TableConfig:
        """Replace a table's config (Pinot's `PUT /tables/{t}`), validated like a new one.

        The name in the config must be the table's. A change of the stream (type or topic) is
        refused unless the table is paused with nothing left consuming (`pauseStatus` complete):
        the topic swap of Pinot issue #7100, after which `resumeConsumption` reads the new topic.
        The config write is one transaction with a version check of the IdealState (which notes
        the swap, `streamChangedWhilePaused`, for the next resume), so a resume or commit in
        between makes it fail (409) instead of racing it.
        """
        table = self.table_name(name)
        current = self._config(table)
        config = self._validated_config(data)
        if config.table_name_with_type != table:
            raise BadRequest(
                f"the config is for {config.table_name_with_type}, not {table}: a table cannot "
                "be renamed"
            )
        ideal = read_record(self.zk, self.paths.idealstate(table))
        if ideal is None:
            raise NotFound(f"Table {table} not found!")
        old = (current.stream_type, current.topic_name)
        new = (config.stream_type, config.topic_name)
        if old != new:
            if not pause_state(ideal.record).paused or consuming_segments(ideal.record):
                raise BadRequest(
                    f"the stream of {table} changes ({old[0]} {old[1]} -> {new[0]} {new[1]}): "
                    "pause the table and wait until pauseStatus lists no consuming segment first"
                )
            self._start_offsets(config)  # the new topic must exist (400 otherwise)
        found = read_record(self.zk, self.paths.table_config(table))
        assert found is not None  # _config read it
        tx = self.zk.transaction()
        if old != new:  # the next resume starts every partition at the new topic's earliest
            before, after = f"{old[0]}:{old[1]}", f"{new[0]}:{new[1]}"
            noted = with_stream_change(ideal.record, before, after, self.ctx.now_ms())
            tx.set_data(self.paths.idealstate(table), codec.encode(noted), version=ideal.version)
        else:
            tx.check(self.paths.idealstate(table), ideal.version)
        tx.set_data(
            self.paths.table_config(table),
            codec.encode(table_config_to_znrecord(config)),
            version=found.version,
        )
        if any(isinstance(r, Exception) for r in tx.commit()):
            raise Conflict(f"table {table} changed while its config was updated; try again")
        return config

    def delete_table(self, name: str, deep_store: DeepStore | None = None) -> str:
        """Delete the table from ZooKeeper (IdealState first), then, given the deep store, every
        file of it there: its segments, uploads and staged rows (`DeepStore.delete_table`)."""
        table = self.table_name(name)
        if self.zk.exists(self.paths.table_config(table)) is None and (
            self.zk.exists(self.paths.idealstate(table)) is None
        ):
            raise NotFound(f"table {raw_table_name(table)} not found")
        self._delete(self.paths.idealstate(table))
        self._delete(self.paths.externalview(table), recursive=True)
        self._delete(self.paths.segments(table), recursive=True)
        self._delete(self.paths.table_config(table))
        self._delete(self.paths.instance_partitions(f"{raw_table_name(table)}_CONSUMING"))
        self._delete(self.paths.pauseless_debug(table))

        def drop_broker_entry(record):
            if table not in record.map_fields:
                return None
            out = record.copy()
            del out.map_fields[table]
            out.simple_fields["NUM_PARTITIONS"] = str(len(out.map_fields))
            return out

        if self.zk.exists(self.paths.idealstate(BROKER_RESOURCE)) is not None:
            update_idealstate(self.zk, self.paths.idealstate(BROKER_RESOURCE), drop_broker_entry)
        if deep_store is not None:
            deep_store.delete_table(raw_table_name(table))
        return table

    # --- helpers ---------------------------------------------------------------------------------
    def _delete(self, path: str, recursive: bool = False) -> None:
        try:
            self.zk.delete(path, recursive=recursive)
        except NoNode:
            pass
        except NotEmpty:
            self.zk.delete(path, recursive=True)
