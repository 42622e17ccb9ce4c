"""Pinot's controller REST for the cluster-level operator surface: version, instances (and their
enable/disable), the cluster's name and config, tenants, auth, and the minion-task, logical-table
and schema summaries that Pinot's UI calls on every page load. Thin: parse, call, shape.

Reads take a signed-in account; enabling or disabling an instance takes the admin role and is
audited (`AuditedWrites`). `/auth/info` answers anyone: Pinot's UI asks it before signing in.
Shapes and keys are Pinot's (PinotInstanceRestletResource, PinotTenantRestletResource,
PinotClusterConfigs, PinotControllerAuthResource, PinotTaskRestletResource).
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from tables.cluster import context
from tables.cluster.errors import BadRequest, NotFound
from tables.cluster.instances import ClusterAdmin

from .pinot import AuditedWrites, PinotView

PROJECT_NAME = "pinot-realtime-console"
PROJECT_VERSION = "0.1.0"  # pyproject.toml's [project] version (a test keeps them equal)
STATES = ("enable", "disable")
MAX_STATE_BODY = 64
TENANT_KINDS = {
    None: "broker and server tenants",
    "server": "server tenant",
    "broker": "broker tenant",
}

STRINGS = {"type": "array", "items": {"type": "string"}}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT = OpenApiTypes.OBJECT


def _admin() -> ClusterAdmin:
    return ClusterAdmin(context.current())


def _choice(request: Request, key: str, allowed: tuple[str, ...]) -> str | None:
    """The query parameter `key` lowercased, None when absent; 400 when not one of `allowed`."""
    value = request.query_params.get(key)
    if value is None or value == "":
        return None
    if value.lower() not in allowed:
        raise BadRequest(f"{key} must be one of {', '.join(allowed)}, not {value[:40]!r}")
    return value.lower()


def _param(name: str, description: str, enum: tuple[str, ...] | None = None):
    return OpenApiParameter(name, str, OpenApiParameter.QUERY, description=description, enum=enum)


# --- version, cluster --------------------------------------------------------------------------
class Version(PinotView):
    @extend_schema(operation_id="version", responses={200: STRING_MAP})
    def get(self, request: Request) -> Response:
        return Response({PROJECT_NAME: PROJECT_VERSION})


class ClusterInfo(PinotView):
    @extend_schema(operation_id="cluster_info", responses={200: OBJECT})
    def get(self, request: Request) -> Response:
        return Response({"clusterName": context.current().paths.cluster})


class ClusterConfigs(PinotView):
    @extend_schema(operation_id="cluster_configs", responses={200: STRING_MAP})
    def get(self, request: Request) -> Response:
        return Response(_admin().cluster_configs())


# --- instances ---------------------------------------------------------------------------------
class Instances(PinotView):
    @extend_schema(
        operation_id="instances_list",
        parameters=[_param("tag", "only the instances carrying this tag")],
        responses={200: OBJECT},
    )
    def get(self, request: Request) -> Response:
        tag = request.query_params.get("tag") or None
        return Response({"instances": _admin().instance_names(tag)})


class InstanceDetail(PinotView):
    @extend_schema(operation_id="instance_get", responses={200: OBJECT})
    def get(self, request: Request, name: str) -> Response:
        return Response(_admin().instance(name))


class InstanceState(AuditedWrites):
    """`PUT /instances/{name}/state?state=enable|disable` (Pinot's), and the older `POST` with the
    state as the text body (or the same query parameter). Compare-and-set on the instance config."""

    audit_writes = {"PUT": "instance_state", "POST": "instance_state"}
    parser_classes: list = []  # the body, when any, is read as text below

    @extend_schema(
        operation_id="instance_state_put",
        request=None,
        parameters=[_param("state", "enable or disable", STATES)],
        responses={200: OBJECT},
    )
    def put(self, request: Request, name: str) -> Response:
        return self._toggle(request, name, request.query_params.get("state"))

    @extend_schema(
        operation_id="instance_state_post",
        request={"text/plain": OpenApiTypes.STR},
        parameters=[_param("state", "enable or disable (or give it as the text body)", STATES)],
        responses={200: OBJECT},
    )
    def post(self, request: Request, name: str) -> Response:
        state = request.query_params.get("state")
        if state is None:
            state = _text_body(request)
        return self._toggle(request, name, state)

    def _toggle(self, request: Request, name: str, state: str | None) -> Response:
        if not state or state.strip().lower() not in STATES:
            shown = (state or "")[:40]
            raise BadRequest(f"Unknown state {shown!r}: state must be enable or disable")
        state = state.strip().lower()
        self.audit_writes = {request.method: f"{state}_instance"}
        _admin().set_enabled(name, state == "enable")
        return Response({"status": f"Request to {state} instance '{name}' is successful"})


def _text_body(request: Request) -> str:
    """The request body as text, at most MAX_STATE_BODY bytes (a longer one is no state)."""
    stream = request.stream
    if stream is None:
        return ""
    body = stream.read(MAX_STATE_BODY + 1)
    if len(body) > MAX_STATE_BODY:
        raise BadRequest("the body must be the state: enable or disable")
    return body.decode("utf-8", errors="replace")


# --- tenants -----------------------------------------------------------------------------------
class Tenants(PinotView):
    @extend_schema(
        operation_id="tenants_list",
        parameters=[_param("type", "server or broker", ("server", "broker"))],
        responses={200: OBJECT},
    )
    def get(self, request: Request) -> Response:
        kind = _choice(request, "type", ("server", "broker"))
        admin = _admin()
        return Response(
            {
                "SERVER_TENANTS": admin.server_tenants() if kind != "broker" else None,
                "BROKER_TENANTS": admin.broker_tenants() if kind != "server" else None,
            }
        )


class TenantDetail(PinotView):
    @extend_schema(
        operation_id="tenant_get",
        parameters=[
            _param("type", "server or broker", ("server", "broker")),
            _param("tableType", "offline or realtime (with type=server)", ("offline", "realtime")),
        ],
        responses={200: OBJECT},
    )
    def get(self, request: Request, name: str) -> Response:
        kind = _choice(request, "type", ("server", "broker"))
        table_type = _choice(request, "tableType", ("offline", "realtime"))
        admin = _admin()
        body: dict = {}
        if kind in (None, "server"):
            body.update(_server_instances(admin, name, table_type, detailed=kind == "server"))
        if kind in (None, "broker"):
            body["BrokerInstances"] = admin.tenant_instances(name, "_BROKER")
        if not any(body.get(k) for k in ("ServerInstances", "BrokerInstances")):
            typed = f"_{table_type.upper()}" if table_type and kind == "server" else ""
            raise NotFound(f"Failed to find any instances for {TENANT_KINDS[kind]}: {name}{typed}")
        body["tenantName"] = name
        return Response(body)


def _server_instances(
    admin: ClusterAdmin, name: str, table_type: str | None, detailed: bool
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    found: set[str] = set()
    for kind, suffix, key in (
        ("offline", "_OFFLINE", "OfflineServerInstances"),
        ("realtime", "_REALTIME", "RealtimeServerInstances"),
    ):
        if table_type in (None, kind):
            instances = admin.tenant_instances(name, suffix)
            found.update(instances)
            if detailed:
                out[key] = instances
    out["ServerInstances"] = sorted(found)
    return out


class TenantTables(PinotView):
    @extend_schema(
        operation_id="tenant_tables",
        parameters=[_param("type", "server (default) or broker", ("server", "broker"))],
        responses={200: OBJECT},
    )
    def get(self, request: Request, name: str) -> Response:
        role = _choice(request, "type", ("server", "broker")) or "server"
        return Response({"tables": _admin().tenant_tables(name, role)})


class BrokersOfTenant(PinotView):
    @extend_schema(
        operation_id="brokers_of_tenant",
        parameters=[_param("state", "ONLINE or OFFLINE")],
        responses={200: STRINGS},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(_admin().tenant_instances(name, "_BROKER"))


# --- auth ----------------------------------------------------------------------------------------
class AuthInfo(PinotView):
    """Open to anyone, credentials or not: Pinot's UI asks it to decide whether to show a login."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(operation_id="auth_info", auth=[], responses={200: OBJECT})
    def get(self, request: Request) -> Response:
        return Response({"workflow": "BASIC"})


class AuthVerify(PinotView):
    """200 and `true` when the caller's credentials are good; 401 otherwise."""

    @extend_schema(
        operation_id="auth_verify",
        parameters=[
            _param("tableName", "ignored: any signed-in account reads every table"),
            _param("accessType", "READ, CREATE, UPDATE or DELETE"),
            _param("endpointUrl", "ignored"),
        ],
        responses={200: OpenApiTypes.BOOL},
    )
    def get(self, request: Request) -> Response:
        return Response(True)


# --- what this cluster does not have: minions, logical tables ---------------------------------
class TaskTypes(PinotView):
    @extend_schema(operation_id="tasks_tasktypes", responses={200: STRINGS})
    def get(self, request: Request) -> Response:
        return Response([])


class SchedulerInformation(PinotView):
    @extend_schema(operation_id="tasks_scheduler_information", responses={200: OBJECT})
    def get(self, request: Request) -> Response:
        return Response(
            {
                "Version": PROJECT_VERSION,
                "SchedulerName": "PinotTaskManager",
                "SchedulerInstanceId": "NON_CLUSTERED",
                "getThreadPoolClass": None,
                "getThreadPoolSize": 0,
                "SchedulerClass": None,
                "Clustered": False,
                "JobStoreClass": None,
                "NumberOfJobsExecuted": 0,
                "InStandbyMode": True,  # no minions: nothing is ever scheduled
                "RunningSince": None,
                "JobDetails": [],
            }
        )


class LogicalTables(PinotView):
    @extend_schema(operation_id="logical_tables", responses={200: STRINGS})
    def get(self, request: Request) -> Response:
        return Response([])


class SchemasInfo(PinotView):
    @extend_schema(operation_id="schemas_info", responses={200: {"type": "array", "items": {}}})
    def get(self, request: Request) -> Response:
        return Response(_admin().schema_infos())
