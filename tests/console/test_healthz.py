"""/healthz: a real round trip to every component, JSON for probes, a page for browsers."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.celery, pytest.mark.django_db]

ALL = {"zookeeper", "redis", "database", "celery_worker", "celery_beat", "spark"}


def _wait_for_beat(client):
    from tests.poll import wait_until

    wait_until(
        lambda: client.get("/healthz?check=celery_beat").json()["status"] == "ok",
        timeout=30,
        interval=0.2,
        what="a beat heartbeat",
    )


def test_it_is_all_green_when_everything_runs(client, zk, celery_workers):
    _wait_for_beat(client)
    resp = client.get("/healthz")
    body = resp.json()
    assert resp.status_code == 200, body
    assert body["status"] == "ok"
    assert set(body["checks"]) == ALL
    for name, check in body["checks"].items():
        assert check["ok"], (name, check["detail"])
        assert check["latency_ms"] >= 0
    assert "not initialised yet" in body["checks"]["zookeeper"]["detail"]
    assert "Spark 4." in body["checks"]["spark"]["detail"]


def test_it_reports_the_cluster_once_its_root_exists(client, zk, settings):
    zk.create(f"/{settings.CLUSTER_NAME}")
    body = client.get("/healthz?check=zookeeper").json()
    assert body["checks"]["zookeeper"]["ok"]
    assert f"cluster /{settings.CLUSTER_NAME} initialised" in body["checks"]["zookeeper"]["detail"]


def test_a_dead_zookeeper_is_503_and_the_others_still_report(client, settings, celery_workers):
    settings.ZK_HOSTS = "127.0.0.1:1"
    settings.HEALTH_TIMEOUT_SECONDS = 1.0
    resp = client.get("/healthz?check=zookeeper&check=redis&check=celery_worker")
    body = resp.json()
    assert resp.status_code == 503
    assert body["status"] == "down"
    assert not body["checks"]["zookeeper"]["ok"]
    assert "127.0.0.1:1 is unreachable" in body["checks"]["zookeeper"]["detail"]
    assert body["checks"]["redis"]["ok"]
    assert body["checks"]["celery_worker"]["ok"]


def test_a_dead_redis_is_reported_with_its_address(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.HEALTH_TIMEOUT_SECONDS = 1.0
    resp = client.get("/healthz?check=redis")
    assert resp.status_code == 503
    assert "redis://127.0.0.1:1/0" in resp.json()["checks"]["redis"]["detail"]


def test_an_unknown_check_is_a_400_with_the_known_names(client):
    resp = client.get("/healthz?check=nope")
    assert resp.status_code == 400
    assert "unknown check nope" in resp.json()["error"]


def test_healthz_needs_no_login_but_home_does(client):
    assert client.get("/healthz?check=database").status_code == 200
    resp = client.get("/")
    assert resp.status_code == 302
    assert resp["Location"].startswith("/login/")


def test_browsers_get_the_page(client):
    resp = client.get("/healthz", HTTP_ACCEPT="text/html,application/xhtml+xml")
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/html")
    assert b'data-check="spark"' in resp.content
