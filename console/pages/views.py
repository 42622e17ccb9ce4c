"""The console's pages. Thin: parse the query string, call one `queries` function, render.

Pages read the database mirror only; ZooKeeper is never touched while rendering. Every page shows
the mirror's age, and `static/console/refresh.js` re-fetches the page's `data-live` regions. A
refresh that does not ask for the charts' region (header `X-Console-Regions`) skips building
the figures.
"""

from __future__ import annotations

import gzip
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

import plotly
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_GET, require_POST

from console.alerting import store as alerts
from console.pages import failed_builds, healing, queries, reingest
from monitoring import charts
from tables.domain.index_configs import unbuilt_indexes
from tables.models import Health, MirroredTable

__all__ = [
    "audit",
    "errors",
    "instances",
    "leaders",
    "overview",
    "partition_detail",
    "plotly_js",
    "retry_build",
    "segment_detail",
    "table_detail",
    "table_heal",
    "tables",
]

CHARTS_REGION = "chart-data"
PLOTLY_VERSION = plotly.__version__


def _filters(request: HttpRequest, *names: str) -> dict[str, str]:
    return {name: request.GET.get(name, "").strip() for name in names}


def _query(filters: dict[str, Any]) -> str:
    """The filters as a query string without empty values (for paging and sorting links)."""
    return urlencode({k: v for k, v in filters.items() if v not in ("", None)})


def _sort_headers(current: str, filters: dict[str, str]) -> dict[str, dict[str, str]]:
    """Per sortable column: its link (toggling the direction) and its `aria-sort` value."""
    headers = {}
    for key in queries.TABLE_SORTS:
        if current.lstrip("-") == key:
            descending = current.startswith("-")
            aria, target = ("descending", key) if descending else ("ascending", f"-{key}")
        else:
            aria, target = "none", key if key == "name" else f"-{key}"
        href = "?" + _query({**filters, "sort": target})
        headers[key] = {"key": key, "aria": aria, "href": href}
    return headers


def _wants_region(request: HttpRequest, region: str) -> bool:
    asked = request.headers.get("X-Console-Regions")
    return asked is None or region in asked.split(",")


def _render(
    request: HttpRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    context = {
        **context,
        "mirror": queries.mirror_status(),
        "health_choices": [(h, h.label) for h in Health],
        "plotly_js_url": reverse("console:plotly-js") + f"?v={PLOTLY_VERSION}",
        "chart_keys": [(key, title) for key, (title, _unit) in charts.FIGURES.items()],
        "sample_seconds": settings.MIRROR_SAMPLE_SECONDS,
    }
    response = render(request, f"console/pages/{template}", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


def _not_found(request: HttpRequest, what: str) -> HttpResponse:
    return _render(request, "not_found.html", {"what": what}, status=404)


def _typed_or_redirect(
    request: HttpRequest, name: str, view: str, **kwargs: Any
) -> tuple[Any, HttpResponse | None]:
    """The mirrored table, or a response: a redirect for a raw name, else a 404 page."""
    table = queries.find_table(name)
    if table is None:
        return None, _not_found(request, f"table {name}")
    if table.name == name:
        return table, None
    url = reverse(f"console:{view}", kwargs={"table": table.name, **kwargs})
    if request.GET:
        url += "?" + request.GET.urlencode()
    return None, redirect(url)


def _heal_url(table: str) -> str:
    """Where the doctor's "Run healer now" form posts (`console:table-heal`), "" if nowhere."""
    try:
        return reverse("console:table-heal", args=[table])
    except NoReverseMatch:
        return ""


@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    filters = _filters(request, "verdict", "table", "health")
    data = queries.overview(
        **filters, page=request.GET.get("page"), per_page=request.GET.get("per_page")
    )
    context = {"data": data, **filters, "query": _query(filters), "alerts": alerts.active()}
    return _render(request, "overview.html", context)


@require_GET
def tables(request: HttpRequest) -> HttpResponse:
    filters = _filters(request, "q", "health", "tenant", "paused", "type")
    data = queries.table_list(
        q=filters["q"],
        health=filters["health"],
        tenant=filters["tenant"],
        paused=filters["paused"],
        table_type=filters["type"],
        sort=request.GET.get("sort", queries.DEFAULT_TABLE_SORT),
        page=request.GET.get("page"),
        per_page=request.GET.get("per_page"),
    )
    context = {
        "data": data,
        **filters,
        "query": _query({**filters, "sort": data.sort}),
        "filter_query": _query(filters),
        "sorts": _sort_headers(data.sort, filters),
    }
    return _render(request, "tables.html", context)


@require_GET
def table_detail(request: HttpRequest, table: str) -> HttpResponse:
    found, response = _typed_or_redirect(request, table, "table")
    if response is not None:
        return response
    state = request.GET.get("state", "").strip()
    data = queries.table_detail(
        found,
        segment_state=state,
        page=request.GET.get("page"),
        per_page=request.GET.get("per_page"),
        with_charts=_wants_region(request, CHARTS_REGION),
    )
    run_id = request.GET.get("healing_run", "").strip()
    context = {
        "data": data,
        "table": found,
        "state": state,
        "states": queries.SEGMENT_STATES,
        "query": _query({"state": state}),
        "healing": healing.history(found.name),
        "healing_run": healing.requested_run(found.name, run_id) if run_id else None,
        "shows_deep_store": _shows_deep_store(found, data),
        "reingest_requests": reingest.requests(found) if _shows_deep_store(found, data) else [],
        "alerts": alerts.active(found.raw_name),
        "alerts_scope": found.name,
        "unbuilt_indexes": unbuilt_indexes(found.config),
    }
    return _render(request, "table_detail.html", context)


def _shows_deep_store(table: MirroredTable, data: queries.TableDetail) -> bool:
    """Whether the table page has its "Committing / missing download URL" section (and the
    re-ingestion one under it): a pauseless REALTIME table, or any with such segments."""
    return bool((table.table_type == "REALTIME" and table.pauseless) or data.deep_store)


@require_POST
def table_heal(request: HttpRequest, table: str) -> HttpResponse:
    """Run healer now (operators; a CSRF-protected form): queue one healing run of the table,
    audited (`console.pages.healing.run_now`), then back to the table page, which follows the
    run (`?healing_run=<id>`)."""
    found = queries.find_table(table)
    if found is None:
        return _not_found(request, f"table {table}")
    try:
        run_id = healing.run_now(request, found)
    except healing.Refused as exc:
        return _render(request, "refused.html", {"reason": exc.reason}, status=exc.status)
    url = reverse("console:table", kwargs={"table": found.name})
    return redirect(f"{url}?{urlencode({'healing_run': run_id})}")


@require_GET
def partition_detail(request: HttpRequest, table: str, partition: int) -> HttpResponse:
    found, response = _typed_or_redirect(request, table, "partition", partition=partition)
    if response is not None:
        return response
    data = queries.partition_detail(
        found,
        partition,
        page=request.GET.get("page"),
        per_page=request.GET.get("per_page"),
        with_charts=_wants_region(request, CHARTS_REGION),
    )
    if data is None:
        return _not_found(request, f"partition {partition} of {found.name}")
    context = {"data": data, "table": found, "query": "", "heal_url": _heal_url(found.name)}
    return _render(request, "partition_detail.html", context)


@require_GET
def segment_detail(request: HttpRequest, table: str, segment: str) -> HttpResponse:
    found, response = _typed_or_redirect(request, table, "segment", segment=segment)
    if response is not None:
        return response
    data = queries.segment_detail(found, segment)
    if data is None:
        return _not_found(request, f"segment {segment} of {found.name}")
    return _render(request, "segment_detail.html", {"data": data, "table": found})


@require_GET
def errors(request: HttpRequest) -> HttpResponse:
    filters = _filters(request, "table")
    page = queries.error_segments(
        table=filters["table"], page=request.GET.get("page"), per_page=request.GET.get("per_page")
    )
    context = {
        "page": page,
        "failed_builds": failed_builds.rows(filters["table"]),
        "retried": request.GET.get("retried", "")[:512],
        **filters,
        "query": _query(filters),
    }
    return _render(request, "errors.html", context)


@require_POST
def retry_build(request: HttpRequest, table: str, segment: str) -> HttpResponse:
    """Retry now (operators; a CSRF-protected form): clear the segment's build back-off, audited
    (`console.pages.failed_builds.retry_now`), then back to the errors page."""
    try:
        failed_builds.retry_now(request, table, segment)
    except failed_builds.Refused as exc:
        return _render(request, "refused.html", {"reason": exc.reason}, status=exc.status)
    return redirect(f"{reverse('console:errors')}?{urlencode({'retried': segment})}")


@require_GET
def leaders(request: HttpRequest) -> HttpResponse:
    """Lead controllers: the partitions, the controllers, the leaderless partitions and the
    leadership history (`?partition=N&controller=C&page=P`; a partition that is not a small
    number does not filter)."""
    filters = _filters(request, "table", "partition", "controller")
    number = filters["partition"]
    partition = int(number) if number.isascii() and number.isdigit() and len(number) < 7 else None
    filters["partition"] = "" if partition is None else str(partition)
    data = queries.leaders(
        table=filters["table"],
        partition=partition,
        controller=filters["controller"],
        page=request.GET.get("page"),
        per_page=request.GET.get("per_page"),
    )
    context = {"data": data, "rows": data.rows, **filters, "query": _query(filters)}
    return _render(request, "leaders.html", context)


@require_GET
def instances(request: HttpRequest) -> HttpResponse:
    filters = _filters(request, "kind", "live")
    page = queries.instances(
        **filters, page=request.GET.get("page"), per_page=request.GET.get("per_page")
    )
    context = {"page": page, **filters, "query": _query(filters), "kinds": queries.INSTANCE_KINDS}
    return _render(request, "instances.html", context)


@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    filters = _filters(request, "user", "action", "result", "target")
    data = queries.audit_log(
        **filters, page=request.GET.get("page"), per_page=request.GET.get("per_page")
    )
    # Not `user` in the context: that name is the signed-in account.
    context = {"data": data, "filters": filters, "query": _query(filters)}
    return _render(request, "audit.html", context)


@lru_cache(maxsize=1)
def _plotly_bytes() -> bytes:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode()


@lru_cache(maxsize=1)
def _plotly_gzip() -> bytes:
    """The bundle gzipped once per process (4.8 MB -> about 1.4 MB on the wire)."""
    return gzip.compress(_plotly_bytes(), compresslevel=9, mtime=0)


def _accepts_gzip(request: HttpRequest) -> bool:
    return any(
        part.split(";")[0].strip().lower() == "gzip" and "q=0" not in part.replace(" ", "")
        for part in request.headers.get("Accept-Encoding", "").split(",")
    )


@login_not_required
@require_GET
def plotly_js(request: HttpRequest) -> HttpResponse:
    """plotly.min.js from the installed plotly package (no CDN): the JS always matches the
    Python figures. The URL carries the version, so browsers may keep it for a year. Served
    gzipped (compressed once per process) to clients that accept it."""
    if _accepts_gzip(request):
        response = HttpResponse(_plotly_gzip(), content_type="text/javascript; charset=utf-8")
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(_plotly_bytes(), content_type="text/javascript; charset=utf-8")
    response["Vary"] = "Accept-Encoding"
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response
