"""A table config whose ingestion transforms the segment build cannot run is refused at the door
(create and update), with a 400 naming the column and the function, and ZooKeeper unchanged."""

from __future__ import annotations

import copy

import pytest
from rest_framework.test import APIClient

from tables.domain.schema import parse_schema, schema_to_znrecord
from tables.zk import codec
from tests.cluster_fixtures import PATHS, load
from tests.console.test_pinot_api import github_table, snapshot

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

GROOVY = "Groovy({type + id}, type, id)"
UNKNOWN = "stDistance(stPoint(lon, lat), p)"


@pytest.fixture
def api(admin_user):
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def _with_transform(rest: dict, column: str, function: str) -> dict:
    rest = copy.deepcopy(rest)
    rest["ingestionConfig"]["transformConfigs"] = [
        {"columnName": column, "transformFunction": function}
    ]
    return rest


@pytest.mark.parametrize(
    ("column", "function", "reasons"),
    [
        ("type", UNKNOWN, ["'type'", "stDistance", "not supported"]),
        ("type", GROOVY, ["'type'", "Groovy", "controller.disable.ingestion.groovy"]),
        ("type", "lower(upper(id), 'x')", ["'type'", "lower", "takes 1 argument"]),
        ("nope", "lower(id)", ["'nope'", "not a column of the schema"]),
    ],
)
def test_a_transform_the_build_cannot_run_is_refused_on_create(
    api, servers, topic, zk, column, function, reasons
):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    before = snapshot(zk)
    resp = api.post(
        "/tables", _with_transform(github_table(topic), column, function), format="json"
    )
    assert resp.status_code == 400, resp.content
    for reason in reasons:
        assert reason in resp.json()["error"]
    assert snapshot(zk) == before


def test_the_same_check_runs_on_update(api, servers, topic, zk):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    nested = "upper(concat(type, jsonPathString(payload, '$.action', 'none'), '/'))"
    resp = api.post("/tables", _with_transform(github_table(topic), "type", nested), format="json")
    assert resp.status_code == 200, resp.content
    before = snapshot(zk)
    for function in (UNKNOWN, GROOVY):
        bad = _with_transform(github_table(topic), "type", function)
        resp = api.put("/tables/githubEvents", bad, format="json")
        assert resp.status_code == 400, resp.content
        assert "'type'" in resp.json()["error"]
        assert snapshot(zk) == before
    stored = api.get("/tables/githubEvents").json()["REALTIME"]["ingestionConfig"]
    assert stored["transformConfigs"][0]["transformFunction"] == nested


@pytest.mark.parametrize(
    ("ingestion", "reasons"),
    [
        (
            {"filterConfig": {"filterFunction": "Groovy({id > 1}, id)"}},
            ["filterConfig", "Groovy", "controller.disable.ingestion.groovy"],
        ),
        (
            {"filterConfig": {"filterFunction": "strcmp(type, 'x')"}},
            ["filterConfig", "strcmp", "not supported"],
        ),
        (
            {"complexTypeConfig": {"prefixesToRename": {"payload.": ""}}},
            ["complexTypeConfig.prefixesToRename", "not supported"],
        ),
    ],
)
def test_a_filter_or_complex_type_config_the_build_cannot_run_is_refused(
    api, servers, topic, zk, ingestion, reasons
):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    before = snapshot(zk)
    table = github_table(topic)
    table["ingestionConfig"].update(ingestion)
    resp = api.post("/tables", table, format="json")
    assert resp.status_code == 400, resp.content
    for reason in reasons:
        assert reason in resp.json()["error"]
    assert snapshot(zk) == before


def test_a_runnable_filter_and_flattening_are_stored_as_written(api, servers, topic, zk):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    table = github_table(topic)
    ingestion = {
        "filterConfig": {"filterFunction": "and(equals(type, 'PushEvent'), not(isNull(id)))"},
        "complexTypeConfig": {"delimiter": ".", "collectionNotUnnestedToJson": "NON_PRIMITIVE"},
    }
    table["ingestionConfig"].update(ingestion)
    resp = api.post("/tables", table, format="json")
    assert resp.status_code == 200, resp.content
    stored = api.get("/tables/githubEvents").json()["REALTIME"]["ingestionConfig"]
    assert {k: stored[k] for k in ingestion} == ingestion
    bad = copy.deepcopy(table)
    bad["ingestionConfig"]["filterConfig"] = {"filterFunction": "lower(type)"}
    before = snapshot(zk)
    resp = api.put("/tables/githubEvents", bad, format="json")
    assert resp.status_code == 400, resp.content
    assert "filterConfig" in resp.json()["error"] and "lower" in resp.json()["error"]
    assert snapshot(zk) == before


def _with_field_transform(schema: dict, column: str, function: str) -> dict:
    schema = copy.deepcopy(schema)
    for spec in schema["dimensionFieldSpecs"]:
        if spec["name"] == column:
            spec["transformFunction"] = function
    return schema


def test_a_schema_transform_function_the_build_cannot_run_is_refused_on_create_and_update(
    api, servers, zk
):
    """A field spec's own transformFunction (Pinot's older form): meetupRsvp's geospatial one
    is stored as written; one the build cannot run is refused naming the field and function."""
    meetup = load("meetupRsvp_schema.json")
    assert api.post("/schemas", meetup, format="json").status_code == 200
    stored = api.get("/schemas/meetupRsvp").json()
    assert stored == meetup
    before = snapshot(zk)
    for function, named in ((UNKNOWN, "stDistance"), (GROOVY, "Groovy")):
        update = _with_field_transform(meetup, "location", function)
        created = {**update, "schemaName": "meetupRsvpCopy"}
        for bad in (update, created):
            resp = api.post("/schemas", bad, format="json")
            assert resp.status_code == 400, resp.content
            error = resp.json()["error"]
            assert "field 'location'" in error and named in error, error
            assert snapshot(zk) == before


def test_a_table_is_refused_when_its_stored_schema_has_a_function_the_build_cannot_run(
    api, servers, topic, zk
):
    """A schema written before (or by another controller) is read as it is; the table write
    checks its transform functions, except for a column the table's transformConfigs set."""
    schema = _with_field_transform(load("githubEvents_schema.json"), "type", UNKNOWN)
    record = schema_to_znrecord(parse_schema(schema))
    zk.create(PATHS.schema("githubEvents"), codec.encode(record), makepath=True)
    before = snapshot(zk)
    resp = api.post("/tables", github_table(topic), format="json")
    assert resp.status_code == 400, resp.content
    assert "field 'type'" in resp.json()["error"] and "stDistance" in resp.json()["error"]
    assert snapshot(zk) == before
    table = github_table(topic)
    table["ingestionConfig"]["transformConfigs"].append(
        {"columnName": "type", "transformFunction": "lower(id)"}
    )
    resp = api.post("/tables", table, format="json")
    assert resp.status_code == 200, resp.content
