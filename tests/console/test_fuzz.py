"""Schemathesis fuzzes every operation of the project's OpenAPI schema (`/api/v1/schema/`): Pinot's
controller paths, the completion protocol and `/api/v1/`. No answer may be a 5xx.

Each operation is its own test (one fresh ZooKeeper chroot with an initialised cluster, three
servers, a Redis topic and the githubEvents schema and table), sent through the real WSGI
application as an admin (an API token; the completion endpoints get the cluster token, as servers
send it). Half of the generated table and schema names in paths are swapped for the real table's,
so the operations also run past the 404 on a table that exists.
Both schema-conforming and schema-violating inputs are generated (`GenerationMode` all), NUL bytes
included; `deterministic` makes every run generate the same cases, so a failure reproduces.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error

from console.api.schema_generator import COMPLETION_ENDPOINTS, PinotSchemaGenerator
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.domain.table_config import switch_stream_type
from tables.security import cluster_token
from tests.cluster_fixtures import load

pytestmark = [
    pytest.mark.zk,
    pytest.mark.redis,
    pytest.mark.django_db,
    # schemathesis' own strategies draw from `random` (its concern, not this project's)
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning"),
]

EXAMPLES_PER_OPERATION = 20

CONFIG = schemathesis.Config.from_dict(
    {"generation": {"max-examples": EXAMPLES_PER_OPERATION, "deterministic": True}}
)
SCHEMA = schemathesis.openapi.from_dict(
    PinotSchemaGenerator().get_schema(request=None, public=True), config=CONFIG
)
SCHEMA.app = WSGIHandler()
TABLE = "githubEvents"
NAMED_PARAMETERS = ("table", "name")  # path parameters that name a table or a schema


@SCHEMA.hook
def flatmap_path_parameters(context, path_parameters: dict | None) -> st.SearchStrategy:
    named = {key: TABLE for key in NAMED_PARAMETERS if key in (path_parameters or {})}
    if not named:
        return st.just(path_parameters)
    return st.sampled_from([path_parameters, {**path_parameters, **named}])


@pytest.fixture
def in_test_transaction() -> Iterator[None]:
    """Requests through the WSGI handler run inside the test's transaction, as Django's test client
    runs them: the handler must not close the connection at each request's start and end."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def github_table(servers, topic) -> None:
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    config = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    manager.add_table(config)


@pytest.fixture
def admin_headers(django_user_model, in_test_transaction, github_table) -> dict[str, str]:
    # A token, not basic auth: hashing a password on every request would cost most of the time.
    admin = django_user_model.objects.create_superuser("fuzzer", password=None)
    return {"Authorization": f"Token {Token.objects.create(user=admin).key}"}


@SCHEMA.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
def test_no_operation_answers_a_server_error(case, admin_headers) -> None:
    headers = admin_headers
    if case.operation.path in COMPLETION_ENDPOINTS:  # servers call these with the cluster token
        headers = {"Authorization": f"Bearer {cluster_token()}"}
    response = case.call(headers=headers)
    case.validate_response(response, checks=[not_a_server_error])
