"""Pinot's cluster-level controller paths (issue 22): version, instances, cluster, tenants, auth,
and the task, logical-table and schema summaries. Included before the table and schema paths, so
the literal `schemas/info` wins over `schemas/<name>`."""

from django.urls import path

from . import cluster

urlpatterns = [
    path("version", cluster.Version.as_view(), name="version"),
    path("instances", cluster.Instances.as_view(), name="instances"),
    path("instances/<str:name>", cluster.InstanceDetail.as_view(), name="instance"),
    path("instances/<str:name>/state", cluster.InstanceState.as_view(), name="instance-state"),
    path("cluster/info", cluster.ClusterInfo.as_view(), name="cluster-info"),
    path("cluster/configs", cluster.ClusterConfigs.as_view(), name="cluster-configs"),
    path("tenants", cluster.Tenants.as_view(), name="tenants"),
    path("tenants/<str:name>", cluster.TenantDetail.as_view(), name="tenant"),
    path("tenants/<str:name>/tables", cluster.TenantTables.as_view(), name="tenant-tables"),
    path("brokers/tenants/<str:name>", cluster.BrokersOfTenant.as_view(), name="tenant-brokers"),
    path("auth/info", cluster.AuthInfo.as_view(), name="auth-info"),
    path("auth/verify", cluster.AuthVerify.as_view(), name="auth-verify"),
    path("tasks/tasktypes", cluster.TaskTypes.as_view(), name="task-types"),
    path(
        "tasks/scheduler/information",
        cluster.SchedulerInformation.as_view(),
        name="task-scheduler-information",
    ),
    path("logicalTables", cluster.LogicalTables.as_view(), name="logical-tables"),
    path("schemas/info", cluster.SchemasInfo.as_view(), name="schemas-info"),
]
