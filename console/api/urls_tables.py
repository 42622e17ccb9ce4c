"""Issue 22's table and segment paths (Pinot's). Included before the other routes, so the literal
`segments/{t}/servers` and `segments/{t}/crc` win over `segments/{t}/{segment}`, and
`segments/reingested` (a server completing a re-ingestion) over `segments/{t}`."""

from django.urls import path

from . import reingested
from . import tables_extra as views

urlpatterns = [
    path("tables/<str:table>/size", views.TableSize.as_view(), name="table-size"),
    path("tables/<str:table>/schema", views.TableSchema.as_view(), name="table-schema"),
    path("tables/<str:table>/instances", views.TableInstances.as_view(), name="table-instances"),
    path("tables/<str:table>/state", views.TableState.as_view(), name="table-state"),
    path(
        "tables/<str:table>/segmentsStatus",
        views.SegmentsStatus.as_view(),
        name="table-segments-status",
    ),
    path(
        "segments/reingested",
        reingested.upload_reingested_segment,
        name="segments-reingested",
    ),
    path("segments/<str:table>/servers", views.SegmentServers.as_view(), name="segment-servers"),
    path("segments/<str:table>/crc", views.SegmentCrc.as_view(), name="segment-crc"),
    path("debug/tables/<str:table>", views.TableDebug.as_view(), name="debug-table"),
]
