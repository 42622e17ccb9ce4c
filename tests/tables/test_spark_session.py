"""The process's one SparkSession honours the master it is asked for (local mode here; a Spark
standalone cluster in tests/e2e/test_spark_standalone.py)."""

from __future__ import annotations

import re

import pytest

from tables.segments.spark import get_session

pytestmark = pytest.mark.spark


def test_the_session_is_reused_only_for_its_own_master(spark):
    assert get_session("local[1]") is spark
    with pytest.raises(ValueError, match=re.escape("runs on local[1], not spark://127.0.0.1:7077")):
        get_session("spark://127.0.0.1:7077")
    assert get_session("local[1]") is spark


def test_the_driver_binds_to_and_advertises_loopback(spark):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.bindAddress") == conf.get("spark.driver.host") == "127.0.0.1"
