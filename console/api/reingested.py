"""`POST /segments/reingested?tableName=<raw>`: a server completes a re-ingested segment (Pinot's
path; round 2 §C.3). The work is `tables.controller.reingested.complete_reingested_segment`.

Servers call it, not console users: no login, no CSRF; the cluster token is checked as the
completion endpoints check it (401 without it, counted with their refusals). The body is
multipart with `metadata.properties` and `creation.meta`; the custom headers UPLOAD_TYPE,
DOWNLOAD_URI and COPY_SEGMENT_TO_DEEP_STORE are read under their WSGI key (`HTTP_UPLOAD_TYPE`, ...),
so they may be sent with dashes or, where the HTTP server keeps them, with underscores. Answers
200 with Pinot's success message, or Pinot's `{"code", "error"}` with the refusal's status.

Every authenticated request counts in Pinot's global gauge `reingestedSegmentUploadsInProgress`
while it is processed, whatever its answer: a lease in Redis shared by every controller process
(`monitoring.in_progress`, which says why Redis and how a crash mid-request is forgotten); Redis
being down never fails the request.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from monitoring.in_progress import REINGESTED_UPLOADS, in_progress
from tables import builds
from tables.cluster import context
from tables.controller.completion import CallRefused
from tables.controller.reingested import (
    COPY_SEGMENT_TO_DEEP_STORE,
    DOWNLOAD_URI,
    UPLOAD_TYPE,
    ReingestedUpload,
    ReingestRefused,
    complete_reingested_segment,
)
from tables.redisconn import get_redis

from .completion import manager


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"code": status, "error": message}, status=status)


def _header(request: HttpRequest, name: str) -> str | None:
    return request.META.get(f"HTTP_{name}")


def _upload(request: HttpRequest) -> ReingestedUpload:
    properties = request.FILES.get("metadata.properties")
    creation = request.FILES.get("creation.meta")
    try:
        text = None if properties is None else properties.read().decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return ReingestedUpload(
        upload_type=_header(request, UPLOAD_TYPE),
        download_uri=_header(request, DOWNLOAD_URI),
        copy_to_deep_store=_header(request, COPY_SEGMENT_TO_DEEP_STORE),
        metadata_properties=text,
        creation_meta=None if creation is None else creation.read(),
    )


@login_not_required
@csrf_exempt
@require_POST
def upload_reingested_segment(request: HttpRequest) -> JsonResponse:
    try:
        manager().authenticate(request.headers.get("Authorization"))
    except CallRefused as exc:
        answer = _error(exc.refusal.http_status, exc.refusal.reason)
        answer["WWW-Authenticate"] = "Bearer"
        return answer
    redis_client = get_redis(settings.REDIS_URL)
    with in_progress(redis_client, settings.CLUSTER_NAME, REINGESTED_UPLOADS):
        return _complete(request)


def _complete(request: HttpRequest) -> JsonResponse:
    table = request.GET.get("tableName")
    if not table:
        return _error(400, "tableName is required")
    try:
        body = complete_reingested_segment(
            context.current(),
            table,
            _upload(request),
            builds.deep_store(),
            settings.CONTROLLER_VIP_URL,
            settings.CONTROLLER_INSTANCE_ID,
        )
    except ReingestRefused as refused:
        return _error(refused.status, refused.message)
    return JsonResponse(body)
