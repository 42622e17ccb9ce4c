"""Pinot's ZooKeeper browser paths (`console.api.zk`)."""

from django.urls import path

from . import zk

urlpatterns = [
    path("zk/ls", zk.ZkLs.as_view(), name="zk-ls"),
    path("zk/lsl", zk.ZkLsl.as_view(), name="zk-lsl"),
    path("zk/stat", zk.ZkStat.as_view(), name="zk-stat"),
    path("zk/get", zk.ZkGet.as_view(), name="zk-get"),
    path("zk/put", zk.ZkPut.as_view(), name="zk-put"),
    path("zk/delete", zk.ZkDelete.as_view(), name="zk-delete"),
]
