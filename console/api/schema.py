"""The OpenAPI 3 schema (`/api/v1/schema/`) and its Swagger UI (`/api/v1/docs/`).

drf-spectacular documents the DRF views: `/api/v1/` and Pinot's controller paths. The segment
completion endpoints (`console.api.completion`) are plain Django views that servers call with
query parameters, which drf-spectacular cannot see; `PinotSchemaGenerator` (schema_generator.py)
adds them with Pinot's parameter names and statuses (reference §5.1-§5.3). The Swagger page's
assets come from drf-spectacular-sidecar under /static/, never from a CDN.

Offline: `python manage.py spectacular --validate --skip-checks` (settings name the generator).
"""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from .schema_generator import PinotSchemaGenerator

__all__ = ["DocsView", "PinotSchemaGenerator", "SchemaView"]


class ClusterTokenScheme(OpenApiAuthenticationExtension):
    """`Authorization: Bearer <cluster token>` (console.api.cluster_auth)."""

    target_class = "console.api.cluster_auth.ClusterTokenAuthentication"
    name = "clusterToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "the cluster token servers present (read-only)",
        }


class SchemaView(SpectacularAPIView):
    """The schema, to any signed-in account (session, basic, or `Authorization: Token`)."""

    generator_class = PinotSchemaGenerator
    permission_classes = [IsAuthenticated]


class DocsView(SpectacularSwaggerView):
    """Swagger UI over the schema; signed-in browsers only (others go to the login page).

    Swagger UI's online validator badge is switched off: it would send the schema's URL to
    validator.swagger.io, and the page must make no request outside this site.
    """

    permission_classes = [IsAuthenticated]

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        view = super().as_view(**initkwargs)
        view.login_required = True  # DRF views opt out; this page wants the login redirect
        return view

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().get(request, *args, **kwargs)
        options = spectacular_settings.SWAGGER_UI_SETTINGS
        if isinstance(options, dict):  # a string of JavaScript is left as configured
            response.data["settings"] = json.dumps({**options, "validatorUrl": None})
        return response
