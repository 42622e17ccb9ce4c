"""The ingestion figures: one trace per partition, the whole window on the x axis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from monitoring.charts import FIGURES, ingestion_figures

NOW = datetime(2026, 11, 25, 3, 0, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_no_samples_no_figures():
    assert ingestion_figures([], NOW, HOUR) == {}


def test_each_figure_spans_the_window_with_a_trace_per_partition():
    samples = [
        (1, NOW - timedelta(seconds=30), 12.5, 40, 1500),
        (0, NOW - timedelta(seconds=45), 10.0, 7, 0),
        (0, NOW - timedelta(seconds=30), 11.0, 9, 2500),
    ]
    figures = ingestion_figures(samples, NOW, HOUR)
    assert sorted(figures) == sorted(FIGURES)
    for figure in figures.values():
        assert figure["layout"]["xaxis"]["range"] == [
            "2026-11-25T02:00:00.000000Z",
            "2026-11-25T03:00:00.000000Z",
        ]
        assert [trace["name"] for trace in figure["data"]] == ["partition 0", "partition 1"]
    partition0 = figures["time_lag"]["data"][0]
    assert list(partition0["y"]) == [0.0, 2.5]  # milliseconds shown as seconds
    assert list(figures["records_lag"]["data"][1]["y"]) == [40]
    assert list(figures["rate"]["data"][0]["x"]) == [
        "2026-11-25T02:59:15.000000Z",
        "2026-11-25T02:59:30.000000Z",
    ]
