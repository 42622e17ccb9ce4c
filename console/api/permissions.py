"""Permission for Pinot's table and schema paths: any signed-in account reads; writes (create,
update, delete a table or schema) take the `admin` role (`console.roles`) or a staff account."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from console import roles


class ReadAuthenticatedWriteAdmin(BasePermission):
    message = "changing tables and schemas needs the admin role"

    def has_permission(self, request: Any, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in SAFE_METHODS:
            return True
        return bool(user.is_staff) or roles.role_of(user) == roles.ADMIN
