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
        assert figure["layout"]["xaxis"]["range"] == [_ms(NOW - HOUR), _ms(NOW)]
        assert figure["layout"]["xaxis"]["type"] == "date"
        assert figure["layout"]["showlegend"] is True
        assert [trace["name"] for trace in figure["data"]] == ["partition 0", "partition 1"]
    partition0 = figures["time_lag"]["data"][0]
    assert list(partition0["y"]) == [0.0, 2.5]  # milliseconds shown as seconds
    assert list(figures["records_lag"]["data"][1]["y"]) == [40]
    assert figures["rate"]["data"][0]["x"] == [_ms(NOW) - 45_000, _ms(NOW) - 30_000]
    assert figures["rate"]["data"][1]["y"] == [12.5]


def test_one_partition_needs_no_legend():
    figures = ingestion_figures([(3, NOW, 1.0, 0, 0)], NOW, HOUR)
    assert all(figure["layout"]["showlegend"] is False for figure in figures.values())


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)
