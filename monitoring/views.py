"""`/metrics`: the controller-side Prometheus exposition, computed from the mirror."""

from django.http import HttpRequest, HttpResponse


def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse("", content_type="text/plain; version=0.0.4; charset=utf-8")
