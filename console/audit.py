"""The audit log: every state-changing action, from a page or the API, allowed or not.

`record(...)` writes one `tables.models.AuditEntry`. `OperatorAction` is the DRF permission for
operator endpoints: it refuses (403) accounts whose role may not perform the view's
`audit_action`, and audits the refusal before DRF answers, so a denied attempt is never lost.
Views audit their own outcome (OK / REJECTED / FAILED) with `record`, after the action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.utils import timezone
from rest_framework.permissions import BasePermission

from console import roles
from tables.cluster.errors import ServiceError
from tables.domain.names import InvalidName, raw_table_name, table_name_with_type
from tables.models import AuditEntry

__all__ = ["OperatorAction", "audited", "reason_of", "record", "source_of", "table_target"]

T = TypeVar("T")


def source_of(request: Any) -> str:
    """ "page" for the console's own fetch calls (they send X-Console-Page: 1), else "api"."""
    return "page" if request.headers.get("X-Console-Page") == "1" else "api"


def _storable(text: str, max_length: int | None = None) -> str:
    """`text` as every database stores it: NUL bytes (refused by PostgreSQL) shown escaped, and
    no longer than the column (a hostile name is audited, shortened, not a failed request)."""
    text = text.replace("\x00", "\\x00")
    return text if max_length is None or len(text) <= max_length else text[: max_length - 3] + "..."


def record(
    request: Any,
    action: str,
    target: str,
    result: str,
    *,
    reason: str = "",
    status_code: int | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEntry:
    user = getattr(request, "user", None)
    return AuditEntry.objects.create(
        at=timezone.now(),
        username=getattr(user, "username", "") or "anonymous",
        role=roles.role_of(user) or "",
        action=action,
        target=_storable(target, 512),
        reason=_storable(reason),
        result=result,
        status_code=status_code,
        detail=detail or {},
        source=source_of(request),
        remote_addr=request.META.get("REMOTE_ADDR", "")[:64],
    )


class OperatorAction(BasePermission):
    """Allow the view's `audit_action` only to roles that may perform it; audit refusals.

    The view sets `audit_action` (e.g. "force_commit") and may define `audit_target(request,
    **kwargs)`; the reason is read from the `comment` or `reason` query/body parameter.
    """

    message = "your role may not perform this action"

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False  # 401, not an audited refusal: nobody to attribute it to
        action = view.audit_action
        if roles.can(user, action):
            return True
        kwargs = getattr(view, "kwargs", {}) or {}
        target_of = getattr(view, "audit_target", None)
        target = target_of(request, **kwargs) if target_of else "/".join(map(str, kwargs.values()))
        reason = request.query_params.get("comment") or request.query_params.get("reason") or ""
        record(request, action, target, AuditEntry.Result.DENIED, reason=reason, status_code=403)
        self.message = f"role {roles.role_of(user)!r} may not perform {action!r}"
        return False


def audited(
    request: Any,
    action: str,
    target: str,
    reason: str,
    call: Callable[[], T],
    detail: Callable[[T], dict[str, Any]] = lambda _: {},
) -> T:
    """Run an operator action and audit its outcome: OK (200, `detail(result)`), REJECTED (a 4xx
    ServiceError) or FAILED (a 5xx one, or any other exception, re-raised as Pinot's 500 with the
    message). Permission refusals never get here: `OperatorAction` audits those."""
    try:
        result = call()
    except ServiceError as exc:
        outcome = AuditEntry.Result.REJECTED if exc.status < 500 else AuditEntry.Result.FAILED
        record(
            request,
            action,
            target,
            outcome,
            reason=reason,
            status_code=exc.status,
            detail={"error": exc.message},
        )
        raise
    except Exception as exc:  # ZooKeeper trouble and the like
        message = f"{action} of {target} failed: {type(exc).__name__}: {exc}"
        record(
            request,
            action,
            target,
            AuditEntry.Result.FAILED,
            reason=reason,
            status_code=500,
            detail={"error": message},
        )
        raise ServiceError(message) from exc
    record(
        request,
        action,
        target,
        AuditEntry.Result.OK,
        reason=reason,
        status_code=200,
        detail=detail(result),
    )
    return result


def table_target(table: str) -> str:
    """The audit target of a table action: the name with its type (`t_REALTIME`), as pages name
    it, whatever form the caller gave."""
    try:
        return table_name_with_type(raw_table_name(table))
    except InvalidName:
        return table


def reason_of(request: Any) -> str:
    params = request.query_params
    return params.get("comment") or params.get("reason") or ""
