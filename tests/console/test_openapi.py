"""The OpenAPI schema (`/api/v1/schema/`) and its Swagger UI page: served to signed-in accounts,
covering /api/v1/ and Pinot's controller paths (completion protocol included), valid OpenAPI 3,
and a page whose assets all come from this site (drf-spectacular-sidecar, no CDN)."""

from __future__ import annotations

import io
import json
import re

import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

V1_PATHS = [
    "/api/v1/whoami",
    "/api/v1/mirror",
    "/api/v1/tables",
    "/api/v1/tables/{table}",
    "/api/v1/tables/{table}/partitions",
    "/api/v1/tables/{table}/partitions/{partition}",
    "/api/v1/tables/{table}/segments",
    "/api/v1/tables/{table}/segments/{segment}",
    "/api/v1/errors",
    "/api/v1/leaders",
    "/api/v1/instances",
    "/api/v1/audit",
    "/api/v1/bulk/pause",
    "/api/v1/bulk/resume",
]
PINOT_PATHS = [
    "/tables",
    "/tables/{table}",
    "/schemas",
    "/segments/{table}/{segment}/metadata",
    "/tables/{table}/consumingSegmentsInfo",
    "/tables/{table}/forceCommit",
    "/tables/forceCommitStatus/{job_id}",
    "/tables/{table}/pauseConsumption",
    "/tables/{table}/resumeConsumption",
    "/tables/{table}/pauseStatus",
    "/leader/tables",
    "/leader/tables/{table}",
    "/segmentConsumed",
    "/segmentStoppedConsuming",
    "/segmentCommitStart",
    "/segmentCommitEndWithMetadata",
    "/extendBuildTime",
    "/segments/reingested",
    # Issue 22: the operator surface (walked by tests/e2e/test_operator_api.py).
    "/health",
    "/version",
    "/instances",
    "/instances/{name}",
    "/instances/{name}/state",
    "/cluster/info",
    "/cluster/configs",
    "/tenants",
    "/tenants/{name}",
    "/tenants/{name}/tables",
    "/brokers/tenants/{name}",
    "/tables/{table}/size",
    "/tables/{table}/schema",
    "/tables/{table}/instances",
    "/tables/{table}/state",
    "/tables/{table}/segmentsStatus",
    "/segments/{table}/servers",
    "/segments/{table}/crc",
    "/debug/tables/{table}",
    "/zk/ls",
    "/zk/lsl",
    "/zk/get",
    "/zk/stat",
    "/zk/put",
    "/zk/delete",
    "/auth/info",
    "/auth/verify",
    "/schemas/info",
    "/periodictask/names",
    "/tasks/tasktypes",
    "/tasks/scheduler/information",
    "/logicalTables",
]


@pytest.fixture
def client(django_user_model) -> APIClient:
    client = APIClient()
    client.force_login(django_user_model.objects.create_user("reader", password="pw-reader-123"))
    return client


@pytest.fixture
def schema(client) -> dict:
    response = client.get("/api/v1/schema/?format=json")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi+json")
    return json.loads(response.content)


def test_schema_is_valid_openapi_3(schema):
    assert schema["openapi"].startswith("3.")
    validate_schema(schema)


def test_schema_covers_the_console_api_and_pinots_paths(schema):
    paths = schema["paths"]
    missing = [p for p in V1_PATHS + PINOT_PATHS if p not in paths]
    assert not missing
    assert not [p for p in paths if p.startswith("/api/v1/schema") or p.startswith("/api/v1/docs")]


def test_schema_describes_the_envelopes_and_parameters(schema):
    tables = schema["paths"]["/api/v1/tables"]["get"]
    params = {p["name"] for p in tables["parameters"]}
    assert {"page", "page_size", "q", "health", "paused", "tenant", "sort"} <= params
    listing = tables["responses"]["200"]["content"]["application/json"]["schema"]
    listing = schema["components"]["schemas"][listing["$ref"].rsplit("/", 1)[1]]
    assert {"lastSynced", "count", "page", "results"} <= set(listing["properties"])
    segments = schema["paths"]["/api/v1/tables/{table}/segments"]["get"]
    assert "state" in {p["name"] for p in segments["parameters"]}
    leader = schema["components"]["schemas"]["LeadControllerResponse"]["properties"]
    assert set(leader) == {"leadControllerResourceEnabled", "leadControllerEntryMap"}


def test_schema_describes_the_completion_protocol(schema):
    consumed = schema["paths"]["/segmentConsumed"]["get"]
    required = {p["name"] for p in consumed["parameters"] if p["required"]}
    assert required == {"instance", "name", "streamPartitionMsgOffset"}
    commit_end = schema["paths"]["/segmentCommitEndWithMetadata"]["post"]
    body = commit_end["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert set(body["properties"]) == {"metadata.properties", "creation.meta"}
    statuses = schema["components"]["schemas"]["SegmentCompletionResponse"]["properties"]
    assert {"COMMIT", "HOLD", "NOT_LEADER", "COMMIT_SUCCESS"} <= set(statuses["status"]["enum"])


def test_schema_describes_the_reingested_segment_upload(schema):
    upload = schema["paths"]["/segments/reingested"]["post"]
    params = {(p["in"], p["name"]): p for p in upload["parameters"]}
    assert set(params) == {
        ("query", "tableName"),
        ("header", "UPLOAD_TYPE"),
        ("header", "DOWNLOAD_URI"),
        ("header", "COPY_SEGMENT_TO_DEEP_STORE"),
    }
    assert all(p["required"] for p in params.values())
    assert params[("header", "UPLOAD_TYPE")]["schema"]["enum"] == ["METADATA"]
    assert upload["security"] == [{"clusterToken": []}]
    body = upload["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert set(body["properties"]) == {"metadata.properties", "creation.meta"}
    assert set(upload["responses"]) == {"200", "400", "401", "404", "409", "500"}
    done = upload["responses"]["200"]["content"]["application/json"]["schema"]
    assert set(done["properties"]) == {"status", "resetInstances"}
    refused = upload["responses"]["409"]["content"]["application/json"]["schema"]["$ref"]
    error = schema["components"]["schemas"][refused.rsplit("/", 1)[1]]
    assert set(error["properties"]) == {"code", "error"}


def test_schema_as_yaml_and_auth(client):
    response = client.get("/api/v1/schema/")
    assert response.status_code == 200
    assert "/api/v1/tables" in yaml.safe_load(response.content)["paths"]
    assert APIClient().get("/api/v1/schema/").status_code == 401


def test_the_offline_generator_validates():
    out = io.StringIO()
    call_command(
        "spectacular",
        "--generator-class",
        "console.api.schema.PinotSchemaGenerator",
        "--validate",
        "--format",
        "openapi-json",
        "--skip-checks",
        stdout=out,
    )
    assert "/segmentConsumed" in json.loads(out.getvalue())["paths"]


def test_swagger_page_uses_only_local_assets(client):
    response = client.get("/api/v1/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "swagger-ui" in html
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls
    assert all(u.startswith("/static/") for u in urls), urls
    assert not re.search(r"https?://", html)
    assert '"validatorUrl": null' in html
    assert '"/api/v1/schema/"' in html
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        asset.close()


def test_swagger_page_sends_anonymous_browsers_to_login():
    response = APIClient().get("/api/v1/docs/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]
