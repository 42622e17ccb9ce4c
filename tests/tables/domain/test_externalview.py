"""The views the controller computes, pure."""

from __future__ import annotations

from tables.domain.externalview import table_view


def test_a_table_view_gathers_current_states_per_segment():
    view = table_view(
        "t_REALTIME",
        {
            "S2": {"t__0__0__20240101T0000Z": {"CURRENT_STATE": "ONLINE"}},
            "S1": {
                "t__0__0__20240101T0000Z": {"CURRENT_STATE": "ONLINE"},
                "t__0__1__20240101T0100Z": {"CURRENT_STATE": "CONSUMING"},
                "t__1__0__20240101T0000Z": {"INFO": "no state yet"},
            },
        },
    )
    assert view.map_fields == {
        "t__0__0__20240101T0000Z": {"S1": "ONLINE", "S2": "ONLINE"},
        "t__0__1__20240101T0100Z": {"S1": "CONSUMING"},
    }
