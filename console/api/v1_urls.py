"""The console's own JSON API (`/api/v1/`, namespace "api"), its OpenAPI schema and Swagger UI."""

from __future__ import annotations

from django.urls import path

from . import bulk, failed_builds, reingest, schema, v1, v1_healing

urlpatterns = [
    path("whoami", v1.WhoAmI.as_view(), name="whoami"),
    path("mirror", v1.Mirror.as_view(), name="mirror"),
    path("tables", v1.Tables.as_view(), name="tables"),
    path("tables/<str:table>", v1.TableDetail.as_view(), name="table"),
    path("tables/<str:table>/partitions", v1.Partitions.as_view(), name="partitions"),
    path(
        "tables/<str:table>/partitions/<int:partition>",
        v1.PartitionDetail.as_view(),
        name="partition",
    ),
    path("tables/<str:table>/segments", v1.Segments.as_view(), name="segments"),
    path("tables/<str:table>/segments/<str:segment>", v1.SegmentDetail.as_view(), name="segment"),
    path(
        "tables/<str:table>/segments/<str:segment>/reingest",
        reingest.SegmentReingest.as_view(),
        name="segment-reingest",
    ),
    path("tables/<str:table>/reingestJobs", reingest.ReingestJobs.as_view(), name="reingest-jobs"),
    path("tables/<str:table>/healing", v1_healing.TableHealing.as_view(), name="table-healing"),
    path("healing/runs/<str:run_id>", v1_healing.HealingRunDetail.as_view(), name="healing-run"),
    path("errors", v1.Errors.as_view(), name="errors"),
    path("failedBuilds", failed_builds.FailedBuilds.as_view(), name="failed-builds"),
    path(
        "tables/<str:table>/segments/<str:segment>/retryBuild",
        failed_builds.RetryBuild.as_view(),
        name="segment-retry-build",
    ),
    path("leaders", v1.Leaders.as_view(), name="leaders"),
    path("instances", v1.Instances.as_view(), name="instances"),
    path("audit", v1.Audit.as_view(), name="audit"),
    path("bulk/pause", bulk.BulkPauseResume.as_view(audit_action="pause"), name="bulk-pause"),
    path("bulk/resume", bulk.BulkPauseResume.as_view(audit_action="resume"), name="bulk-resume"),
    path("schema/", schema.SchemaView.as_view(), name="schema"),
    path("docs/", schema.DocsView.as_view(url_name="api:schema"), name="docs"),
]
