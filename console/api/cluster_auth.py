"""`Authorization: Bearer <cluster token>`: a server of this cluster, allowed to read.

The caller becomes a `ClusterService` user: authenticated, not staff, so it may use every read
endpoint (segment downloads, metadata) and no write endpoint. A wrong token is refused (401)
rather than ignored, so a misconfigured server shows up at once.
"""

from __future__ import annotations

import hmac

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from tables.security import cluster_token

__all__ = ["ClusterService", "ClusterTokenAuthentication"]


class ClusterService:
    """The identity of a cluster process (not a database user)."""

    username = "cluster"
    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __str__(self) -> str:
        return self.username


class ClusterTokenAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[ClusterService, None] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("the Bearer header takes exactly one token")
        if not hmac.compare_digest(parts[1], cluster_token().encode()):
            raise AuthenticationFailed("invalid cluster token")
        return ClusterService(), None

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"
