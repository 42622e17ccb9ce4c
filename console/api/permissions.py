from rest_framework.permissions import SAFE_METHODS, BasePermission


class ReadAuthenticatedWriteAdmin(BasePermission):
    """Any signed-in account reads; changing the cluster takes an admin (roles come later)."""

    message = "changing the cluster needs an admin account"

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or bool(user.is_staff)
