"""Pinot's `GET /leader/tables` and `GET /leader/tables/{table}` (reference §8) against the real
ZooKeeper: the MASTER of each leadControllerResource partition from the resource's EXTERNALVIEW,
tables placed by Kafka's murmur2 of the raw name, and the disabled-resource answer."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tables.domain.leadership import LEAD_CONTROLLER_RESOURCE, partition_name
from tables.domain.znrecord import ZNRecord
from tables.zk.cluster import init_cluster
from tables.zk.records import create_record, update_record
from tests.cluster_fixtures import PATHS

pytestmark = [pytest.mark.zk, pytest.mark.django_db]

CONTROLLER_A, CONTROLLER_B = "Controller_127.0.0.1_9000", "Controller_127.0.0.1_9001"
# Reference §8, computed with Kafka's murmur2 % 24.
EXPECTED = {"myTable": 3, "airlineStats": 19, "githubEvents": 15, "meetupRsvp": 9}


@pytest.fixture
def api(django_user_model) -> APIClient:
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("viewer"))
    return client


def add_tables(zk, *names: str) -> None:
    for name in names:
        create_record(zk, PATHS.idealstate(name), ZNRecord(id=name))


def set_masters(zk, masters: dict[int, str]) -> None:
    """The resource's EXTERNALVIEW: `masters[i]` MASTER of partition i, the other one SLAVE."""
    fields = {
        partition_name(i): {
            leader: "MASTER",
            (CONTROLLER_B if leader == CONTROLLER_A else CONTROLLER_A): "SLAVE",
        }
        for i, leader in masters.items()
    }
    view = ZNRecord(id=LEAD_CONTROLLER_RESOURCE, map_fields=fields)
    create_record(zk, PATHS.externalview(LEAD_CONTROLLER_RESOURCE), view)


@pytest.fixture
def cluster24(zk):
    init_cluster(zk, PATHS)
    add_tables(zk, "myTable_REALTIME", "airlineStats_REALTIME", "airlineStats_OFFLINE")
    add_tables(zk, "githubEvents_REALTIME")
    set_masters(zk, {3: CONTROLLER_A, 15: CONTROLLER_B, 19: CONTROLLER_A})
    return zk


def test_all_tables(api, cluster24):
    response = api.get("/leader/tables")
    assert response.status_code == 200
    body = response.json()
    assert body["leadControllerResourceEnabled"] is True
    entries = body["leadControllerEntryMap"]
    assert list(entries) == [partition_name(i) for i in range(24)]  # all, in order
    assert entries[partition_name(3)] == {
        "leadControllerId": CONTROLLER_A,
        "tableNames": ["myTable_REALTIME"],
    }
    assert entries[partition_name(15)] == {
        "leadControllerId": CONTROLLER_B,
        "tableNames": ["githubEvents_REALTIME"],
    }
    assert entries[partition_name(19)]["tableNames"] == [
        "airlineStats_OFFLINE",
        "airlineStats_REALTIME",
    ]
    assert entries[partition_name(0)] == {"leadControllerId": None, "tableNames": []}
    # brokerResource and leadControllerResource have IdealStates too, but are not tables.
    placed = [t for e in entries.values() for t in e["tableNames"]]
    assert sorted(placed) == [
        "airlineStats_OFFLINE",
        "airlineStats_REALTIME",
        "githubEvents_REALTIME",
        "myTable_REALTIME",
    ]


@pytest.mark.parametrize("raw", sorted(EXPECTED))
def test_one_table(api, cluster24, raw):
    for name in (raw, f"{raw}_REALTIME"):
        body = api.get(f"/leader/tables/{name}").json()
        partition = partition_name(EXPECTED[raw])
        assert body["leadControllerResourceEnabled"] is True
        assert list(body["leadControllerEntryMap"]) == [partition]
        entry = body["leadControllerEntryMap"][partition]
        assert entry["tableNames"] == [name]
        leader = {3: CONTROLLER_A, 15: CONTROLLER_B, 19: CONTROLLER_A}.get(EXPECTED[raw])
        assert entry["leadControllerId"] == leader


def test_disabled_resource(api, cluster24):
    path = PATHS.resource_config(LEAD_CONTROLLER_RESOURCE)

    def disable(record: ZNRecord) -> ZNRecord:
        record.simple_fields["RESOURCE_ENABLED"] = "false"
        return record

    update_record(cluster24, path, disable)
    expected = {"leadControllerResourceEnabled": False, "leadControllerEntryMap": {}}
    assert api.get("/leader/tables").json() == expected
    assert api.get("/leader/tables/githubEvents").json() == expected


def test_partition_count_comes_from_the_idealstate(api, zk):
    init_cluster(zk, PATHS, lead_partitions=17)
    add_tables(zk, "githubEvents_REALTIME")
    entries = api.get("/leader/tables").json()["leadControllerEntryMap"]
    assert list(entries) == [partition_name(i) for i in range(17)]
    assert all(e["leadControllerId"] is None for e in entries.values())  # no EXTERNALVIEW yet
    placed = {name for name, e in entries.items() if e["tableNames"]}
    single = api.get("/leader/tables/githubEvents_REALTIME").json()["leadControllerEntryMap"]
    assert placed == set(single)


def test_anonymous_is_refused(cluster24):
    assert APIClient().get("/leader/tables").status_code == 401
    assert APIClient().get("/leader/tables/githubEvents").status_code == 401
