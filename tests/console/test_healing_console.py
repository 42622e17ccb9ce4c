"""The console's healing parts: the table page's healing history, "Run healer now" and the run it
follows (`?healing_run=<id>`), and the errors page's Reset buttons.

Page tests render mirror and `HealingRun` rows made in the database (no ZooKeeper, Redis or
worker); the heal POST inside a test transaction registers its Celery send for the commit, which
never comes, so nothing reaches the broker. The last test runs the whole chain with real worker
processes, ZooKeeper and Redis: the operator's POST queues the task, a worker's healing manager
resets an ERROR segment (its STATE_TRANSITION messages appear in ZooKeeper), the run is recorded,
`/api/v1/healing/runs/<id>` answers and the table page shows the result.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client
from django.utils import timezone

from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.names import LLCSegmentName
from tables.domain.znrecord import ZNRecord
from tables.models import AuditEntry, HealingRun
from tables.zk import messages
from tables.zk.cluster import init_cluster
from tables.zk.participants import register_participant
from tables.zk.records import create_record
from tests.accounts import grant
from tests.cluster_fixtures import PATHS, SERVERS, load
from tests.console import mirror_factory as mf
from tests.ingest_cluster import table_config
from tests.poll import wait_until
from tests.tables.leaders import lead_every_partition

PASSWORD = "a-long-test-password"
TABLE = "events_REALTIME"
RUN_ID = re.compile(r"\?healing_run=(api-[0-9a-f]{8})$")


@pytest.fixture
def viewer(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("vera", password=PASSWORD))
    return client


@pytest.fixture
def operator(client, django_user_model):
    user = grant(django_user_model.objects.create_user("otto", password=PASSWORD), "operator")
    client.force_login(user)
    return client


def _text(resp) -> str:
    return resp.content.decode()


def _run(run_id: str, ago_s: float, table: str = TABLE, **report) -> HealingRun:
    started = timezone.now() - dt.timedelta(seconds=ago_s)
    ms = int(started.timestamp() * 1000)
    values = {"table": table, "runId": run_id, "trigger": "schedule", "startedMs": ms}
    return HealingRun.record({**values, "finishedMs": ms + 1500, **report})


STEP1 = {
    "kind": "commitStoppedAfterStep1",
    "detail": "events__0__4__20231114T2213Z is DONE but still CONSUMING in the IdealState",
    "partition": 0,
    "segment": "events__0__4__20231114T2213Z",
    "new_segment": "events__0__5__20231114T2300Z",
    "instances": ["Server_a_8001", "Server_b_8002"],
    "data_loss": False,
}
LOSS = {
    "kind": "allReplicasOffline",
    "detail": "every replica of events__1__2__20231114T2213Z is OFFLINE; offsets 100-180 are gone",
    "partition": 1,
    "segment": "events__1__2__20231114T2213Z",
    "new_segment": "events__1__3__20231114T2300Z",
    "instances": ["Server_a_8001"],
    "data_loss": True,
}


def _history_rows(html: str) -> list[tuple[str, str, str, str]]:
    return re.findall(
        r'<tr data-run-id="([^"]+)" data-trigger="(\w+)" data-outcome="(\w+)" '
        r'data-actions="\d+" data-data-loss="(\w+)"',
        html,
    )


# --- the healing history ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_table_page_lists_the_newest_runs_with_what_was_repaired_and_why(viewer):
    mf.mirror_state()
    mf.table("events")
    mf.table("other")
    _run(
        "schedule-00000001",
        300,
        waiting=["partition 2: commit in flight; repaired after 12:08:10 UTC if still so"],
    )
    _run("mirror-00000002", 200, trigger="mirror", actions=[STEP1, LOSS])
    _run("api-0000000a", 100, trigger="api", error="consuming repairs: ZooKeeperError: lost")
    _run("schedule-0000000b", 50, table="other_REALTIME", actions=[STEP1])

    html = _text(viewer.get(f"/ui/tables/{TABLE}/"))

    assert _history_rows(html) == [
        ("api-0000000a", "api", "failed", "false"),
        ("mirror-00000002", "mirror", "repaired", "true"),
        ("schedule-00000001", "schedule", "waiting", "false"),
    ]
    repaired = re.search(r'<tr data-run-id="mirror-00000002".*?</tr>', html, re.S).group(0)
    assert "<b>commit stopped after step 1</b> · partition 0" in repaired
    assert "events__0__4__20231114T2213Z</span> → <span" in repaired
    assert "on Server_a_8001, Server_b_8002" in repaired
    assert STEP1["detail"] in repaired
    assert re.search(
        r'data-kind="allReplicasOffline" data-data-loss="true">.*?>data loss<', repaired
    )
    assert "mirror sync" in repaired
    failed = re.search(r'<tr data-run-id="api-0000000a".*?</tr>', html, re.S).group(0)
    assert 'class="problem"' in failed
    assert "Failed: consuming repairs: ZooKeeperError: lost" in failed
    assert ">operator<" in failed
    assert "commit in flight; repaired after 12:08:10 UTC if still so" in html
    assert "schedule-0000000b" not in html  # another table's run


@pytest.mark.django_db
def test_the_history_keeps_to_the_newest_ten_runs_at_a_fixed_query_cost(
    viewer, django_assert_max_num_queries
):
    mf.mirror_state()
    mf.table("events")
    _run("schedule-first", 10_000, actions=[STEP1])
    with django_assert_max_num_queries(15):
        viewer.get(f"/ui/tables/{TABLE}/")
    for n in range(15):
        _run(f"schedule-{n:08d}", 1000 - n, actions=[STEP1, LOSS])
    with django_assert_max_num_queries(15):
        html = _text(viewer.get(f"/ui/tables/{TABLE}/"))
    runs = [run_id for run_id, *_ in _history_rows(html)]
    assert runs == [f"schedule-{n:08d}" for n in range(14, 4, -1)]


@pytest.mark.django_db
def test_a_table_without_runs_says_so(viewer):
    mf.mirror_state()
    mf.table("events")
    html = _text(viewer.get(f"/ui/tables/{TABLE}/"))
    assert 'id="healing-history" data-live' in html
    assert "No healing run recorded yet" in html


# --- Run healer now -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_operators_get_the_run_healer_now_button(viewer, django_user_model):
    mf.mirror_state()
    mf.table("events")
    mf.table("batch", "OFFLINE")
    html = _text(viewer.get(f"/ui/tables/{TABLE}/"))
    assert "heal-button" not in html and "/heal/" not in html

    operator = Client()
    user = grant(django_user_model.objects.create_user("otto", password=PASSWORD), "operator")
    operator.force_login(user)
    html = _text(operator.get(f"/ui/tables/{TABLE}/"))
    form = re.search(
        r'<form method="post" action="([^"]+)" class="inline" id="heal-form">(.*?)</form>',
        html,
        re.S,
    )
    assert form is not None
    assert form.group(1) == f"/ui/tables/{TABLE}/heal/"
    assert 'name="csrfmiddlewaretoken"' in form.group(2)
    assert re.search(
        r'<button type="submit" id="heal-button"[^>]*>Run healer now</button>', form.group(2)
    )
    assert "heal-button" not in _text(operator.get("/ui/tables/batch_OFFLINE/"))


@pytest.mark.django_db
def test_run_healer_now_queues_a_run_audits_it_and_follows_it(
    operator, django_capture_on_commit_callbacks
):
    mf.mirror_state()
    mf.table("events")

    with django_capture_on_commit_callbacks(execute=False) as sends:
        resp = operator.post("/ui/tables/events/heal/")  # a raw name works too

    assert resp.status_code == 302
    location = resp["Location"]
    assert location.startswith(f"/ui/tables/{TABLE}/?healing_run=api-")
    run_id = RUN_ID.search(location).group(1)
    assert len(sends) == 1  # the Celery send, once the request's writes are committed
    (audit,) = AuditEntry.objects.all()
    assert (audit.action, audit.target, audit.result) == ("run_periodic_task", TABLE, "OK")
    assert (audit.username, audit.role, audit.status_code) == ("otto", "operator", 200)
    assert audit.detail == {
        "taskName": "RealtimeSegmentValidationManager",
        "taskId": run_id,
        "table": TABLE,
    }

    # Not recorded yet: the page says it is still running, since when, and polls the API.
    html = _text(operator.get(location))
    panel = re.search(r'<section id="healing-run".*?</section>', html, re.S).group(0)
    assert f'data-run-id="{run_id}" data-url="/api/v1/healing/runs/{run_id}"' in panel
    assert 'data-state="running"' in panel
    assert "still running for" in panel and "asked by otto" in panel
    assert re.search(r'data-requested-ms="\d{13}" data-now-ms="\d{13}"', panel)
    assert "/static/console/healing.js" in html

    # Recorded: the panel shows the result.
    _run(run_id, 0, trigger="api", actions=[STEP1], waiting=["partition 3: waiting"])
    html = _text(operator.get(location))
    panel = re.search(r'<section id="healing-run".*?</section>', html, re.S).group(0)
    assert 'data-state="done"' in panel
    assert "finished in 1 s" in panel
    assert "commit stopped after step 1" in panel and "partition 3: waiting" in panel
    assert _history_rows(html)[0][:3] == (run_id, "api", "repaired")


@pytest.mark.django_db
def test_a_failed_run_shows_its_error_and_a_bad_run_id_is_ignored(operator):
    mf.mirror_state()
    mf.table("events")
    _run("api-0badc0de", 5, trigger="api", error="ERROR replica reset: ZooKeeperError: gone")
    html = _text(operator.get(f"/ui/tables/{TABLE}/?healing_run=api-0badc0de"))
    panel = re.search(r'<section id="healing-run".*?</section>', html, re.S).group(0)
    assert 'data-state="error"' in panel
    assert "Failed: ERROR replica reset: ZooKeeperError: gone" in panel
    assert "healing.js" not in html  # nothing left to poll
    html = _text(operator.get(f"/ui/tables/{TABLE}/?healing_run=<script>"))
    assert 'id="healing-run"' not in html


@pytest.mark.django_db
def test_run_healer_now_is_refused_and_audited_for_viewers_and_offline_tables(
    viewer, django_capture_on_commit_callbacks
):
    mf.mirror_state()
    mf.table("events")
    mf.table("batch", "OFFLINE")
    with django_capture_on_commit_callbacks(execute=False) as sends:
        refused = viewer.post(f"/ui/tables/{TABLE}/heal/")
    assert refused.status_code == 403
    assert "role &#x27;viewer&#x27; may not run the healer" in _text(refused)
    assert not sends
    (audit,) = AuditEntry.objects.all()
    assert (audit.action, audit.result, audit.status_code) == ("run_periodic_task", "DENIED", 403)
    assert audit.target == TABLE

    assert viewer.get(f"/ui/tables/{TABLE}/heal/").status_code == 405
    assert viewer.post("/ui/tables/nope/heal/").status_code == 404
    assert AuditEntry.objects.count() == 1


@pytest.mark.django_db
def test_an_offline_table_is_400_and_anonymous_is_sent_to_login(
    operator, django_capture_on_commit_callbacks
):
    mf.mirror_state()
    mf.table("batch", "OFFLINE")
    with django_capture_on_commit_callbacks(execute=False) as sends:
        resp = operator.post("/ui/tables/batch_OFFLINE/heal/")
    assert resp.status_code == 400
    assert "repairs REALTIME tables only" in _text(resp)
    assert not sends
    (audit,) = AuditEntry.objects.all()
    assert (audit.result, audit.status_code) == ("REJECTED", 400)
    assert "REALTIME tables only" in audit.detail["error"]

    anonymous = Client().post("/ui/tables/batch_OFFLINE/heal/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert AuditEntry.objects.count() == 1


@pytest.mark.django_db
def test_the_heal_form_needs_the_csrf_token(django_user_model):
    mf.mirror_state()
    mf.table("events")
    user = grant(django_user_model.objects.create_user("otto", password=PASSWORD), "operator")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert browser.post(f"/ui/tables/{TABLE}/heal/").status_code == 403
    assert not AuditEntry.objects.exists()


# --- the errors page's Reset --------------------------------------------------------------------


def _error_segments():
    mf.mirror_state()
    events = mf.table("events")
    mf.segment(
        events,
        0,
        10,
        display_state="ERROR",
        has_error=True,
        external_states={"Server_a_8001": "ERROR", "Server_b_8002": "ONLINE"},
    )
    mf.segment(
        events,
        1,
        11,
        display_state="OFFLINE",
        all_offline=True,
        ideal_states={"Server_a_8001": "OFFLINE", "Server_b_8002": "OFFLINE"},
        external_states={"Server_a_8001": "OFFLINE"},
    )


@pytest.mark.django_db
def test_operators_get_a_reset_button_per_error_segment(operator):
    _error_segments()
    html = _text(operator.get("/ui/errors/"))
    error_row = re.search(r'<tr data-segment="events__0__10__20231114T2213Z".*?</tr>', html, re.S)
    button = re.search(
        r'<button type="button" class="small-button reset-button" data-reset-url="([^"]+)"',
        error_row.group(0),
    )
    assert button.group(1) == f"/segments/{TABLE}/events__0__10__20231114T2213Z/reset"
    offline_row = re.search(r'<tr data-segment="events__1__11__20231114T2213Z".*?</tr>', html, re.S)
    assert "reset-button" not in offline_row.group(0)
    assert f'href="/ui/tables/{TABLE}/#healing-title"' in offline_row.group(0)
    assert re.search(
        r'<form id="reset-csrf" hidden><input type="hidden" name="csrfmiddlewaretoken"', html
    )
    assert "/static/console/errors.js" in html
    assert '<th scope="col">Action</th>' in html


@pytest.mark.django_db
def test_viewers_get_no_reset(viewer):
    _error_segments()
    html = _text(viewer.get("/ui/errors/"))
    assert "reset-button" not in html and "reset-csrf" not in html and "errors.js" not in html
    assert len(re.findall(r"<tr data-segment=", html)) == 2


# --- the whole chain, with real workers ---------------------------------------------------------


@pytest.mark.celery
@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_run_healer_now_resets_an_error_segment_through_a_worker(
    worker_zk, topic, client, django_user_model
):
    init_cluster(worker_zk, PATHS)
    for index, server in enumerate(SERVERS):
        register_participant(
            worker_zk, PATHS, server, "127.0.0.1", 7001 + index, ["DefaultTenant_REALTIME"]
        )
    lead_every_partition(worker_zk)  # the worker heals on behalf of the table's lead controller
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    table = "githubEvents_REALTIME"
    ideal = manager.idealstate(table)
    segment = next(s for s in ideal if LLCSegmentName.parse(s).partition_group_id == 0)
    replicas = sorted(ideal[segment])
    view = ZNRecord(id=table, map_fields={segment: dict.fromkeys(replicas, "ERROR")})
    create_record(worker_zk, PATHS.externalview(table), view)
    mf.mirror_state()
    mf.table("githubEvents")
    client.force_login(
        grant(django_user_model.objects.create_user("otto", password=PASSWORD), "operator")
    )

    resp = client.post(f"/ui/tables/{table}/heal/")

    assert resp.status_code == 302
    run_id = RUN_ID.search(resp["Location"]).group(1)
    wait_until(
        lambda: client.get(f"/api/v1/healing/runs/{run_id}").status_code == 200,
        timeout=60,
        what=f"healing run {run_id} recorded",
    )
    (result,) = client.get(f"/api/v1/healing/runs/{run_id}").json()["results"]
    assert (result["table"], result["trigger"]) == (table, "api")
    (reset,) = [a for a in result["actions"] if a["kind"] == "errorReset"]
    assert (reset["segment"], reset["instances"]) == (segment, replicas)
    for server in replicas:
        found = [
            messages.read_message(worker_zk, PATHS, server, i)
            for i in messages.message_ids(worker_zk, PATHS, server)
        ]
        assert [m.simple_fields["PARTITION_NAME"] for m in found if m] == [segment]

    html = _text(client.get(resp["Location"]))
    panel = re.search(r'<section id="healing-run".*?</section>', html, re.S).group(0)
    assert 'data-state="done"' in panel
    assert "ERROR replicas reset" in panel and segment in panel


# --- the scripts, in Debian's Chromium ----------------------------------------------------------


def _browser_login(page, base_url: str, username: str) -> None:
    page.goto(base_url + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(base_url + "/")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_page_follows_the_run_until_its_result_lands(page, live_server, django_user_model):
    """The page an operator lands on after Run healer now (the POST itself is tested above;
    here no task is queued, so no worker of this session can record the run first)."""
    from playwright.sync_api import expect

    grant(django_user_model.objects.create_user("otto", password=PASSWORD), "operator")
    mf.mirror_state()
    mf.table("events")
    run_id = "api-1234abcd"
    asked = timezone.now() - dt.timedelta(seconds=75)
    mf.audit("otto", "run_periodic_task", TABLE, at=asked, detail={"taskId": run_id})
    _browser_login(page, live_server.url, "otto")

    page.goto(f"{live_server.url}/ui/tables/{TABLE}/?healing_run={run_id}")

    panel = page.locator("#healing-run")
    expect(panel).to_have_attribute("data-state", "running")
    expect(page.locator("#healing-run-status")).to_contain_text("still running for 1 min")
    expect(panel).to_have_attribute("data-elapsed-ms", re.compile(r"^\d{5,}$"))

    _run(run_id, 0, trigger="api", actions=[STEP1], waiting=["partition 3: waiting"])

    expect(page.locator("#healing-run")).to_have_attribute("data-state", "done", timeout=15_000)
    expect(page.locator("#healing-run")).to_contain_text("commit stopped after step 1")
    expect(page.locator("#healing-run")).to_contain_text("partition 3: waiting")
    expect(page.locator(f'#healing-runs tr[data-run-id="{run_id}"]')).to_be_visible()


@pytest.mark.browser
@pytest.mark.zk
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_reset_from_the_errors_page_answers_inline(
    page, live_server, servers, topic, zk, django_user_model
):
    from playwright.sync_api import expect

    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    table = "githubEvents_REALTIME"
    ideal = manager.idealstate(table)
    segment = next(s for s in ideal if LLCSegmentName.parse(s).partition_group_id == 0)
    replicas = sorted(ideal[segment])
    view = ZNRecord(id=table, map_fields={segment: dict.fromkeys(replicas, "ERROR")})
    create_record(zk, PATHS.externalview(table), view)
    mf.mirror_state()
    owner = mf.table("githubEvents")
    states = dict.fromkeys(replicas, "ERROR")
    mf.segment(
        owner, 0, 0, name=segment, display_state="ERROR", has_error=True, external_states=states
    )
    grant(django_user_model.objects.create_user("otto", password=PASSWORD), "operator")
    _browser_login(page, live_server.url, "otto")
    page.goto(f"{live_server.url}/ui/errors/")

    row = page.locator(f'#error-segments tr[data-segment="{segment}"]')
    button = row.locator(".reset-button")
    button.click()
    expect(button).to_have_text("Confirm reset?")
    assert not any(messages.message_ids(zk, PATHS, s) for s in SERVERS)  # armed, not sent
    button.click()

    answer = row.locator(".reset-answer")
    expect(answer).to_contain_text(f"reset sent to {', '.join(replicas)}")
    expect(row).to_have_attribute("data-reset-state", "sent")
    for server in replicas:
        assert len(messages.message_ids(zk, PATHS, server)) == 1
    audit = AuditEntry.objects.get()
    assert (audit.action, audit.result, audit.source) == ("reset_segment", "OK", "page")

    # A second reset finds the resets pending: nothing sent, and the row says why.
    row.locator(".reset-button").click()
    row.locator(".reset-button").click()
    expect(row.locator(".reset-answer")).to_contain_text("nothing sent")
