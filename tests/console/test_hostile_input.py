"""Hostile input to Pinot's paths: malformed names and bodies get a 4xx with the rule they break, in
Pinot's error JSON, and change nothing, neither in ZooKeeper nor in the deep store (issue 13).

Real ZooKeeper (a chroot of the test's own, with a cluster, three servers and the githubEvents
schema and table) and a deep store in the test's folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from rest_framework.test import APIClient

from tables.domain.names import MAX_RAW_TABLE_NAME_LENGTH, MAX_SCHEMA_NAME_LENGTH
from tables.models import AuditEntry
from tests.cluster_fixtures import load
from tests.console.test_pinot_api import create_github, github_table, snapshot

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

CHARSET_RULE = "only ASCII letters, digits, '_' and '-' are allowed"
# name -> the words of the rule it breaks, as the error names it
BAD_NAMES = {
    "a" * 300: "300 characters long; at most",
    "a%2Fb": "the character '%'",
    "tést": "the non-ASCII character 'é'",
    "..": "the character '.'",
    "a/b": "the character '/'",
    "../etc": "the character '.'",
    "a\x00b": "the control character '\\x00'",
    "a\nb": "whitespace '\\n'",
    "a b": "whitespace ' '",
    "my.table": "the character '.'",
    "-x": "must start with an ASCII letter or digit",
    "_staging": "must start with an ASCII letter or digit",
}
# Names a URL path segment can carry to the view (a '/' ends the segment; an empty one is no path).
PATH_NAMES = {name: rule for name, rule in BAD_NAMES.items() if "/" not in name}
PATH_NAMES.update({" ": "whitespace ' '", "\t": "whitespace '\\t'"})


@pytest.fixture
def api(admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


@pytest.fixture
def deep_store(settings, tmp_path) -> Path:
    root = tmp_path / "deepstore"
    (root / "githubEvents").mkdir(parents=True)
    (root / "githubEvents" / "githubEvents__0__0__20260101T0000Z.tar.gz").write_bytes(b"tar")
    settings.DEEP_STORE_URI = root.as_uri()
    return root


@pytest.fixture
def github(api, servers, topic, deep_store) -> None:
    assert create_github(api, topic).status_code == 200


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def state(zk, root: Path) -> tuple[dict, dict]:
    """Everything a request could change: every znode of the chroot and every deep-store file."""
    return snapshot(zk), files(root)


def path_of(name: str) -> str:
    """`name` as one URL path segment (percent-encoded: the view gets `name` back)."""
    return quote(name, safe="")


def assert_refused(response, status: int, *words: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == status
    for word in words:
        assert word in body["error"], body["error"]
    return body


# --- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BAD_NAMES), ids=repr)
def test_a_bad_schema_name_in_a_body_is_refused(api, github, zk, deep_store, name):
    before = state(zk, deep_store)
    schema = dict(load("githubEvents_schema.json"), schemaName=name)
    resp = api.post("/schemas", schema, format="json")
    assert_refused(resp, 400, "schema name", BAD_NAMES[name])
    assert state(zk, deep_store) == before


@pytest.mark.parametrize("name", list(BAD_NAMES), ids=repr)
def test_a_bad_table_name_in_a_body_is_refused(api, github, topic, zk, deep_store, name):
    before = state(zk, deep_store)
    resp = api.post("/tables", dict(github_table(topic), tableName=name), format="json")
    assert_refused(resp, 400, "table name", BAD_NAMES[name])
    assert state(zk, deep_store) == before


@pytest.mark.parametrize("name", ["", " ", "\t", None, 7, ["a"]], ids=repr)
def test_a_missing_or_blank_name_in_a_body_is_refused(api, github, topic, zk, deep_store, name):
    before = state(zk, deep_store)
    schema = dict(load("githubEvents_schema.json"), schemaName=name)
    assert_refused(api.post("/schemas", schema, format="json"), 400, "schemaName is required")
    config = dict(github_table(topic), tableName=name)
    assert_refused(api.post("/tables", config, format="json"), 400, "tableName is required")
    assert state(zk, deep_store) == before


def test_a_bad_schema_name_in_a_table_config_is_refused(api, github, topic, zk, deep_store):
    before = state(zk, deep_store)
    config = github_table(topic)
    config["tableName"] = "other"
    config["segmentsConfig"]["schemaName"] = "../githubEvents"
    resp = api.post("/tables", config, format="json")
    assert_refused(resp, 400, "segmentsConfig.schemaName: schema name '../githubEvents'")
    assert state(zk, deep_store) == before


@pytest.mark.parametrize("name", list(PATH_NAMES), ids=repr)
@pytest.mark.parametrize("method", ["get", "delete"])
def test_a_bad_schema_name_in_the_path_is_refused(api, github, zk, deep_store, method, name):
    before = state(zk, deep_store)
    resp = getattr(api, method)(f"/schemas/{path_of(name)}")
    assert_refused(resp, 400, "schema name", PATH_NAMES[name])
    assert state(zk, deep_store) == before


@pytest.mark.parametrize("name", list(PATH_NAMES), ids=repr)
def test_a_bad_table_name_in_the_path_is_refused(api, github, topic, zk, deep_store, name):
    before = state(zk, deep_store)
    table = path_of(name)
    calls = [
        ("get", f"/tables/{table}", None),
        ("put", f"/tables/{table}", github_table(topic)),
        ("delete", f"/tables/{table}", None),
        ("get", f"/tables/{table}/idealstate", None),
        ("get", f"/tables/{table}/externalview", None),
        ("get", f"/segments/{table}", None),
        ("get", f"/segments/{table}/githubEvents__0__0__20260101T0000Z", None),
        ("get", f"/tables/{table}/pauseStatus", None),
        ("post", f"/tables/{table}/pauseConsumption?comment=x", None),
        ("post", f"/tables/{table}/resumeConsumption?comment=x", None),
        ("post", f"/tables/{table}/forceCommit", None),
        ("get", f"/tables/{table}/consumingSegmentsInfo", None),
        ("get", f"/leader/tables/{table}", None),
        ("get", f"/api/v1/tables/{table}", None),
        ("get", f"/api/v1/tables/{table}/segments", None),
    ]
    for method, url, body in calls:
        resp = getattr(api, method)(url, body, format="json")
        assert_refused(resp, 400, "table name", PATH_NAMES[name])
    assert state(zk, deep_store) == before


@pytest.mark.parametrize("segment", ["..", ".", "a\x00b", "s%2F..", "x" * 200, "tést"], ids=repr)
def test_a_bad_segment_name_is_refused(api, github, zk, deep_store, segment):
    before = state(zk, deep_store)
    for url in (
        f"/segments/githubEvents/{path_of(segment)}",
        f"/segments/githubEvents/{path_of(segment)}/metadata",
        f"/api/v1/tables/githubEvents/segments/{path_of(segment)}",
    ):
        assert_refused(api.get(url), 400, "segment name")
    assert state(zk, deep_store) == before


def test_a_slash_in_a_path_name_finds_no_resource(api, github, zk, deep_store):
    """`a%2Fb` decodes to `a/b`: two path segments, which no view takes (404, nothing read)."""
    before = state(zk, deep_store)
    for url in ("/schemas/a%2Fb", "/tables/a%2Fb", "/tables/..%2F..%2Fx/idealstate"):
        assert api.get(url).status_code == 404
        assert api.delete(url).status_code == 404
    assert state(zk, deep_store) == before


def test_the_longest_names_are_accepted(api, servers, topic, zk, deep_store):
    schema_name = "s" * MAX_SCHEMA_NAME_LENGTH
    schema = dict(load("githubEvents_schema.json"), schemaName=schema_name)
    assert api.post("/schemas", schema, format="json").status_code == 200
    config = github_table(topic)
    config["tableName"] = "t" * MAX_RAW_TABLE_NAME_LENGTH
    config["segmentsConfig"]["schemaName"] = schema_name
    assert api.post("/tables", config, format="json").status_code == 200, "the longest table"
    config["tableName"] = "t" * (MAX_RAW_TABLE_NAME_LENGTH + 1)
    assert_refused(api.post("/tables", config, format="json"), 400, "at most 137")
    schema["schemaName"] = "s" * (MAX_SCHEMA_NAME_LENGTH + 1)
    assert_refused(api.post("/schemas", schema, format="json"), 400, "at most 137")


def test_a_refused_name_is_audited_escaped(api, github):
    api.delete(f"/schemas/{path_of('a' + chr(0) + 'b')}")
    entry = AuditEntry.objects.filter(action="delete_schema").latest("at")
    assert entry.result == AuditEntry.Result.REJECTED
    assert entry.target == "a\\x00b"


# --- bodies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
@pytest.mark.parametrize("url", ["/schemas", "/tables"])
def test_a_body_that_is_not_json_is_a_415(api, github, zk, deep_store, url, content_type):
    before = state(zk, deep_store)
    resp = api.post(url, data="schemaName=x&tableName=x", content_type=content_type)
    assert_refused(resp, 415, f'Unsupported media type "{content_type}"')
    assert state(zk, deep_store) == before


def test_a_body_over_the_limit_is_a_413(api, github, topic, zk, deep_store, settings):
    settings.MAX_REQUEST_BODY_BYTES = 4096
    before = state(zk, deep_store)
    schema = load("githubEvents_schema.json")
    schema["description"] = "x" * 5000
    for method, url, body in (
        ("post", "/schemas", schema),
        ("post", "/tables", dict(github_table(topic), padding="x" * 5000)),
        ("put", "/tables/githubEvents", dict(github_table(topic), padding="x" * 5000)),
    ):
        resp = getattr(api, method)(url, json.dumps(body), content_type="application/json")
        assert_refused(resp, 413, "over the limit of 4096 bytes", "MAX_REQUEST_BODY_BYTES")
    assert state(zk, deep_store) == before


def test_the_default_body_limit_is_a_413_with_the_reason(api, github, zk, deep_store, settings):
    before = state(zk, deep_store)
    limit = settings.MAX_REQUEST_BODY_BYTES
    schema = dict(load("githubEvents_schema.json"), description="x" * limit)
    resp = api.post("/schemas", json.dumps(schema), content_type="application/json")
    assert_refused(resp, 413, f"over the limit of {limit} bytes")
    assert state(zk, deep_store) == before


@pytest.mark.parametrize("depth", [65, 10_000, 200_000])
def test_json_nested_too_deep_is_a_400(api, github, zk, deep_store, depth):
    before = state(zk, deep_store)
    body = '{"schemaName": "deep", "x": ' + "[" * depth + "]" * depth + "}"
    resp = api.post("/schemas", body, content_type="application/json")
    assert_refused(resp, 400, "nested more than 64 levels deep", "MAX_JSON_DEPTH")
    assert state(zk, deep_store) == before


def test_nesting_within_the_limit_and_brackets_in_strings_pass(api, github, zk):
    schema = dict(load("githubEvents_schema.json"), schemaName="nested")
    schema["x"] = json.loads("[" * 60 + "]" * 60)
    schema["description"] = '[[[[{{{{ "\\" ' * 100
    assert api.post("/schemas", schema, format="json").status_code == 200


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"schemaName": NaN}', "NaN is not valid JSON"),
        (b'{"schemaName": "\xff\xfe"}', "not utf-8 text"),
        (b"[1, 2", "JSON parse error"),
    ],
)
def test_bodies_that_are_not_json_are_a_400(api, github, zk, deep_store, body, words):
    before = state(zk, deep_store)
    resp = api.post("/schemas", body, content_type="application/json")
    assert_refused(resp, 400, words)
    assert state(zk, deep_store) == before
