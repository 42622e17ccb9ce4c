"""Errors as Pinot's controller answers them: {"code": <status>, "error": <message>}."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler

from tables.controller.errors import ServiceError


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        body: dict[str, Any] = {"code": exc.status, "error": exc.message}
        if len(exc.problems) > 1:
            body["problems"] = exc.problems
        return Response(body, status=exc.status)
    response = exception_handler(exc, context)
    if response is not None:
        detail = (
            response.data.get("detail", response.data)
            if isinstance(response.data, dict)
            else response.data
        )
        response.data = {"code": response.status_code, "error": str(detail)}
    return response
