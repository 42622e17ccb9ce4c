"""Instances, tenants and the cluster config, as Pinot's controller reports them.

Contract:
- `ClusterAdmin(ctx)` reads Helix's instance configs (`CONFIGS/PARTICIPANT/<id>`), the cluster
  config (`CONFIGS/CLUSTER/<cluster>`), table configs and schemas; its only write is
  `set_enabled`, a compare-and-set (`update_record`) of the instance config's `HELIX_ENABLED` and
  `HELIX_ENABLED_TIMESTAMP`, as Helix's `enableInstance` writes them. What a disabled instance
  does about it is the instance's business (the servers watch their own config).
- Tenants are not stored: as in Pinot they are read off the instances' tags, `<t>_REALTIME` and
  `<t>_OFFLINE` for server tenants, `<t>_BROKER` for broker tenants.
- An instance name is checked before any read or write (`BadRequest` naming the rule); a missing
  instance is `NotFound`. Shapes returned are Pinot's JSON, ready to serialise.
"""

from __future__ import annotations

import re
from typing import Any

from tables.domain.helix_enabled import is_enabled, with_enabled
from tables.domain.schema import SchemaError
from tables.domain.table_config import DEFAULT_TENANT, table_config_from_znrecord
from tables.domain.znrecord import ZNRecord
from tables.zk.errors import NoNode
from tables.zk.records import read_record, update_record

from .context import ClusterContext
from .errors import BadRequest, NotFound
from .reads import ClusterReader

__all__ = ["ClusterAdmin", "check_instance_name"]

ENABLED_TIMESTAMP = "HELIX_ENABLED_TIMESTAMP"
DISABLED_FIELDS = ("HELIX_DISABLED_REASON", "HELIX_DISABLED_TYPE")  # Helix drops them on enable
TAG_LIST = "TAG_LIST"
SERVER_SUFFIXES = ("_REALTIME", "_OFFLINE")
BROKER_SUFFIX = "_BROKER"
NOT_SET_PORT = -1  # Pinot's Instance.NOT_SET_*_PORT_VALUE
_INSTANCE_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,255}")


def check_instance_name(name: str) -> str:
    """`name` when it can be a Helix instance id; BadRequest naming the rule otherwise."""
    if not _INSTANCE_NAME.fullmatch(name) or name in (".", ".."):
        raise BadRequest(
            f"instance name {name[:80]!r} is not valid: 1 to 255 characters among letters, "
            "digits and . _ - : @ (e.g. Server_host_8098)"
        )
    return name


def _port(record: ZNRecord, key: str) -> int:
    try:
        return int(record.simple_fields[key])
    except (KeyError, ValueError):
        return NOT_SET_PORT


def instance_as_map(record: ZNRecord) -> dict[str, Any]:
    """Pinot's `GET /instances/{name}` shape, from the instance config."""
    simple = record.simple_fields
    out: dict[str, Any] = {
        "instanceName": record.id,
        "hostName": simple.get("HELIX_HOST"),
        "enabled": is_enabled(record),
        "port": simple.get("HELIX_PORT"),  # a string, as Helix's InstanceConfig.getPort()
        "tags": list(record.list_fields.get(TAG_LIST, [])),
        "pools": record.map_fields.get("pool"),
        "grpcPort": _port(record, "grpcPort"),
        "adminPort": _port(record, "adminPort"),
        "queryServicePort": _port(record, "queryServerPort"),
        "queryMailboxPort": _port(record, "queryMailboxPort"),
    }
    if simple.get("queriesDisabled", "").lower() == "true":
        out["queriesDisabled"] = "true"
    out["shutdownInProgress"] = simple.get("shutdownInProgress", "").lower() == "true"
    out["systemResourceInfo"] = record.map_fields.get("SYSTEM_RESOURCE_INFO")
    return out


def _tenant_of(tag: str, suffixes: tuple[str, ...]) -> str | None:
    for suffix in suffixes:
        if tag.endswith(suffix) and len(tag) > len(suffix):
            return tag[: -len(suffix)]
    return None


class ClusterAdmin:
    def __init__(self, ctx: ClusterContext) -> None:
        self.ctx = ctx
        self.zk = ctx.client
        self.paths = ctx.paths
        self.reader = ClusterReader(ctx)

    # --- instances -------------------------------------------------------------------------------
    def instance_names(self, tag: str | None = None) -> list[str]:
        """Every instance with a config (controllers, servers, brokers), or those tagged `tag`."""
        if tag is None:
            return sorted(self._children(self.paths.participant_configs))
        return self.reader.tagged_instances(tag)

    def instance(self, name: str) -> dict[str, Any]:
        return instance_as_map(self._config(name))

    def set_enabled(self, name: str, enabled: bool) -> bool:
        """Write HELIX_ENABLED (compare-and-set); returns whether the config changed."""
        path = self.paths.participant_config(check_instance_name(name))
        now_ms = self.ctx.now_ms()

        def toggle(record: ZNRecord) -> ZNRecord | None:
            new = with_enabled(record, enabled)
            if new is None:
                return None
            new.simple_fields[ENABLED_TIMESTAMP] = str(now_ms)
            if enabled:
                for field in DISABLED_FIELDS:
                    new.simple_fields.pop(field, None)
            return new

        before = read_record(self.zk, path)
        try:
            if before is None:
                raise NoNode(path)
            after = update_record(self.zk, path, toggle)
        except NoNode:
            raise NotFound(f"Instance {name} not found") from None
        return after.version != before.version

    # --- cluster ---------------------------------------------------------------------------------
    def cluster_configs(self) -> dict[str, str]:
        found = read_record(self.zk, self.paths.cluster_config)
        return {} if found is None else dict(sorted(found.record.simple_fields.items()))

    # --- tenants ---------------------------------------------------------------------------------
    def server_tenants(self) -> list[str]:
        return self._tenants(SERVER_SUFFIXES)

    def broker_tenants(self) -> list[str]:
        return self._tenants((BROKER_SUFFIX,))

    def tenant_instances(self, tenant: str, suffix: str) -> list[str]:
        """Instances tagged `<tenant><suffix>`."""
        return self.reader.tagged_instances(f"{tenant}{suffix}")

    def tenant_tables(self, tenant: str, role: str = "server") -> list[str]:
        """Tables (with type) whose `tenants.server` (or `.broker`) is `tenant`."""
        found = []
        for table in self.reader.list_tables():
            record = read_record(self.zk, self.paths.table_config(table))
            if record is None:
                continue
            try:
                config = table_config_from_znrecord(record.record)
            except ValueError:  # a config this project cannot read is no tenant's
                continue
            tenants = config.rest.get("tenants") or {}
            named = tenants.get(role) if isinstance(tenants, dict) else None
            if (named if isinstance(named, str) and named else DEFAULT_TENANT) == tenant:
                found.append(table)
        return found

    # --- schemas ---------------------------------------------------------------------------------
    def schema_infos(self) -> list[dict[str, Any]]:
        """Pinot's `GET /schemas/info`: the field counts of every schema that reads."""
        infos = []
        for name in self.reader.list_schemas():
            try:
                schema = self.reader.get_schema(name)
            except (NotFound, BadRequest, SchemaError):
                continue  # deleted meanwhile, or a name or body this project cannot read
            kinds = [spec.kind for spec in schema.fields]
            complex_specs = schema.raw.get("complexFieldSpecs")
            infos.append(
                {
                    "schemaName": schema.name,
                    "numDimensionFields": kinds.count("DIMENSION"),
                    "numDateTimeFields": kinds.count("DATE_TIME"),
                    "numMetricFields": kinds.count("METRIC"),
                    "numComplexFields": len(complex_specs)
                    if isinstance(complex_specs, list)
                    else 0,
                }
            )
        return infos

    # --- helpers ---------------------------------------------------------------------------------
    def _config(self, name: str) -> ZNRecord:
        found = read_record(self.zk, self.paths.participant_config(check_instance_name(name)))
        if found is None:
            raise NotFound(f"Instance {name} not found")
        return found.record

    def _configs(self) -> dict[str, ZNRecord]:
        out = {}
        for name in self._children(self.paths.participant_configs):
            found = read_record(self.zk, self.paths.participant_config(name))
            if found is not None:
                out[name] = found.record
        return out

    def _tenants(self, suffixes: tuple[str, ...]) -> list[str]:
        names = {
            tenant
            for record in self._configs().values()
            for tag in _tags(record)
            if (tenant := _tenant_of(tag, suffixes)) is not None
        }
        return sorted(names)

    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNode:
            return []


def _tags(record: ZNRecord) -> list[str]:
    tags = record.list_fields.get(TAG_LIST, [])
    return tags if isinstance(tags, list) else []
