from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from console import views

console_patterns = (
    [
        path("", views.home, name="home"),
    ],
    "console",
)

urlpatterns = [
    path("", include(console_patterns)),
    path("healthz", views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include(("console.api.urls", "pinot"))),
]
