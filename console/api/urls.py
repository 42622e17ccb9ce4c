from django.urls import include, path

from . import completion, consuming, force_commit, leader, pause, periodic, pinot, segment_reset

# Pinot's controller paths, at the root as Pinot serves them.
urlpatterns = [
    # Issue 22's operator surface, each family in its own module. Listed first: their literal
    # paths (segments/{t}/servers, segments/{t}/crc) must win over segments/{t}/{segment}.
    path("", include("console.api.urls_health")),
    path("", include("console.api.urls_cluster")),
    path("", include("console.api.urls_tables")),
    path("", include("console.api.urls_zk")),
    # The segment completion protocol (servers -> the table's lead controller).
    path("segmentConsumed", completion.segment_consumed, name="segment-consumed"),
    path(
        "segmentStoppedConsuming",
        completion.segment_stopped_consuming,
        name="segment-stopped-consuming",
    ),
    path("segmentCommitStart", completion.segment_commit_start, name="segment-commit-start"),
    path(
        "segmentCommitEndWithMetadata",
        completion.segment_commit_end_with_metadata,
        name="segment-commit-end",
    ),
    path("extendBuildTime", completion.extend_build_time, name="extend-build-time"),
    path("schemas", pinot.SchemaList.as_view(), name="schemas"),
    path("leader/tables", leader.LeaderTables.as_view(), name="leader-tables"),
    path("leader/tables/<str:table>", leader.LeaderForTable.as_view(), name="leader-table"),
    # The controller's periodic tasks (reference round 2 §0.3).
    path("periodictask/names", periodic.PeriodicTaskNames.as_view(), name="periodictask-names"),
    path("periodictask/run", periodic.PeriodicTaskRun.as_view(), name="periodictask-run"),
    # Realtime operations (reference §4).
    path(
        "tables/forceCommitStatus/<str:job_id>",
        force_commit.ForceCommitStatus.as_view(),
        name="force-commit-status",
    ),
    path("tables/<str:table>/forceCommit", force_commit.ForceCommit.as_view(), name="force-commit"),
    path(
        "tables/<str:table>/pauseConsumption",
        pause.PauseConsumption.as_view(),
        name="pause-consumption",
    ),
    path(
        "tables/<str:table>/resumeConsumption",
        pause.ResumeConsumption.as_view(),
        name="resume-consumption",
    ),
    path("tables/<str:table>/pauseStatus", pause.PauseStatus.as_view(), name="pause-status"),
    path(
        "tables/<str:table>/consumingSegmentsInfo",
        consuming.ConsumingSegmentsInfo.as_view(),
        name="consuming-segments-info",
    ),
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
    path(
        "segments/<str:table>/<str:segment>/reset",
        segment_reset.SegmentReset.as_view(),
        name="segment-reset",
    ),
]
