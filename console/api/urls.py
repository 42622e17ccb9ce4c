from django.urls import path

from . import pinot

# Pinot's controller paths, at the root as Pinot serves them.
urlpatterns = [
    path("schemas", pinot.SchemaList.as_view(), name="schemas"),
    path("schemas/<str:name>", pinot.SchemaDetail.as_view(), name="schema"),
    path("tables", pinot.TableList.as_view(), name="tables"),
    path("tables/<str:table>", pinot.TableDetail.as_view(), name="table"),
    path("tables/<str:table>/idealstate", pinot.TableIdealState.as_view(), name="table-idealstate"),
    path(
        "tables/<str:table>/externalview",
        pinot.TableExternalView.as_view(),
        name="table-externalview",
    ),
    path("segments/<str:table>", pinot.SegmentList.as_view(), name="segments"),
    path("segments/<str:table>/<str:segment>", pinot.SegmentDownload.as_view(), name="segment"),
    path(
        "segments/<str:table>/<str:segment>/metadata",
        pinot.SegmentMetadata.as_view(),
        name="segment-metadata",
    ),
]
