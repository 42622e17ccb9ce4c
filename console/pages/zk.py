"""The ZooKeeper browser page (`/ui/zk/`): a server-rendered shell only.

The page never reads ZooKeeper itself (import contract "pages-read-the-mirror"):
`static/console/zk.js` calls Pinot's `/zk/ls|get|stat` for the tree, a znode's data and its stat,
and `/zk/put` for an admin's edit (CSRF token, `X-Console-Page: 1`, a reason, the version the
editor loaded). The edit controls are rendered only for accounts that `console.roles.can` allows
`edit_zk`; the API refuses everyone else's writes (403) whatever the page shows.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console import roles

__all__ = ["zk_browser"]


@require_GET
def zk_browser(request: HttpRequest) -> HttpResponse:
    cluster_root = f"/{settings.CLUSTER_NAME}"
    start = request.GET.get("path", "").strip() or cluster_root
    context = {
        "cluster_root": cluster_root,
        "start_path": start if start.startswith("/") else cluster_root,
        "can_edit": roles.can(request.user, "edit_zk"),
    }
    response = render(request, "console/pages/zk.html", context)
    response["Cache-Control"] = "no-store"
    return response
