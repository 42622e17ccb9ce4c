"""/healthz: a real round trip to every component, JSON for probes, a page for browsers.

Signed in, every check's details; anonymous, up/down only from cached results."""

from __future__ import annotations

import pytest
from django.core.cache import cache

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.celery, pytest.mark.django_db]

ALL = {"zookeeper", "redis", "database", "celery_worker", "celery_beat", "spark", "ingestion"}


@pytest.fixture(autouse=True)
def _no_cached_probes():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def client(client, django_user_model):
    """Signed in: the details of every check (the anonymous view is tested below)."""
    client.force_login(django_user_model.objects.create_user("oncall", password="x" * 20))
    return client


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


def test_healthz_needs_no_login_but_home_does(anonymous):
    assert anonymous.get("/healthz?check=database").status_code == 200
    resp = anonymous.get("/")
    assert resp.status_code == 302
    assert resp["Location"].startswith("/login/")


def test_browsers_get_the_page(client):
    resp = client.get("/healthz", HTTP_ACCEPT="text/html,application/xhtml+xml")
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/html")
    assert b'data-check="spark"' in resp.content


def _build_job(finished_ago_s: float):
    from datetime import timedelta

    from django.utils import timezone

    from tables.models import Job

    finished = timezone.now() - timedelta(seconds=finished_ago_s)
    return Job.objects.create(
        kind=Job.Kind.BUILD,
        table="githubEvents_REALTIME",
        segment="githubEvents__0__3__20261125T0300Z",
        status=Job.Status.SUCCEEDED,
        worker="host:4242",
        duration_ms=3100,
        started_at=finished - timedelta(seconds=3),
        finished_at=finished,
    )


@pytest.mark.django_db(transaction=True)  # the check reads the Job from its own thread
def test_a_recent_build_proves_spark_without_queueing_a_probe(client, settings):
    """No Spark worker runs here: a probe could not be answered, a fresh build answers for it."""
    settings.HEALTH_SPARK_TIMEOUT_SECONDS = 2
    _build_job(finished_ago_s=1)
    body = client.get("/healthz?check=spark").json()
    assert body["checks"]["spark"]["ok"], body
    detail = body["checks"]["spark"]["detail"]
    assert "built githubEvents__0__3__20261125T0300Z" in detail and "host:4242" in detail


@pytest.mark.django_db(transaction=True)
def test_an_old_build_does_not_count_and_the_probe_must_answer(client, settings):
    """Whether a spark worker answers depends on what ran before: either way, the result is the
    probe's (its answer, or its time-out), not the old build's."""
    settings.HEALTH_SPARK_TIMEOUT_SECONDS = 1
    _build_job(finished_ago_s=30)
    check = client.get("/healthz?check=spark").json()["checks"]["spark"]
    assert "githubEvents__0__3__20261125T0300Z" not in check["detail"]
    assert ("ran a job" in check["detail"]) if check["ok"] else ("Timeout" in check["detail"])


# --- anonymous: up/down only, from cached probes --------------------------------------------------


@pytest.fixture
def anonymous():
    from django.test import Client

    return Client()


def test_anonymous_callers_get_up_or_down_without_details(anonymous, settings):
    settings.HEALTH_TIMEOUT_SECONDS = 1.0
    settings.HEALTH_SPARK_TIMEOUT_SECONDS = 1.0
    resp = anonymous.get("/healthz")
    body = resp.json()
    assert resp.status_code in (200, 503)
    assert set(body["checks"]) == ALL
    for name, check in body["checks"].items():
        assert set(check) == {"name", "label", "ok", "detail"}, name
        assert check["detail"] == ("up" if check["ok"] else "down")
    text = resp.content.decode()
    for secret in (settings.ZK_HOSTS, "session", "worker process", "sqlite", "postgresql"):
        assert secret not in text
    # What scripts/wait_ready.py reads: a status and, per check, ok and detail.
    assert body["status"] == ("ok" if all(c["ok"] for c in body["checks"].values()) else "down")


def test_anonymous_calls_share_one_cached_run(anonymous, settings, monkeypatch):
    from monitoring import health

    settings.HEALTH_CACHE_SECONDS = 600.0
    runs = []
    real = health.run_checks

    def counting(names=None):
        runs.append(names)
        return real(["database", "ingestion"])

    monkeypatch.setattr(health, "run_checks", counting)
    first = anonymous.get("/healthz?check=database").json()
    second = anonymous.get("/healthz").json()
    third = anonymous.get("/healthz?check=ingestion").json()
    assert runs == [None]  # one full run; the next calls answered from it
    assert first["checked_at"] == second["checked_at"] == third["checked_at"]
    assert set(first["checks"]) == {"database"} and set(third["checks"]) == {"ingestion"}
    assert first["checks"]["database"] == {
        "name": "database",
        "label": "Database",
        "ok": True,
        "detail": "up",
    }


def test_a_signed_in_account_still_gets_the_details(client):
    body = client.get("/healthz?check=database").json()
    detail = body["checks"]["database"]["detail"]
    assert body["checks"]["database"]["ok"] and "(" in detail  # vendor (database path)
    assert body["checks"]["database"]["latency_ms"] >= 0


# --- ingestion: rows wait upstream, nothing consumed or committed ---------------------------------


def _stuck_table(progressed_ago_s: float, segment_ago_s: float, lag: int = 500):
    import datetime as dt

    from django.utils import timezone

    from tests.console import mirror_factory as mf

    now = timezone.now()
    table = mf.table("orders", flush_time="10m")
    mf.partition(
        table,
        0,
        records_lag=lag,
        upstream_offset=1000 + lag,
        progressed_at=now - dt.timedelta(seconds=progressed_ago_s),
    )
    created = int((now - dt.timedelta(seconds=segment_ago_s)).timestamp() * 1000)
    mf.segment(table, 0, 0, display_state="CONSUMING", created_ms=created)
    return table


@pytest.mark.django_db(transaction=True)  # the check reads from its own thread
def test_ingestion_is_up_while_rows_are_consumed_and_committed(client):
    _stuck_table(progressed_ago_s=5, segment_ago_s=60)
    check = client.get("/healthz?check=ingestion").json()["checks"]["ingestion"]
    assert check["ok"], check
    assert "1 realtime table(s)" in check["detail"]


@pytest.mark.django_db(transaction=True)  # the check reads from its own thread
def test_ingestion_is_down_when_rows_wait_and_nothing_moves_for_twice_the_flush_time(client):
    _stuck_table(progressed_ago_s=1500, segment_ago_s=1500)  # flush time 10 min: limit 20 min
    resp = client.get("/healthz?check=ingestion")
    assert resp.status_code == 503
    detail = resp.json()["checks"]["ingestion"]["detail"]
    assert "orders_REALTIME: rows wait upstream but nothing consumed for 25 min" in detail
    assert "nothing committed for 25 min" in detail and "flush time 10 min 00 s" in detail


@pytest.mark.django_db(transaction=True)  # the check reads from its own thread
def test_ingestion_ignores_a_table_with_nothing_waiting(client):
    _stuck_table(progressed_ago_s=5000, segment_ago_s=5000, lag=0)
    assert client.get("/healthz?check=ingestion").json()["checks"]["ingestion"]["ok"]
