"""The cluster token (`Authorization: Bearer <tables.security.cluster_token()>`) on the controller's
API: a server of the cluster downloads committed segments with it and may read, never write; a
wrong token is refused with 401. Real ZooKeeper, Redis and a file deep store; the segment tar is
published as a commit leaves it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client

from tables import builds
from tables.cluster import context
from tables.controller.resources import ResourceManager
from tables.security import cluster_token
from tables.segments.segment_format import (
    CREATION_META,
    METADATA_FILE,
    format_properties,
    pack_creation_meta,
    pack_segment,
)
from tables.server.local_segments import DownloadError, LocalSegments
from tests.cluster_fixtures import load
from tests.ingest_cluster import table_config

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

CRC = 2_718_281_828
CREATED_MS = 1_626_847_200_000


def _bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def _body(response) -> bytes:
    return b"".join(response.streaming_content)


@pytest.fixture
def published(servers, topic, settings, tmp_path: Path) -> tuple[str, bytes]:
    """The githubEvents table, and the tar of its partition-0 segment in a deep store of the
    test's own: (segment name, tar bytes)."""
    settings.DEEP_STORE_URI = (tmp_path / "deepstore").as_uri()
    manager = ResourceManager(context.current())
    manager.add_schema(load("githubEvents_schema.json"))
    manager.add_table(table_config(topic))
    segment = next(s for s in sorted(manager.idealstate("githubEvents")) if "__0__" in s)
    folder = tmp_path / segment
    folder.mkdir()
    (folder / METADATA_FILE).write_text(
        format_properties({"segment.name": segment, "segment.total.docs": "0"})
    )
    (folder / CREATION_META).write_bytes(pack_creation_meta(CRC, CREATED_MS))
    tar = tmp_path / f"{segment}.tar.gz"
    pack_segment(folder, tar)
    store = builds.deep_store()
    store.publish(tar, store.segment_key("githubEvents", segment))
    return segment, tar.read_bytes()


def test_the_cluster_token_downloads_a_committed_segment(published, client: Client):
    segment, tar = published
    for table in ("githubEvents", "githubEvents_REALTIME"):
        response = client.get(f"/segments/{table}/{segment}", **_bearer(cluster_token()))
        assert response.status_code == 200
        assert _body(response) == tar
        assert response["Content-Length"] == str(len(tar))
        assert f'filename="{segment}.tar.gz"' in response["Content-Disposition"]
    # The keyword is case-insensitive, as HTTP auth schemes are.
    lower = client.get(
        f"/segments/githubEvents/{segment}", HTTP_AUTHORIZATION=f"bearer {cluster_token()}"
    )
    assert lower.status_code == 200


def test_a_missing_segment_is_not_found_not_forbidden(published, client: Client):
    segment, _ = published
    missing = segment.replace("__0__", "__3__")
    response = client.get(f"/segments/githubEvents/{missing}", **_bearer(cluster_token()))
    assert response.status_code == 404
    assert response.json()["code"] == 404


@pytest.mark.parametrize(
    "header",
    [
        "Bearer not-the-cluster-token",
        "Bearer ",
        "Bearer two tokens",
    ],
)
def test_a_wrong_bearer_header_is_refused(published, client: Client, header: str):
    segment, _ = published
    response = client.get(f"/segments/githubEvents/{segment}", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert response.json()["code"] == 401


def test_no_credentials_is_refused(published, client: Client):
    segment, _ = published
    assert client.get(f"/segments/githubEvents/{segment}").status_code == 401


def test_the_cluster_token_reads_but_cannot_write(published, client: Client):
    token = _bearer(cluster_token())
    assert client.get("/schemas", **token).json() == ["githubEvents"]
    assert client.get("/tables/githubEvents/idealstate", **token).status_code == 200
    assert client.get("/segments/githubEvents", **token).status_code == 200

    schema = load("githubEvents_schema.json") | {"schemaName": "intruder"}
    post = client.post("/schemas", json.dumps(schema), content_type="application/json", **token)
    assert post.status_code == 403
    assert post.json()["code"] == 403
    assert client.delete("/schemas/githubEvents", **token).status_code == 403
    table = json.dumps(table_config("elsewhere") | {"tableName": "intruder"})
    assert (
        client.post("/tables", table, content_type="application/json", **token).status_code == 403
    )
    # Nothing changed.
    assert ResourceManager(context.current()).list_schemas() == ["githubEvents"]
    assert ResourceManager(context.current()).list_tables() == ["githubEvents_REALTIME"]


def test_the_derived_token_depends_on_the_secret_key(settings):
    settings.CLUSTER_TOKEN = ""
    token = cluster_token()
    assert token == cluster_token()
    assert len(token) == 64 and int(token, 16) >= 0
    assert settings.SECRET_KEY not in token
    settings.SECRET_KEY = settings.SECRET_KEY + "-rotated"
    assert cluster_token() != token


def test_the_cluster_token_setting_overrides_the_derived_token(published, client: Client, settings):
    segment, tar = published
    settings.CLUSTER_TOKEN = ""
    derived = cluster_token()
    settings.CLUSTER_TOKEN = "an-operator-chosen-token"
    assert cluster_token() == "an-operator-chosen-token"
    url = f"/segments/githubEvents/{segment}"
    response = client.get(url, **_bearer("an-operator-chosen-token"))
    assert response.status_code == 200
    assert _body(response) == tar
    assert client.get(url, **_bearer(derived)).status_code == 401


@pytest.mark.django_db(transaction=True)
def test_a_server_fetches_its_copy_with_the_token(published, live_server, tmp_path: Path, settings):
    """`LocalSegments` sends the token, as a server fetching a committed segment does."""
    segment, tar = published
    url = f"{live_server.url}/segments/githubEvents/{segment}"
    table = "githubEvents_REALTIME"

    fetched = LocalSegments(tmp_path / "server", cluster_token()).fetch(table, segment, url, CRC)
    assert fetched.read_bytes() == tar

    for token in ("not-the-cluster-token", None):
        other = LocalSegments(tmp_path / "other", token)
        with pytest.raises(DownloadError, match="401"):
            other.fetch(table, segment, url, CRC)
        assert not other.path(table, segment).exists()
