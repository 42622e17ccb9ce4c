"""ZNRecord's writer: Jackson's INDENT_OUTPUT layout, byte for byte."""

from __future__ import annotations

import json
import random

from tables.domain.znrecord import ZNRecord


def _spec(record: ZNRecord) -> str:
    """The layout as the generic encoder writes it (what Helix's Jackson writes)."""
    return json.dumps(record.to_dict(), indent=2, ensure_ascii=False, separators=(",", " : "))


def test_every_member_kind_is_laid_out_as_jackson_does():
    record = ZNRecord(
        id="t_REALTIME",
        simple_fields={"b": "2", "a": "1"},
        map_fields={"seg": {"S2": "ONLINE", "S1": "CONSUMING"}, "empty": {}},
        list_fields={"l": ["x", "y"], "none": []},
    )
    assert record.to_json() == (
        "{\n"
        '  "id" : "t_REALTIME",\n'
        '  "simpleFields" : {\n    "a" : "1",\n    "b" : "2"\n  },\n'
        '  "mapFields" : {\n    "empty" : {},\n'
        '    "seg" : {\n      "S1" : "CONSUMING",\n      "S2" : "ONLINE"\n    }\n  },\n'
        '  "listFields" : {\n    "l" : [\n      "x",\n      "y"\n    ],\n    "none" : []\n  }\n'
        "}"
    )
    assert ZNRecord(id="e").to_json() == (
        '{\n  "id" : "e",\n  "simpleFields" : {},\n  "mapFields" : {},\n  "listFields" : {}\n}'
    )


def test_any_text_is_escaped_as_json_does_and_reads_back():
    rng = random.Random(7)
    alphabet = 'ab:"\\\n\té€\x01 {}[],'

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))

    for _ in range(500):
        record = ZNRecord(
            id=text(),
            simple_fields={text(): text() for _ in range(rng.randint(0, 3))},
            map_fields={
                text(): {text(): text() for _ in range(rng.randint(0, 3))}
                for _ in range(rng.randint(0, 3))
            },
            list_fields={text(): [text() for _ in range(rng.randint(0, 3))] for _ in range(2)},
        )
        written = record.to_json()
        assert written == _spec(record)
        assert ZNRecord.from_json(written) == record
