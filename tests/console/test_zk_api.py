"""Pinot's ZooKeeper endpoints (`/zk/ls|lsl|stat|get|put|delete`, `console.api.zk`) against the
real ZooKeeper (an initialised cluster in the test's chroot).

Covered: Pinot's shapes (child names, child stats, ZooKeeper's stat fields, the data decoded, gzip
undone, the version of the data read in `X-ZK-Version`); viewers read, anonymous callers get 401;
a viewer's write is 403, audited DENIED, nothing written; an admin's put and delete are
compare-and-set (a stale version is 409 and changes nothing, a fresh one writes), audited with the
reason and a diff; bad paths and data are 400, missing znodes 404, each changing nothing; writes
stay inside the cluster's tree; the console's calls need the CSRF token and a reason; the OpenAPI
schema lists the paths.
"""

from __future__ import annotations

import gzip
import json
from urllib.parse import urlencode

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tables.domain.znrecord import ZNRecord
from tables.models import AuditEntry
from tables.zk.browse import STAT_FIELDS
from tables.zk.records import create_record, read_record
from tests.accounts import grant
from tests.cluster_fixtures import PATHS

pytestmark = [pytest.mark.zk, pytest.mark.django_db]

PASSWORD = "a-long-test-password"
NODE = f"{PATHS.root}/PROPERTYSTORE/zkBrowserTest"


def _client(django_user_model, name: str, role: str | None) -> APIClient:
    user = django_user_model.objects.create_user(name, password=PASSWORD)
    if role:
        grant(user, role)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def admin(django_user_model) -> APIClient:
    return _client(django_user_model, "root", "admin")


@pytest.fixture
def viewer(django_user_model) -> APIClient:
    return _client(django_user_model, "oncall", "viewer")


@pytest.fixture
def node(cluster) -> str:
    """A ZNRecord at version 1 (created, then changed once)."""
    create_record(cluster, NODE, ZNRecord("zkBrowserTest", simple_fields={"k": "v0"}))
    cluster.set(NODE, ZNRecord("zkBrowserTest", simple_fields={"k": "v1"}).to_json().encode())
    return NODE


def _record(zk, path: str = NODE) -> tuple[dict, int]:
    found = read_record(zk, path)
    return found.record.to_dict(), found.version


def _put(client, path: str, record: dict | None, version: int | None, **extra) -> object:
    query = {"path": path, **extra}
    if record is not None:
        query["data"] = json.dumps(record)
    if version is not None:
        query["expectedVersion"] = version
    return client.put("/zk/put?" + _qs(query))


def _qs(query: dict) -> str:
    return urlencode(query)


def _new(value: str) -> dict:
    return ZNRecord("zkBrowserTest", simple_fields={"k": value}).to_dict()


# --- reads ---------------------------------------------------------------------------------------
def test_ls_lsl_and_stat_have_pinots_shapes(viewer, node, zk):
    assert PATHS.cluster in viewer.get("/zk/ls?path=/").json()
    children = viewer.get(f"/zk/ls?path={PATHS.root}").json()
    assert {"IDEALSTATES", "EXTERNALVIEW", "CONFIGS", "PROPERTYSTORE"} <= set(children)
    assert children == sorted(zk.get_children(PATHS.root))

    listed = viewer.get(f"/zk/lsl?path={PATHS.root}/PROPERTYSTORE").json()
    assert set(listed["zkBrowserTest"]) == set(STAT_FIELDS)
    assert listed["zkBrowserTest"]["version"] == 1

    stat = viewer.get(f"/zk/stat?path={node}").json()
    real = zk.exists(node)
    assert stat == {name: getattr(real, name) for name in STAT_FIELDS}
    assert (stat["version"], stat["numChildren"], stat["ephemeralOwner"]) == (1, 0, 0)


def test_get_answers_the_record_and_its_version(viewer, node, cluster):
    response = viewer.get(f"/zk/get?path={node}")
    assert response.status_code == 200
    assert response.json() == _new("v1")
    assert response["X-ZK-Version"] == "1"

    big = ZNRecord("big", simple_fields={"enableCompression": "true", "x": "y" * 5000})
    create_record(cluster, f"{PATHS.root}/PROPERTYSTORE/big", big)
    assert cluster.get(f"{PATHS.root}/PROPERTYSTORE/big")[0][:2] == b"\x1f\x8b"  # stored gzipped
    assert viewer.get(f"/zk/get?path={PATHS.root}/PROPERTYSTORE/big").json() == big.to_dict()

    cluster.create(f"{PATHS.root}/PROPERTYSTORE/text", b"plain words")
    assert viewer.get(f"/zk/get?path={PATHS.root}/PROPERTYSTORE/text").json() == "plain words"
    empty = viewer.get(f"/zk/get?path={PATHS.root}/PROPERTYSTORE")
    assert (empty.status_code, empty["X-ZK-Version"]) == (204, "0")


def test_anonymous_callers_get_401(cluster):
    response = APIClient().get("/zk/ls?path=/")
    assert response.status_code == 401
    assert response.json()["code"] == 401


@pytest.mark.parametrize(
    "path",
    [None, "", "relative", "/a/", "//a", "/a//b", "/a/../b", "/a/./b", "/..", "/a\x00b", "/a\x07"],
)
def test_bad_paths_are_400_with_the_reason(viewer, cluster, path):
    query = "" if path is None else "?" + _qs({"path": path})
    for endpoint in ("ls", "lsl", "stat", "get"):
        response = viewer.get(f"/zk/{endpoint}{query}")
        assert response.status_code == 400, (endpoint, path)
        assert "ZKPath" in response.json()["error"]


def test_missing_znodes_are_404(viewer, admin, cluster):
    missing = f"{PATHS.root}/PROPERTYSTORE/nothing"
    for endpoint in ("ls", "lsl", "stat", "get"):
        response = viewer.get(f"/zk/{endpoint}?path={missing}")
        assert response.status_code == 404
        assert response.json() == {"code": 404, "error": f"ZKPath {missing} does not exist"}
    assert admin.delete(f"/zk/delete?path={missing}&expectedVersion=0").status_code == 404
    deep = f"{PATHS.root}/PROPERTYSTORE/no/parent"
    assert _put(admin, deep, _new("x"), -1).status_code == 404
    assert zk_absent(cluster, f"{PATHS.root}/PROPERTYSTORE/no")


def zk_absent(zk, path: str) -> bool:
    return zk.exists(path) is None


# --- writes --------------------------------------------------------------------------------------
def test_a_viewer_may_not_write(viewer, node, zk):
    response = _put(viewer, node, _new("viewer"), 1, comment="try")
    assert response.status_code == 403
    assert "admin" in response.json()["error"]
    assert viewer.delete(f"/zk/delete?path={node}&expectedVersion=1").status_code == 403
    assert _record(zk) == (_new("v1"), 1)
    denied = AuditEntry.objects.filter(result="DENIED").order_by("id")
    assert [(e.action, e.target, e.username) for e in denied] == [
        ("zk_put", node, "oncall"),
        ("zk_delete", node, "oncall"),
    ]


def test_an_admins_put_is_compare_and_set_and_audited(admin, node, zk):
    stale = _put(admin, node, _new("stale"), 0, comment="late edit")
    assert stale.status_code == 409
    assert "is at version 1, not the expected version 0" in stale.json()["error"]
    assert _record(zk) == (_new("v1"), 1)

    fresh = _put(admin, node, _new("v2"), 1, comment="fix the record")
    assert fresh.status_code == 200
    assert fresh.json() == {"status": f"Successfully updated path: {node}", "version": 2}
    assert _record(zk) == (_new("v2"), 2)

    entries = AuditEntry.objects.filter(action="zk_put").order_by("id")
    assert [(e.result, e.status_code, e.reason, e.target) for e in entries] == [
        ("REJECTED", 409, "late edit", node),
        ("OK", 200, "fix the record", node),
    ]
    ok = entries[1].detail
    assert (ok["expectedVersion"], ok["version"]) == (1, 2)
    assert any(line.startswith("-") and "v1" in line for line in ok["diff"])
    assert any(line.startswith("+") and "v2" in line for line in ok["diff"])


def test_put_needs_the_version_to_change_a_znode(admin, node, zk):
    response = _put(admin, node, _new("blind"), None)
    assert response.status_code == 400
    assert "expectedVersion is required" in response.json()["error"]
    assert _record(zk) == (_new("v1"), 1)


def test_put_takes_the_record_from_the_body_and_the_reason_from_x_reason(admin, node, zk):
    response = admin.put(
        f"/zk/put?path={node}&expectedVersion=1",
        data=json.dumps(_new("body")),
        content_type="application/json",
        headers={"X-Reason": "from a script"},
    )
    assert response.status_code == 200
    assert _record(zk) == (_new("body"), 2)
    assert AuditEntry.objects.get(action="zk_put").reason == "from a script"


def test_put_creates_a_missing_znode_under_an_existing_parent(admin, cluster):
    path = f"{PATHS.root}/PROPERTYSTORE/fresh"
    response = _put(admin, path, _new("new"), -1)
    assert response.json() == {"status": f"Successfully created path: {path}", "version": 0}
    assert _record(cluster, path) == (_new("new"), 0)
    assert _put(admin, path, _new("again"), -1).status_code == 400  # exists: needs the version
    ephemeral = _put(admin, f"{PATHS.root}/PROPERTYSTORE/eph", _new("e"), -1, accessOption=2)
    assert ephemeral.status_code == 400
    assert zk_absent(cluster, f"{PATHS.root}/PROPERTYSTORE/eph")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("", "Must provide data"),
        ("not json", "not JSON"),
        ("[1, 2]", "string 'id'"),
        ('{"id": "x", "extra": {}}', "unknown ZNRecord members: extra"),
        ('{"id": "x", "mapFields": {"a": "b"}}', "mapFields.a must be an object"),
    ],
)
def test_bad_data_is_400_and_writes_nothing(admin, node, zk, data, message):
    response = admin.put("/zk/put?" + _qs({"path": node, "data": data, "expectedVersion": 1}))
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert _record(zk) == (_new("v1"), 1)
    assert AuditEntry.objects.get(action="zk_put").result == "REJECTED"


@pytest.mark.parametrize(
    "query",
    [
        {"expectedVersion": "one"},
        {"expectedVersion": "99999999999"},
        {"expectedVersion": "-5"},
        {"expectedVersion": "1", "accessOption": "0"},
        {"expectedVersion": "1", "accessOption": "x"},
    ],
)
def test_bad_numbers_are_400(admin, node, zk, query):
    response = admin.put("/zk/put?" + _qs({"path": node, "data": json.dumps(_new("n")), **query}))
    assert response.status_code == 400
    assert _record(zk) == (_new("v1"), 1)


@pytest.mark.parametrize(
    "path", ["/", "/zookeeper/quota", PATHS.root, "/OtherCluster/CONFIGS/x", "/PinotClusterX/a"]
)
def test_writes_stay_inside_the_clusters_tree(admin, cluster, path):
    response = _put(admin, path, _new("out"), 0)
    assert response.status_code == 400
    assert "outside the cluster" in response.json()["error"]
    assert admin.delete("/zk/delete?" + _qs({"path": path})).status_code == 400
    assert cluster.exists(PATHS.root) is not None


def test_delete_is_compare_and_set_and_never_recursive(admin, node, zk):
    stale = admin.delete(f"/zk/delete?path={node}&expectedVersion=0&comment=cleanup")
    assert stale.status_code == 409
    assert zk.exists(node).version == 1

    parent = f"{PATHS.root}/PROPERTYSTORE"
    busy = admin.delete(f"/zk/delete?path={parent}&expectedVersion=0")
    assert busy.status_code == 409
    assert "has children" in busy.json()["error"]
    assert zk.exists(parent) is not None

    done = admin.delete(f"/zk/delete?path={node}&expectedVersion=1&comment=cleanup")
    assert done.json() == {"status": f"Successfully deleted path: {node}"}
    assert zk.exists(node) is None
    entries = AuditEntry.objects.filter(action="zk_delete").order_by("id")
    assert [(e.result, e.status_code) for e in entries] == [
        ("REJECTED", 409),
        ("REJECTED", 409),
        ("OK", 200),
    ]
    assert entries[2].reason == "cleanup"
    assert entries[2].detail["deletedVersion"] == 1


# --- the console's calls -------------------------------------------------------------------------
def test_a_session_needs_the_csrf_token_and_the_page_a_reason(django_user_model, node, zk):
    grant(django_user_model.objects.create_user("root", password=PASSWORD), "admin")
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="root", password=PASSWORD)
    url = "/zk/put?" + _qs({"path": node, "data": json.dumps(_new("page")), "expectedVersion": 1})
    assert browser.put(url).status_code == 403  # no CSRF token
    token = browser.get("/ui/zk/").cookies["csrftoken"].value
    headers = {"X-CSRFToken": token, "X-Console-Page": "1"}
    no_reason = browser.put(url, headers=headers)
    assert no_reason.status_code == 400
    assert "reason is required" in no_reason.json()["error"]
    assert _record(zk) == (_new("v1"), 1)
    ok = browser.put(url, headers={**headers, "X-Reason": "from the page"})
    assert ok.status_code == 200
    entry = AuditEntry.objects.get(action="zk_put", result="OK")
    assert (entry.source, entry.reason) == ("page", "from the page")


def test_the_openapi_schema_lists_the_zk_paths(viewer):
    paths = json.loads(viewer.get("/api/v1/schema/?format=json").content)["paths"]
    for name in ("ls", "lsl", "stat", "get"):
        assert "get" in paths[f"/zk/{name}"]
    assert "put" in paths["/zk/put"]
    assert "delete" in paths["/zk/delete"]


def test_gzip_bytes_that_are_corrupt_do_not_break_get(viewer, cluster):
    path = f"{PATHS.root}/PROPERTYSTORE/corrupt"
    cluster.create(path, gzip.compress(b'{"id": "c"}')[:12])
    response = viewer.get(f"/zk/get?path={path}")
    assert response.status_code == 200
    assert "could not be unpacked" in response.json()
