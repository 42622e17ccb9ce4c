"""The segment completion protocol's endpoints, at Pinot's paths with Pinot's parameter names
(reference §5.1) and response JSON (§5.3). Servers call them, not console users: no login, no
CSRF. A missing or malformed required parameter answers FAILED, as Pinot does.

Every call must carry the cluster token (`Authorization: Bearer <token>`) and come from a live
replica of the segment with an offset the stream has (`tables.domain.completion_trust`). A refused
call changes nothing and is answered with Pinot's FAILED body plus a `reason`, under HTTP 401 (no
or bad token), 403 (not a live instance, not a replica) or 400 (offset past the stream's end).

One addition to Pinot's parameters: segmentConsumed may carry `startCommit=true`; when it makes a
pauseless segment's caller the committer, commit start runs in that call (the next segment is in
the IdealState when COMMIT is answered), and the winner's segmentCommitStart then just answers
COMMIT_CONTINUE.
"""

from __future__ import annotations

import functools

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from tables import builds
from tables.cluster import context
from tables.controller.completion import (
    CallRefused,
    CompletionManager,
    SegmentFiles,
    installed,
)
from tables.domain.completion import RESP_FAILED, Response, Status
from tables.domain.completion_trust import Refusal

REQUIRED = ("instance", "name", "streamPartitionMsgOffset")
# segmentConsumed's optional `startCommit=true` (not Pinot's): a pauseless winner's commit start
# runs in the same call (`tables.domain.completion`, early commit start).
START_COMMIT_PARAM = "startCommit"


@functools.cache
def _manager(instance_id: str, vip_url: str) -> CompletionManager:
    return CompletionManager(context.current, instance_id, vip_url, builds.deep_store)


def manager() -> CompletionManager:
    """This process's completion manager (its FSMs live here): the controller's own, which
    answers leadership from memory, or else one that asks ZooKeeper per call."""
    return installed() or _manager(settings.CONTROLLER_INSTANCE_ID, settings.CONTROLLER_VIP_URL)


def _required(request: HttpRequest) -> tuple[str, str, int] | None:
    params = request.GET
    if any(not params.get(key) for key in REQUIRED):
        return None
    try:
        offset = int(params["streamPartitionMsgOffset"])
    except ValueError:
        return None
    return params["instance"], params["name"], offset


def _int(request: HttpRequest, key: str, default: int = -1) -> int:
    try:
        return int(request.GET.get(key, default))
    except ValueError:
        return default


def refused(refusal: Refusal) -> JsonResponse:
    """Pinot's FAILED body plus the refusal's reason, under the refusal's HTTP status."""
    answer = JsonResponse({**RESP_FAILED.to_json(), "reason": refusal.reason})
    answer.status_code = refusal.http_status
    if refusal.http_status == 401:
        answer["WWW-Authenticate"] = "Bearer"
    return answer


def protocol_call(method: str):
    """A protocol endpoint: no login, no CSRF, `method` only, the cluster token checked first,
    the required parameters parsed (FAILED when one is missing or malformed) and the Response
    serialised as Pinot does; a refused call answers `refused`."""

    def wrap(handler):
        @functools.wraps(handler)
        def view(request: HttpRequest) -> JsonResponse:
            try:
                params = request.GET
                authorization = request.headers.get("Authorization")
                manager().authenticate(authorization, params.get("instance"), params.get("name"))
                args = _required(request)
                response = Response(Status.FAILED) if args is None else handler(request, *args)
            except CallRefused as exc:
                return refused(exc.refusal)
            return JsonResponse(response.to_json())

        allowed = require_GET if method == "GET" else require_POST
        return login_not_required(csrf_exempt(allowed(view)))

    return wrap


@protocol_call("GET")
def segment_consumed(request: HttpRequest, instance: str, name: str, offset: int) -> Response:
    reason, rows = request.GET.get("reason"), _int(request, "rowCount")
    start = request.GET.get(START_COMMIT_PARAM) == "true"
    return manager().segment_consumed(instance, name, offset, reason, rows, start)


@protocol_call("GET")
def segment_stopped_consuming(
    request: HttpRequest, instance: str, name: str, offset: int
) -> Response:
    return manager().segment_stopped_consuming(instance, name, offset, request.GET.get("reason"))


@protocol_call("GET")
def segment_commit_start(request: HttpRequest, instance: str, name: str, offset: int) -> Response:
    return manager().segment_commit_start(instance, name, offset)


@protocol_call("GET")
def extend_build_time(request: HttpRequest, instance: str, name: str, offset: int) -> Response:
    return manager().extend_build_time(instance, name, offset, _int(request, "extraTimeSec", 0))


@protocol_call("POST")
def segment_commit_end_with_metadata(
    request: HttpRequest, instance: str, name: str, offset: int
) -> Response:
    location = request.GET.get("location")
    properties = request.FILES.get("metadata.properties")
    creation = request.FILES.get("creation.meta")
    if not location or properties is None or creation is None:
        return Response(Status.FAILED)
    try:
        files = SegmentFiles(properties.read().decode("utf-8"), creation.read())
    except (UnicodeDecodeError, ValueError):
        return Response(Status.FAILED)
    params = {k: v for k, v in request.GET.items() if k not in REQUIRED}
    return manager().segment_commit_end(instance, name, offset, location, files, params)
