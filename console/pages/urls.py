"""The console's pages (namespace "console"). The overview is the root; the rest live under /ui/
because Pinot's API paths (/tables/..., /segments/...) share the root. `<table>` is the name with
its type (t_REALTIME); a raw name redirects."""

from django.urls import path

from console.pages import views, zk

urlpatterns = [
    path("", views.overview, name="home"),
    path("ui/tables/", views.tables, name="tables"),
    path("ui/tables/<str:table>/", views.table_detail, name="table"),
    path("ui/tables/<str:table>/heal/", views.table_heal, name="table-heal"),
    path(
        "ui/tables/<str:table>/partitions/<int:partition>/",
        views.partition_detail,
        name="partition",
    ),
    path("ui/tables/<str:table>/segments/<str:segment>/", views.segment_detail, name="segment"),
    path("ui/errors/", views.errors, name="errors"),
    path("ui/errors/<str:table>/<str:segment>/retry/", views.retry_build, name="retry-build"),
    path("ui/leaders/", views.leaders, name="leaders"),
    path("ui/instances/", views.instances, name="instances"),
    path("ui/audit/", views.audit, name="audit"),
    path("ui/zk/", zk.zk_browser, name="zk"),
    path("ui/vendor/plotly.min.js", views.plotly_js, name="plotly-js"),
]
