"""The console's roles, on Django auth groups (created by migration `tables.0003_role_groups`).

- `viewer`: read-only (on-call). Any signed-in account without a role group reads as a viewer.
- `operator`: also the operator actions (OPERATOR_ACTIONS: pause, resume, force commit, re-ingest,
  segment reset, a failed build's retry, running a periodic task such as the healer, silencing an
  alert).
- `admin`: everything, including user management and ZooKeeper edits (`/zk/put`, `/zk/delete`);
  superusers are admins.
The cluster's own processes (Bearer cluster token, `console.api.cluster_auth.ClusterService`) have
the role `cluster`: read-only.

Pages hide what `can(user, action)` refuses; the API refuses it with 403 and audits the refusal
(`console.audit`). Both ask this module, so the two never disagree.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ADMIN",
    "ADMIN_ACTIONS",
    "OPERATOR",
    "OPERATOR_ACTIONS",
    "ROLES",
    "VIEWER",
    "can",
    "role_of",
]

VIEWER, OPERATOR, ADMIN, CLUSTER = "viewer", "operator", "admin", "cluster"
ROLES = (VIEWER, OPERATOR, ADMIN)
OPERATOR_ACTIONS = frozenset(
    {
        "pause",
        "resume",
        "force_commit",
        "reingest",
        "reset_segment",
        "retry_build",
        "run_periodic_task",
        "silence_alert",
    }
)
ADMIN_ACTIONS = frozenset({"manage_users", "edit_zk"})


def role_of(user: Any) -> str | None:
    """The user's strongest role, or None when not signed in."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    if getattr(user, "username", "") == CLUSTER and getattr(user, "pk", 1) is None:
        return CLUSTER
    if getattr(user, "is_superuser", False):
        return ADMIN
    groups = getattr(user, "groups", None)
    names = set(groups.values_list("name", flat=True)) if groups is not None else set()
    for role in (ADMIN, OPERATOR):
        if role in names:
            return role
    return VIEWER


def can(user: Any, action: str) -> bool:
    """May `user` perform `action` (one of OPERATOR_ACTIONS or ADMIN_ACTIONS)?"""
    role = role_of(user)
    if action in OPERATOR_ACTIONS:
        return role in (OPERATOR, ADMIN)
    if action in ADMIN_ACTIONS:
        return role == ADMIN
    raise ValueError(f"unknown action {action!r}")
