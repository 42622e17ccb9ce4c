"""Pinot's REST paths for schemas and tables, against the real ZooKeeper and Redis.

The znodes a table creation writes are checked with ZooKeeper's own zkCli.sh, not only with kazoo.
"""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import threading
from collections import Counter

import pytest
from rest_framework.test import APIClient

from tables import build_backoffs
from tables.domain.table_config import switch_stream_type
from tables.domain.znrecord import ZNRecord
from tables.redisconn import get_redis
from tables.streams.redis_streams import RedisTopicAdmin
from tables.zk.client import new_client
from tables.zk.records import read_record, update_record
from tests import envdefaults
from tests.cluster_fixtures import PATHS, SERVERS, load

pytestmark = [pytest.mark.zk, pytest.mark.redis, pytest.mark.django_db]

ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"


@pytest.fixture
def api(admin_user):
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def github_table(topic: str, replication: int = 2) -> dict:
    rest = switch_stream_type(load("githubEvents_realtime_table_config.json"), "redis", topic)
    rest["segmentsConfig"]["replication"] = str(replication)
    return rest


def snapshot(zk) -> dict[str, bytes]:
    """Every znode under the test's chroot with its data."""
    out: dict[str, bytes] = {}

    def walk(path: str) -> None:
        for child in zk.get_children(path):
            full = f"{path.rstrip('/')}/{child}"
            out[full] = zk.get(full)[0]
            walk(full)

    walk("/")
    return out


def zkcli(settings, *command: str) -> str:
    """Run one zkCli.sh command against the test's chroot; returns its output."""
    host, chroot = settings.ZK_HOSTS.split("/", 1)
    args = [a.replace("@", f"/{chroot}") for a in command]
    done = subprocess.run(
        [ZKCLI, "-server", host, *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def zkcli_json(settings, path: str) -> dict:
    output = zkcli(settings, "get", f"@{path}")
    start = output.index("{")
    return json.loads(output[start : output.rindex("}") + 1])


def create_github(api, topic: str, replication: int = 2):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    return api.post("/tables", github_table(topic, replication), format="json")


def test_creating_a_table_writes_pinots_znodes(api, servers, topic, settings, zk):
    resp = create_github(api, topic)
    assert resp.status_code == 200, resp.content
    assert resp.json()["status"] == "Table githubEvents_REALTIME successfully added"

    listing = zkcli(settings, "ls", "-R", "@/PinotCluster").splitlines()
    chroot = "/" + settings.ZK_HOSTS.split("/", 1)[1]
    paths = {line.removeprefix(chroot) for line in listing if line.startswith(chroot)}
    assert "/PinotCluster/IDEALSTATES/githubEvents_REALTIME" in paths
    assert "/PinotCluster/PROPERTYSTORE/CONFIGS/TABLE/githubEvents_REALTIME" in paths
    assert "/PinotCluster/PROPERTYSTORE/SCHEMAS/githubEvents" in paths
    prefix = "/PinotCluster/PROPERTYSTORE/SEGMENTS/githubEvents_REALTIME/"
    segments = sorted(p.removeprefix(prefix) for p in paths if p.startswith(prefix))
    assert [s.split("__")[:3] for s in segments] == [
        ["githubEvents", str(p), "0"] for p in range(4)
    ]

    ideal = zkcli_json(settings, "/PinotCluster/IDEALSTATES/githubEvents_REALTIME")
    assert ideal["id"] == "githubEvents_REALTIME"
    simple = ideal["simpleFields"]
    assert simple["REBALANCE_MODE"] == "CUSTOMIZED"
    assert simple["NUM_PARTITIONS"] == "4"
    assert simple["REPLICAS"] == "2"
    assert simple["STATE_MODEL_DEF_REF"] == "SegmentOnlineOfflineStateModel"
    assert simple["INSTANCE_GROUP_TAG"] == "githubEvents_REALTIME"
    assert sorted(ideal["mapFields"]) == segments
    for replicas in ideal["mapFields"].values():
        assert len(replicas) == 2
        assert set(replicas.values()) == {"CONSUMING"}
    load_per_server = Counter(s for r in ideal["mapFields"].values() for s in r)
    assert set(load_per_server) == set(SERVERS)
    assert set(load_per_server.values()) <= {2, 3}  # 8 replicas over 3 servers, evenly

    for partition, segment in enumerate(segments):
        meta = zkcli_json(
            settings, f"/PinotCluster/PROPERTYSTORE/SEGMENTS/githubEvents_REALTIME/{segment}"
        )
        fields = meta["simpleFields"]
        assert set(fields) == {
            "segment.creation.time",
            "segment.flush.threshold.size",
            "segment.realtime.numReplicas",
            "segment.realtime.startOffset",
            "segment.realtime.status",
        }
        assert fields["segment.realtime.status"] == "IN_PROGRESS"
        assert fields["segment.realtime.numReplicas"] == "2"
        # auto.offset.reset=smallest: the partition's earliest offset.
        provider = RedisTopicAdmin(get_redis(settings.REDIS_URL)).provider(topic)
        assert fields["segment.realtime.startOffset"] == str(provider.earliest_offset(partition))
        # threshold.size=100 over ceil(4 partitions x 2 replicas / 3 servers) = 3 per server.
        assert fields["segment.flush.threshold.size"] == "33"

    config = zkcli_json(settings, "/PinotCluster/PROPERTYSTORE/CONFIGS/TABLE/githubEvents_REALTIME")
    assert config["simpleFields"]["tableName"] == "githubEvents_REALTIME"
    assert json.loads(config["simpleFields"]["segmentsConfig"])["replication"] == "2"
    broker = read_record(zk, PATHS.idealstate("brokerResource")).record
    assert "githubEvents_REALTIME" in broker.map_fields

    detail = api.get("/tables/githubEvents").json()["REALTIME"]
    assert detail["tableName"] == "githubEvents_REALTIME"
    assert api.get("/tables").json() == {"tables": ["githubEvents"]}
    assert api.get("/segments/githubEvents_REALTIME").json() == [{"REALTIME": segments}]
    metadata = api.get(f"/segments/githubEvents/{segments[0]}/metadata").json()
    assert metadata["segment.realtime.status"] == "IN_PROGRESS"
    ideal_api = api.get("/tables/githubEvents/idealstate").json()
    assert ideal_api["REALTIME"] == ideal["mapFields"]

    deleted = api.delete("/tables/githubEvents")
    assert deleted.status_code == 200
    assert deleted.json() == {"status": "Tables: [githubEvents_REALTIME] deleted"}
    after = zkcli(settings, "ls", "-R", "@/PinotCluster")
    assert "githubEvents_REALTIME" not in after
    assert (
        "githubEvents_REALTIME"
        not in read_record(zk, PATHS.idealstate("brokerResource")).record.map_fields
    )
    assert api.get("/tables/githubEvents").status_code == 404


@pytest.mark.parametrize(
    "name",
    sorted(
        p.name.removesuffix("_realtime_table_config.json")
        for p in envdefaults.PINOT_FIXTURES.glob("*_realtime_table_config.json")
    ),
)
def test_every_fixture_table_can_be_created_on_redis(api, servers, topic, name):
    schema = load(f"{name}_schema.json")
    assert api.post("/schemas", schema, format="json").status_code == 200
    rest = switch_stream_type(load(f"{name}_realtime_table_config.json"), "redis", topic)
    resp = api.post("/tables", rest, format="json")
    assert resp.status_code == 200, resp.json()
    table = resp.json()["status"].split()[1]
    assert len(api.get(f"/tables/{table}/idealstate").json()["REALTIME"]) == 4


def test_a_kafka_table_whose_brokers_are_down_is_refused_and_nothing_is_created(api, servers, zk):
    # The fixture's broker list (localhost:19092) has no Kafka behind it.
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    before = snapshot(zk)
    config = load("githubEvents_realtime_table_config.json")
    # The table's own timeout bounds the wait (10 s unless set): 1 s here.
    stream = config["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][0]
    stream["stream.kafka.connection.timeout.millis"] = "1000"
    resp = api.post("/tables", config, format="json")
    assert resp.status_code == 400
    assert "topic 'githubEvents': Kafka is not reachable" in resp.json()["error"]
    assert snapshot(zk) == before


def _pauseless(rest: dict) -> dict:
    rest["ingestionConfig"]["streamIngestionConfig"]["pauselessConsumptionEnabled"] = True
    return rest


def _pauseless_with_peer_download(rest: dict) -> dict:
    rest["segmentsConfig"]["peerSegmentDownloadScheme"] = "http"
    return _pauseless(rest)


def _pauseless_replication_one_with_peer_download(rest: dict) -> dict:
    rest["segmentsConfig"]["replication"] = "1"
    return _pauseless_with_peer_download(rest)


def _unknown_recovery_mode(rest: dict) -> dict:
    rest["ingestionConfig"]["streamIngestionConfig"]["disasterRecoveryMode"] = "NEVER"
    return _pauseless_with_peer_download(rest)


def _renamed(rest: dict) -> dict:
    rest["tableName"] = "github__events"
    return rest


def _unknown_stream(rest: dict) -> dict:
    return switch_stream_type(rest, "pulsar", "somewhere")


def _negative_threshold(rest: dict) -> dict:
    rest["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"][0][
        "realtime.segment.flush.threshold.rows"
    ] = "-5"
    return rest


def _other_schema(rest: dict) -> dict:
    rest["tableName"] = "noSuchSchema"
    return rest


INVALID = {
    "pauseless without peer download": (_pauseless, "peerSegmentDownloadScheme"),
    "pauseless with peer download at replication 1": (
        _pauseless_replication_one_with_peer_download,
        "peerSegmentDownloadScheme can't be used when replication is < 2",
    ),
    "unknown disaster recovery mode": (
        _unknown_recovery_mode,
        "streamIngestionConfig.disasterRecoveryMode must be one of [ALWAYS, DEFAULT], got 'NEVER'",
    ),
    "name with __": (_renamed, "must not contain '__'"),
    "missing schema": (_other_schema, "schema noSuchSchema not found"),
    "unknown stream type": (_unknown_stream, "stream type 'pulsar'"),
    "negative flush threshold": (_negative_threshold, "realtime.segment.flush.threshold.rows"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_tables_get_400_and_change_nothing(api, servers, topic, zk, case):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    change, reason = INVALID[case]
    before = snapshot(zk)
    resp = api.post("/tables", change(copy.deepcopy(github_table(topic))), format="json")
    assert resp.status_code == 400, resp.content
    assert reason in resp.json()["error"]
    assert snapshot(zk) == before


def test_a_pauseless_table_is_created_and_a_table_updated_to_pauseless(api, servers, topic, zk):
    assert api.post("/schemas", load("githubEvents_schema.json"), format="json").status_code == 200
    rest = _pauseless_with_peer_download(github_table(topic))
    rest["ingestionConfig"]["streamIngestionConfig"]["disasterRecoveryMode"] = "ALWAYS"
    resp = api.post("/tables", rest, format="json")
    assert resp.status_code == 200, resp.content
    stored = api.get("/tables/githubEvents").json()["REALTIME"]["ingestionConfig"]
    assert stored["streamIngestionConfig"]["pauselessConsumptionEnabled"] is True
    assert stored["streamIngestionConfig"]["disasterRecoveryMode"] == "ALWAYS"

    # back to blocking, then pauseless again, by PUT
    resp = api.put("/tables/githubEvents", github_table(topic), format="json")
    assert resp.status_code == 200, resp.content
    resp = api.put("/tables/githubEvents_REALTIME", rest, format="json")
    assert resp.status_code == 200, resp.content
    stored = api.get("/tables/githubEvents").json()["REALTIME"]["ingestionConfig"]
    assert stored["streamIngestionConfig"]["pauselessConsumptionEnabled"] is True


def test_malformed_json_is_a_400(api, servers, zk):
    before = snapshot(zk)
    resp = api.post("/tables", data="{not json", content_type="application/json")
    assert resp.status_code == 400
    assert "JSON parse error" in resp.json()["error"]
    resp = api.post("/schemas", data="[1, 2", content_type="application/json")
    assert resp.status_code == 400
    assert snapshot(zk) == before


def test_unknown_tables_and_segments_are_404(api, cluster, zk):
    before = snapshot(zk)
    for path in ("/tables/nope", "/tables/nope/idealstate", "/segments/nope", "/schemas/nope"):
        resp = api.get(path)
        assert resp.status_code == 404, path
        assert "not found" in resp.json()["error"]
    assert api.delete("/tables/nope").status_code == 404
    assert api.get("/tables/bad__name").status_code == 400
    assert snapshot(zk) == before


def test_a_table_twice_is_a_409(api, servers, topic):
    assert create_github(api, topic).status_code == 200
    resp = api.post("/tables", github_table(topic), format="json")
    assert resp.status_code == 409
    assert "already exists" in resp.json()["error"]


def test_too_few_servers_is_a_400(api, servers, topic):
    resp = create_github(api, topic, replication=4)
    assert resp.status_code == 400
    assert "replication 4" in resp.json()["error"]


def test_schemas_in_use_cannot_be_deleted(api, servers, topic):
    assert create_github(api, topic).status_code == 200
    resp = api.delete("/schemas/githubEvents")
    assert resp.status_code == 409
    assert api.delete("/tables/githubEvents").status_code == 200
    assert api.delete("/schemas/githubEvents").status_code == 200
    assert api.get("/schemas").json() == []


def test_deleting_a_table_removes_its_deep_store_files(api, servers, topic, settings, tmp_path):
    root = tmp_path / "deepstore"
    settings.DEEP_STORE_URI = root.as_uri()
    assert create_github(api, topic).status_code == 200
    segment = "githubEvents__0__0__20260101T0000Z"
    mine = [
        f"githubEvents/{segment}.tar.gz",
        f"githubEvents/{segment}.tmp.0a1b",
        f"_staging/githubEvents/{segment}.0a1b.parquet",
    ]
    others = ["githubEventsOther/x.tar.gz", "_staging/githubEventsOther/x.parquet"]
    for key in (*mine, *others):
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b"bytes")

    for table in ("githubEvents_REALTIME", "githubEventsOther_REALTIME"):
        build_backoffs.record_failure(
            table, segment, fingerprint="f", error="BuildError: x", server="s", now_ms=1
        )

    assert api.delete("/tables/githubEvents").status_code == 200
    assert [(root / key).exists() for key in (*mine, *others)] == [False] * 3 + [True] * 2
    assert [b.table for b in build_backoffs.rows()] == ["githubEventsOther_REALTIME"]
    assert not (root / "githubEvents").exists()
    assert not (root / "_staging" / "githubEvents").exists()
    assert api.delete("/tables/githubEvents").status_code == 404


def test_callers_need_an_account_and_admin_rights_to_write(db, django_user_model, cluster):
    anonymous = APIClient()
    assert anonymous.get("/tables").status_code == 401
    viewer = APIClient()
    viewer.force_authenticate(django_user_model.objects.create_user("viewer", password="x" * 12))
    assert viewer.get("/tables").status_code == 200
    resp = viewer.post("/schemas", load("githubEvents_schema.json"), format="json")
    assert resp.status_code == 403


def test_concurrent_idealstate_updates_lose_nothing(api, servers, topic, settings, zk):
    assert create_github(api, topic).status_code == 200
    path = PATHS.idealstate("githubEvents_REALTIME")
    clients = [new_client(settings.ZK_HOSTS) for _ in range(4)]
    threads, per_thread = 16, 50
    errors: list[BaseException] = []

    def work(index: int) -> None:
        client = clients[index % len(clients)]
        for i in range(per_thread):

            def add(record: ZNRecord, i: int = i) -> ZNRecord:
                out = record.copy()
                out.map_fields[f"githubEvents__{100 + index}__{i}__20240101T0000Z"] = {
                    SERVERS[0]: "ONLINE"
                }
                return out

            try:
                update_record(client, path, add)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for client in clients:
        client.stop()
        client.close()
    assert errors == []
    assert len(read_record(zk, path).record.map_fields) == 4 + threads * per_thread


def test_a_gzip_idealstate_is_served(api, servers, topic, zk):
    assert create_github(api, topic).status_code == 200
    path = PATHS.idealstate("githubEvents_REALTIME")
    record = read_record(zk, path).record
    for i in range(1, 1200):
        record.map_fields[f"githubEvents__0__{i}__20240101T0000Z"] = {SERVERS[0]: "ONLINE"}
    zk.set(path, gzip.compress(record.to_json().encode()))
    served = api.get("/tables/githubEvents/idealstate").json()["REALTIME"]
    assert len(served) == 1203
