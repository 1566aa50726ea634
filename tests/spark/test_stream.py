"""``spark.readStream.format("kstore")`` (kstore_cli.spark.stream): three appends between three
``trigger(availableNow=True)`` runs into a Parquet file sink with a checkpoint: every record once."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from tests.spark.test_incremental import append, expected, exported  # noqa: E402


def _run_available_now(spark, root, out, checkpoint) -> None:
    from kstore_cli.spark import register

    register(spark)
    query = (spark.readStream.format("kstore").load(str(root))
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .partitionBy("topic", "partition").trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None


def test_three_appends_between_three_available_now_runs(spark, tmp_path):
    root, out, checkpoint = tmp_path / "data", tmp_path / "out", tmp_path / "checkpoint"
    append(root, "events-0", 0, 4)
    append(root, "events-1", 0, 2)
    _run_available_now(spark, root, out, checkpoint)
    assert exported(out) == expected({"events-0": 4, "events-1": 2})
    append(root, "events-0", 4, 3)                    # onto the active segment
    append(root, "events-1", 2, 2, new_segment=True)  # a roll
    _run_available_now(spark, root, out, checkpoint)
    assert exported(out) == expected({"events-0": 7, "events-1": 4})
    append(root, "events-2", 0, 2)                    # a new partition
    _run_available_now(spark, root, out, checkpoint)
    assert exported(out) == expected({"events-0": 7, "events-1": 4, "events-2": 2})
    _run_available_now(spark, root, out, checkpoint)  # nothing new: nothing added
    assert len(exported(out)) == 13
