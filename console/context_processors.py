from django.conf import settings
from django.http import HttpRequest

from console import roles


def cluster(request: HttpRequest) -> dict[str, str]:
    """The cluster's name and ZooKeeper address, shown in every page's header."""
    return {"cluster_name": settings.CLUSTER_NAME, "zk_hosts": settings.ZK_HOSTS}


def role(request: HttpRequest) -> dict[str, object]:
    """The signed-in account's role and whether it may use operator buttons."""
    user = getattr(request, "user", None)
    name = roles.role_of(user)
    return {"role": name, "can_operate": name in (roles.OPERATOR, roles.ADMIN)}
