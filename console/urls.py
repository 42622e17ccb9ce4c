from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from console import views
from console.alerting import views as alerting_views
from console.api.http_errors import not_found
from monitoring import views as monitoring_views

urlpatterns = [
    # Pages (namespace "console"): console/pages/urls.py.
    path("", include(("console.pages.urls", "console"))),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", monitoring_views.metrics, name="metrics"),
    # Alertmanager's webhook (Bearer ALERT_WEBHOOK_TOKEN) and the pages' silence form.
    path("api/v1/alerts/webhook", alerting_views.webhook, name="alerts-webhook"),
    path("ui/alerts/silence/", alerting_views.silence, name="alerts-silence"),
    # The console's own JSON and its OpenAPI schema: console/api/v1_urls.py.
    path("api/v1/", include(("console.api.v1_urls", "api"))),
    path("api/docs/", RedirectView.as_view(pattern_name="api:docs"), name="api-docs"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Pinot's controller paths, at the root as Pinot serves them.
    path("", include(("console.api.urls", "pinot"))),
]

# Unknown paths: Pinot's JSON {"code": 404, "error": ...} on API paths, Django's page on the
# console's pages. Django's own 405s get the same JSON (console.api.http_errors middleware).
handler404 = not_found
