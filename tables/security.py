"""The cluster token: how a cluster's own processes (servers) authenticate to the controller's API.

`CLUSTER_TOKEN` when set; otherwise an HMAC of a fixed label under SECRET_KEY, which every process
of one deployment shares, so the demo and tests need no extra secret and a leaked token does not
reveal the key.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

__all__ = ["cluster_token"]


def cluster_token() -> str:
    if settings.CLUSTER_TOKEN:
        return settings.CLUSTER_TOKEN
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, b"pinot-cluster-token", hashlib.sha256).hexdigest()
