"""/healthz: a real round trip to every component; JSON for probes, a page for browsers.

The console's other pages are in `console.pages` (they read the mirror only).
"""

from __future__ import annotations

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

    `?check=name` (repeatable) runs only those checks. The page runs each check with its own
    request, so a slow Spark start does not hold up the rest.
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
    results = health.run_checks(names)
    ok = all(result.ok for result in results)
    body = {
        "status": "ok" if ok else "down",
        "checked_at": timezone.now().isoformat(),
        "checks": {result.name: result.as_dict() for result in results},
    }
    return JsonResponse(body, status=200 if ok else 503)
