"""/healthz: a real round trip to every component; JSON for probes, a page for browsers.

Signed-in accounts get every check's details (addresses, database path, ZooKeeper session, worker
pids) and run the checks they ask for (`?check=`). Anonymous callers (load balancers, `make
demo`'s scripts/wait_ready.py) get up/down only, from the last full run cached for
HEALTH_CACHE_SECONDS, so they never start Celery or Spark round trips of their own.

The console's other pages are in `console.pages` (they read the mirror only).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from monitoring import health


def _wants_html(request: HttpRequest) -> bool:
    if request.GET.get("format") == "json":
        return False
    return request.GET.get("format") == "html" or "text/html" in request.headers.get("Accept", "")


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """JSON for probes and scripts (200 when all is up, else 503); a page for browsers.

    `?check=name` (repeatable) runs only those checks (anonymous: picks them from the cached
    run). The page asks for each check with its own request, so a slow Spark start does not hold
    up the rest.
    """
    names = request.GET.getlist("check") or None
    unknown = sorted(set(names or []) - set(health.CHECKS))
    if unknown:
        known = ", ".join(health.CHECKS)
        return JsonResponse(
            {"error": f"unknown check {', '.join(unknown)}; known: {known}"}, status=400
        )
    if _wants_html(request):
        return render(request, "console/healthz.html", {"checks": health.CHECKS})
    max_age = float(settings.HEALTH_CACHE_SECONDS)
    if not request.user.is_authenticated:
        at, cached = health.cached_checks(max_age)
        results = [r for r in cached if names is None or r.name in names]
        checks = {r.name: _up_down(r) for r in results}
    else:
        at, results = timezone.now(), health.run_checks(names)
        if names is None:
            health.remember(results, max_age)
        checks = {r.name: r.as_dict() for r in results}
    ok = all(result.ok for result in results)
    body = {"status": "ok" if ok else "down", "checked_at": at.isoformat(), "checks": checks}
    return JsonResponse(body, status=200 if ok else 503)


def _up_down(result: health.CheckResult) -> dict[str, object]:
    """What an anonymous caller sees of a check: its name and whether it is up."""
    state = "up" if result.ok else "down"
    return {"name": result.name, "label": result.label, "ok": result.ok, "detail": state}
