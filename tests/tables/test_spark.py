"""A real SparkSession: DataFrame to Parquet and back, readable by pyarrow too."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tables.segments.parquet_read import read_parquet

pytestmark = pytest.mark.spark


def test_a_dataframe_round_trips_through_parquet(spark, tmp_path):
    rows = [
        (1, "PushEvent", dt.datetime(2021, 7, 21, 10, 0, tzinfo=dt.UTC)),
        (2, "WatchEvent", dt.datetime(2021, 7, 21, 11, 30, tzinfo=dt.UTC)),
        (3, "IssuesEvent", dt.datetime(2021, 7, 21, 12, 45, tzinfo=dt.UTC)),
    ]
    frame = spark.createDataFrame(rows, "id long, type string, created_at timestamp")
    out = str(tmp_path / "events.parquet")
    frame.coalesce(1).write.parquet(out)

    back = spark.read.parquet(out).orderBy("id").collect()
    assert [(r.id, r.type, r.created_at.replace(tzinfo=dt.UTC)) for r in back] == rows

    (part,) = Path(out).glob("part-*.parquet")  # coalesce(1): one file
    table = read_parquet(part)
    assert table.num_rows == 3
    # TIMESTAMP_MICROS, not Spark's legacy INT96: other readers see a proper UTC timestamp.
    assert str(table.schema.field("created_at").type) == "timestamp[us, tz=UTC]"


def test_the_session_binds_to_loopback_without_ui(spark):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert spark.sparkContext.master == "local[1]"
