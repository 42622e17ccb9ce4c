from django.conf import settings
from django.http import HttpRequest


def cluster(request: HttpRequest) -> dict[str, str]:
    """The cluster's name and ZooKeeper address, shown in every page's header."""
    return {"cluster_name": settings.CLUSTER_NAME, "zk_hosts": settings.ZK_HOSTS}
