"""`/metrics`: the controller-side Prometheus exposition, computed from the mirror.

Served by the controller process (port 9000) and by the web (gunicorn) alike: both read the same
database, so either can be scraped. No login (Prometheus has no session).
`monitoring.controller_metrics` reads the mirror, and ZooKeeper only for the lead-controller
health (`monitoring.leadership_live`, the mirror's while ZooKeeper cannot be read), so a scrape
still answers while ZooKeeper is down and reports how stale the mirror is. Compressed (gzip) when
the client accepts it, as Prometheus does.
"""

from __future__ import annotations

import logging

from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.gzip import gzip_page
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from monitoring.controller_metrics import controller_registry

log = logging.getLogger("monitoring")


@login_not_required
@never_cache
@require_safe
@gzip_page  # Prometheus asks for gzip: at 1,000 tables the text is megabytes
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format of every controller-side family; 503 if the database fails."""
    try:
        body = generate_latest(controller_registry())
    except DatabaseError as exc:
        log.warning("/metrics: the mirror database is unavailable: %s", exc)
        return HttpResponse(
            f"mirror database unavailable: {exc}\n",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
