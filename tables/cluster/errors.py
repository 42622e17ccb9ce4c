"""Errors the services raise, each mapping to one HTTP status in the API layer."""

from __future__ import annotations

__all__ = ["BadRequest", "Conflict", "NotFound", "ServiceError", "Unavailable"]


class ServiceError(Exception):
    status = 500

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or [message]


class BadRequest(ServiceError):
    status = 400


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Unavailable(ServiceError):
    """The cluster cannot serve the request now (not initialised, ZooKeeper down)."""

    status = 503
