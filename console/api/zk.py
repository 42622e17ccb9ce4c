"""Pinot's ZooKeeper endpoints (`ZookeeperResource`). Thin: parse, call
`tables.cluster.zk_browser.ZkBrowser`, shape, audit.

- `GET /zk/ls?path=`: the child names (JSON list). `GET /zk/lsl?path=`: child name -> stat.
  `GET /zk/stat?path=`: ZooKeeper's stat (`czxid`, `mzxid`, `ctime`, `mtime`, `version`,
  `cversion`, `aversion`, `ephemeralOwner`, `dataLength`, `numChildren`, `pzxid`).
  `GET /zk/get?path=`: the data, gzip undone, JSON as JSON (204 when the znode has no data); the
  header `X-ZK-Version` carries the version of exactly that data, to send back as
  `expectedVersion`. Reads take any signed-in account (Pinot asks for an admin; here viewers browse
  in the console, which calls these).
- `PUT /zk/put?path=&data=&expectedVersion=&accessOption=`: the ZNRecord in `data` or in the JSON
  body; `DELETE /zk/delete?path=&expectedVersion=`. Admin only (`console.roles`, `edit_zk`):
  others get 403, audited DENIED, nothing written. Compare-and-set: a stale `expectedVersion` is
  409 and writes nothing. Each outcome is audited (`zk_put` / `zk_delete`, target the path, the
  detail a diff of the data) with the reason from `comment` or `reason` or the `X-Reason` header;
  the console's own calls (`X-Console-Page: 1`) must give one (400 otherwise).
Bad paths are 400, missing znodes 404, errors `{"code", "error"}`.
"""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.exceptions import APIException
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from console import roles
from console.audit import audited, reason_of, record, source_of
from tables.cluster import context
from tables.cluster.errors import BadRequest, ServiceError
from tables.cluster.zk_browser import ZkBrowser, ZkWrite, parse_record
from tables.models import AuditEntry
from tables.zk.browse import STAT_FIELDS

from .parsers import LimitedJSONParser
from .pinot import PinotView

EDIT = "edit_zk"
VERSION_HEADER = "X-ZK-Version"
INT32 = (-(2**31), 2**31 - 1)

_PATH = OpenApiParameter(
    "path",
    str,
    required=True,
    description="ZooKeeper path, must start with /",
    examples=[
        OpenApiExample("the root", value="/"),
        OpenApiExample("the IdealStates", value="/PinotCluster/IDEALSTATES"),
        OpenApiExample(
            "a table's IdealState", value="/PinotCluster/IDEALSTATES/githubEvents_REALTIME"
        ),
    ],
)
_EXPECTED = OpenApiParameter(
    "expectedVersion",
    int,
    default=-1,
    description="the version read (/zk/stat, or the X-ZK-Version header of /zk/get); "
    "required to change an existing znode; -1 creates a missing one",
)
_REASON = [
    OpenApiParameter("comment", str, description="the reason, kept in the audit log"),
    OpenApiParameter("reason", str, description="the reason (same as comment)"),
]
_STAT = {"type": "object", "properties": {name: {"type": "integer"} for name in STAT_FIELDS}}
_STATUS = {"type": "object", "properties": {"status": {"type": "string"}}}


class ZkAccess(BasePermission):
    """Reads: any signed-in account. Writes: the admin role (`edit_zk`); a refusal is audited."""

    message = "changing ZooKeeper needs the admin role"

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS or roles.can(user, EDIT):
            return True
        target = request.query_params.get("path", "")
        record(
            request,
            view.audit_action,
            target,
            AuditEntry.Result.DENIED,
            reason=_reason(request),
            status_code=403,
        )
        self.message = f"role {roles.role_of(user)!r} may not change ZooKeeper (admin only)"
        return False


def _reason(request: Request) -> str:
    return reason_of(request) or request.headers.get("X-Reason", "")


def _int(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None or text.strip() == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {text[:40]!r}") from None
    if not INT32[0] <= value <= INT32[1]:
        raise BadRequest(f"{name} {value} is out of range")
    return value


def _browser() -> ZkBrowser:
    return ZkBrowser(context.current())


def _write_detail(write: ZkWrite) -> dict[str, Any]:
    return {**write.detail, "created": write.created} if write.created else write.detail


def _audited_write(request: Request, action: str, run: Any) -> ZkWrite:
    """Run a write under the audit; the console's own calls must give a reason."""
    reason = _reason(request)

    def checked() -> ZkWrite:
        if source_of(request) == "page" and not reason.strip():
            raise BadRequest("a reason is required (comment, reason or the X-Reason header)")
        return run()

    target = request.query_params.get("path", "")
    return audited(request, action, target, reason, checked, _write_detail)


class _ZkView(PinotView):
    permission_classes = [ZkAccess]
    parser_classes = [LimitedJSONParser]
    audit_action = "zk_put"


class ZkLs(_ZkView):
    @extend_schema(
        operation_id="zk_ls",
        parameters=[_PATH],
        responses={200: {"type": "array", "items": {"type": "string"}}},
    )
    def get(self, request: Request) -> Response:
        return Response(_browser().ls(request.query_params.get("path")))


class ZkLsl(_ZkView):
    @extend_schema(
        operation_id="zk_lsl",
        parameters=[_PATH],
        responses={200: {"type": "object", "additionalProperties": _STAT}},
    )
    def get(self, request: Request) -> Response:
        return Response(_browser().lsl(request.query_params.get("path")))


class ZkStat(_ZkView):
    @extend_schema(operation_id="zk_stat", parameters=[_PATH], responses={200: _STAT})
    def get(self, request: Request) -> Response:
        return Response(_browser().stat(request.query_params.get("path")))


class ZkGet(_ZkView):
    @extend_schema(
        operation_id="zk_get", parameters=[_PATH], responses={200: OpenApiTypes.ANY, 204: None}
    )
    def get(self, request: Request) -> Response:
        read = _browser().get(request.query_params.get("path"))
        response = Response(read.data) if read.data is not None else Response(status=204)
        response[VERSION_HEADER] = str(read.stat["version"])
        return response


class ZkPut(_ZkView):
    audit_action = "zk_put"

    @extend_schema(
        operation_id="zk_put",
        parameters=[
            _PATH,
            OpenApiParameter("data", str, description="the ZNRecord (JSON); or in the body"),
            _EXPECTED,
            OpenApiParameter(
                "accessOption", int, default=1, description="Helix's AccessOption (1: persistent)"
            ),
            *_REASON,
        ],
        request=OpenApiTypes.OBJECT,
        responses={200: _STATUS},
    )
    def put(self, request: Request) -> Response:
        params = request.query_params

        def run() -> ZkWrite:
            text = params.get("data") or _payload(request)
            return _browser().put(
                params.get("path"),
                parse_record(text),
                _int(request, "expectedVersion", -1),
                _int(request, "accessOption", 1),
            )

        write = _audited_write(request, "zk_put", run)
        verb = "created" if write.created else "updated"
        return Response(
            {"status": f"Successfully {verb} path: {write.path}", "version": write.version}
        )


class ZkDelete(_ZkView):
    audit_action = "zk_delete"

    @extend_schema(
        operation_id="zk_delete",
        parameters=[_PATH, _EXPECTED, *_REASON],
        responses={200: _STATUS},
    )
    def delete(self, request: Request) -> Response:
        params = request.query_params

        def run() -> ZkWrite:
            return _browser().delete(params.get("path"), _int(request, "expectedVersion", -1))

        write = _audited_write(request, "zk_delete", run)
        return Response({"status": f"Successfully deleted path: {write.path}"})


def _payload(request: Request) -> str | None:
    """The JSON body as text (None when there is none)."""
    try:
        data = request.data
    except APIException as exc:  # a malformed, unsupported or oversized body: its 4xx, audited
        error = ServiceError(f"Failed to read the payload: {exc.detail}")
        error.status = exc.status_code
        raise error from None
    if data is None or (isinstance(data, dict) and not data):
        return None
    return json.dumps(data)
