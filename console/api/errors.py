"""Errors as Pinot's controller answers them: {"code": <status>, "error": <message>}.

Besides the services' errors and DRF's own (400 parse errors, 401, 403, 404, 405, 415, 413 from
`console.api.parsers`), Django's refusals of a request body that happen while DRF reads it (a form
over DATA_UPLOAD_MAX_MEMORY_SIZE, too many fields) get the same shape and a reason, instead of a
bare HTML 400.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from rest_framework.response import Response
from rest_framework.views import exception_handler

from tables.cluster.errors import ServiceError

from .parsers import too_large_message


def pinot_error(status: int, message: str) -> Response:
    return Response({"code": status, "error": message}, status=status)


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        body: dict[str, Any] = {"code": exc.status, "error": exc.message}
        if len(exc.problems) > 1:
            body["problems"] = exc.problems
        return Response(body, status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return pinot_error(413, too_large_message(settings.DATA_UPLOAD_MAX_MEMORY_SIZE))
    if isinstance(exc, SuspiciousOperation):
        return pinot_error(400, f"bad request: {exc}")
    response = exception_handler(exc, context)
    if response is not None:
        detail = (
            response.data.get("detail", response.data)
            if isinstance(response.data, dict)
            else response.data
        )
        response.data = {"code": response.status_code, "error": str(detail)}
    return response
