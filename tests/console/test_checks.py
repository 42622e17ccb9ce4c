"""System checks name an unreachable ZooKeeper or Redis in one line."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

pytestmark = [pytest.mark.zk, pytest.mark.redis]


def test_checks_pass_when_the_services_run(zk):
    call_command("check", tags=["services"])


def test_an_unreachable_zookeeper_is_explained(settings):
    settings.ZK_HOSTS = "127.0.0.1:1"
    with pytest.raises(SystemCheckError) as err:
        call_command("check", tags=["services"])
    text = str(err.value)
    assert "(console.E001) ZooKeeper at 127.0.0.1:1 is unreachable" in text
    assert "scripts/services.sh start" in text


def test_an_unreachable_redis_is_explained(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    with pytest.raises(SystemCheckError) as err:
        call_command("check", tags=["services"])
    assert "(console.E002) Redis at redis://127.0.0.1:1/0 is unreachable" in str(err.value)
