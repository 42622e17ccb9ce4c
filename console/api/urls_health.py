"""Pinot's controller `GET /health` (issue 22): the probe Kubernetes calls, without credentials."""

from django.urls import path

from . import health

urlpatterns = [
    path("health", health.Health.as_view(), name="health"),
]
