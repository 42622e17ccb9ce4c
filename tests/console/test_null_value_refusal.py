"""POST /schemas refuses a `defaultNullValue` that does not convert to its column's type (Pinot:
`FieldSpec.DataType.convert` throws "Cannot convert value", so the schema is not accepted)."""

from __future__ import annotations

import copy

import pytest
from rest_framework.test import APIClient

from tests.cluster_fixtures import load
from tests.console.test_pinot_api import snapshot

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]


@pytest.fixture
def api(admin_user):
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def with_column(default: object) -> dict:
    schema = copy.deepcopy(load("githubEvents_schema.json"))
    schema["dimensionFieldSpecs"].append(
        {"name": "stars", "dataType": "INT", "defaultNullValue": default}
    )
    return schema


def test_a_default_null_value_that_does_not_convert_is_refused_naming_the_column(api, servers, zk):
    before = snapshot(zk)
    for bad in ("many", 1.5, "2147483648"):
        resp = api.post("/schemas", with_column(bad), format="json")
        assert resp.status_code == 400, resp.content
        error = resp.json()["error"]
        assert "field 'stars'" in error and "defaultNullValue" in error and "INT" in error, error
        assert snapshot(zk) == before
    assert api.post("/schemas", with_column("-1"), format="json").status_code == 200
    assert api.get("/schemas/githubEvents").json()["dimensionFieldSpecs"][-1]["name"] == "stars"
