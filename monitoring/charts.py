"""Plotly figures of a table's (or partition's) ingestion over the last hour.

Pure: takes the consumption samples as tuples (no database) and returns figure dicts ready for
`json_script` and `Plotly.react` in the page (plotly.min.js comes from the plotly package itself).
One trace per stream partition in each figure:
- `rate`: rows per second consumed,
- `records_lag`: records behind the stream (worst replica),
- `time_lag`: availability lag in seconds (worst replica).
Backgrounds are transparent and colours neutral, so the page's light or dark theme shows through.
The x axis always spans the whole window (`now - window` to `now`) with hour:minute ticks, so a
table that started sampling a minute ago reads as "one minute of data", not as a zoomed-in axis
of overlapping second-precision labels; the legend sits to the right, clear of the axis.

Size and speed: an hour of 16 partitions is 11,520 points per page. The layout is built (and
validated) with plotly's graph objects; the traces are plain dicts of Plotly's `scatter` type,
because validating every point costs ~90 ms a render. Times are epoch milliseconds (UTC), which a
date axis reads natively, at half the bytes of ISO strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import plotly.graph_objects as go

__all__ = ["FIGURES", "Sample", "ingestion_figures"]

# (partition, sampled_at, rows_per_s, records_lag, time_lag_ms)
Sample = tuple[int, datetime, float, int, int]
FIGURES: dict[str, tuple[str, str]] = {
    "rate": ("Ingestion rate", "rows/s"),
    "records_lag": ("Records lag", "records"),
    "time_lag": ("Time lag", "seconds"),
}
GRID = "rgba(128,128,128,0.25)"


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _series(samples: Iterable[Sample]) -> dict[int, dict[str, list[Any]]]:
    series: dict[int, dict[str, list[Any]]] = {}
    for partition, at, rate, lag, time_lag_ms in samples:
        s = series.setdefault(partition, {"x": [], "rate": [], "records_lag": [], "time_lag": []})
        s["x"].append(_ms(at))
        s["rate"].append(round(rate or 0.0, 2))
        s["records_lag"].append(lag)
        s["time_lag"].append((time_lag_ms or 0) / 1000)
    return series


def _layout(key: str, x_range: list[int], legend: bool) -> dict[str, Any]:
    title, unit = FIGURES[key]
    return go.Layout(
        title={"text": title, "x": 0, "font": {"size": 14}},
        height=260,
        margin={"l": 56, "r": 8, "t": 36, "b": 36},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        xaxis={
            "type": "date",
            "range": x_range,
            "tickformat": "%H:%M",
            "hoverformat": "%H:%M:%S",
            "nticks": 7,
            "gridcolor": GRID,
        },
        yaxis={"title": {"text": unit}, "rangemode": "tozero", "gridcolor": GRID},
        showlegend=legend,
        legend={"orientation": "v", "x": 1.02, "y": 1, "font": {"size": 11}},
        hovermode="x unified",
    ).to_plotly_json()


def _traces(key: str, series: dict[int, dict[str, list[Any]]]) -> list[dict[str, Any]]:
    unit = FIGURES[key][1]
    return [
        {
            "type": "scatter",
            "mode": "lines",
            "x": s["x"],
            "y": s[key],
            "name": f"partition {partition}",
            "hovertemplate": f"%{{y:,.4~g}} {unit}<extra>partition {partition}</extra>",
        }
        for partition, s in sorted(series.items())
    ]


def ingestion_figures(
    samples: Sequence[Sample], now: datetime, window: timedelta
) -> dict[str, dict[str, Any]]:
    """The three figures as JSON-ready dicts (`data`, `layout`), each spanning `window` up to
    `now`; empty when there are no samples. Times must be aware (Django's are UTC)."""
    if not samples:
        return {}
    series = _series(samples)
    x_range = [_ms(now - window), _ms(now)]
    return {
        key: {"data": _traces(key, series), "layout": _layout(key, x_range, len(series) > 1)}
        for key in FIGURES
    }
