"""The indexes a table config declares that the segment build does not produce (pure)."""

from __future__ import annotations

import json

from tables.domain.index_configs import NOT_BUILT, UnbuiltIndex, unbuilt_indexes
from tests.envdefaults import PINOT_FIXTURES


def test_every_kind_of_declaration_is_listed_with_its_reason():
    config = {
        "tableIndexConfig": {
            "invertedIndexColumns": ["country", "city"],
            "rangeIndexColumns": ["price"],
            "bloomFilterColumns": ["id"],
            "bloomFilterConfigs": {"sku": {"fpp": 0.01}},
            "jsonIndexConfigs": {"payload": {}},
            "sortedColumn": ["country"],
            "noDictionaryColumns": ["payload"],  # an encoding, not an index
            "starTreeIndexConfigs": [{"dimensionsSplitOrder": ["country", "city"]}],
            "enableDefaultStarTree": True,
        },
        "fieldConfigList": [
            {"name": "text", "encodingType": "RAW", "indexType": "TEXT"},
            {"name": "name", "indexTypes": ["FST", "INVERTED"]},
            {"name": "embedding", "indexes": {"vector": {"vectorDimension": 8}}},
            {"name": "loc", "indexes": {"h3": {}, "forward": {"disabled": True}}},
            {"name": "ts", "timestampConfig": {"granularities": ["DAY"]}},
        ],
    }
    found = unbuilt_indexes(config)
    assert [(u.index, u.columns, u.where) for u in found] == [
        ("inverted", ("country", "city"), "tableIndexConfig.invertedIndexColumns"),
        ("range", ("price",), "tableIndexConfig.rangeIndexColumns"),
        ("bloom", ("id",), "tableIndexConfig.bloomFilterColumns"),
        ("bloom", ("sku",), "tableIndexConfig.bloomFilterConfigs"),
        ("json", ("payload",), "tableIndexConfig.jsonIndexConfigs"),
        ("sorted", ("country",), "tableIndexConfig.sortedColumn"),
        ("star-tree", ("country", "city"), "tableIndexConfig.starTreeIndexConfigs"),
        ("star-tree", (), "tableIndexConfig.enableDefaultStarTree"),
        ("text", ("text",), "fieldConfigList"),
        ("fst", ("name",), "fieldConfigList"),
        ("inverted", ("name",), "fieldConfigList"),
        ("vector", ("embedding",), "fieldConfigList"),
        ("h3", ("loc",), "fieldConfigList"),
        ("timestamp", ("ts",), "fieldConfigList"),
    ]
    assert found[0].reason == NOT_BUILT == "not built by this build: no query engine here"
    assert "sorted by the time column" in found[5].reason


def test_nothing_declared_or_malformed_lists_nothing():
    assert unbuilt_indexes(None) == []
    assert unbuilt_indexes({}) == []
    assert unbuilt_indexes({"tableIndexConfig": [], "fieldConfigList": [3, {"name": 1}]}) == []


def test_pinots_example_tables():
    def of(name: str) -> list[UnbuiltIndex]:
        path = PINOT_FIXTURES / f"{name}_realtime_table_config.json"
        return unbuilt_indexes(json.loads(path.read_text()))

    assert [(u.index, u.columns) for u in of("githubEvents")] == [("inverted", ("id",))]
    assert [(u.index, u.columns) for u in of("upsertMeetupRsvp")] == [("h3", ("location",))]
