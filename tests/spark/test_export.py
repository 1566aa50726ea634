"""The export's session settings (no Spark started here)."""

from __future__ import annotations

import pytest

from kstore_cli.errors import UsageError
from kstore_cli.spark.export import ExportRequest
from kstore_cli.spark.session import ARROW_JAVA_OPTIONS, DEFAULT_CONF, session_settings


def test_arrow_sessions_stop_the_jit_at_c1_and_spark_sessions_keep_the_jvm_defaults():
    arrow = session_settings("local[2]", writer="arrow")
    assert arrow["spark.driver.extraJavaOptions"] == ARROW_JAVA_OPTIONS == "-XX:TieredStopAtLevel=1"
    spark = session_settings("local[2]", writer="spark")
    assert "spark.driver.extraJavaOptions" not in spark
    for key, value in DEFAULT_CONF.items():
        assert arrow[key] == spark[key] == value


def test_the_users_settings_win():
    conf = {"spark.driver.extraJavaOptions": "-Xss4m -XX:TieredStopAtLevel=4", "spark.python.worker.reuse": "false"}
    arrow = session_settings("local[1]", conf, writer="arrow")
    # Both sets of JVM options are kept; the JVM takes the later (the user's) when they name the same flag.
    assert arrow["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -Xss4m -XX:TieredStopAtLevel=4"
    assert arrow["spark.python.worker.reuse"] == "false"
    assert conf == {"spark.driver.extraJavaOptions": "-Xss4m -XX:TieredStopAtLevel=4",
                    "spark.python.worker.reuse": "false"}  # not modified


def test_local_sessions_bind_to_loopback_only():
    assert session_settings("local[*]")["spark.driver.bindAddress"] == "127.0.0.1"
    assert "spark.driver.bindAddress" not in session_settings("spark://host:7077")
    assert session_settings(progress=True)["spark.ui.showConsoleProgress"] == "true"


def test_arrow_tasks_are_128_mib_unless_asked_and_sparks_writer_keeps_the_sources_64():
    assert ExportRequest(["d"], "o", writer="arrow").reader_options()["maxBytesPerPartition"] == str(128 << 20)
    assert "maxBytesPerPartition" not in ExportRequest(["d"], "o", writer="spark").reader_options()
    asked = ExportRequest(["d"], "o", writer="arrow", max_bytes_per_partition=1 << 20)
    assert asked.reader_options()["maxBytesPerPartition"] == str(1 << 20)


@pytest.mark.parametrize("output, conf, partition_by, writer", [
    ("/lake/kafka", {}, "topic,partition", "arrow"),
    ("file:///lake/kafka", {}, "date", "arrow"),
    ("relative/out", {"spark.executor.memory": "2g", "spark.sql.session.timeZone": "UTC"}, "date", "arrow"),
    ("s3a://bucket/kafka", {}, "topic,partition", "spark"),        # Hadoop's filesystems and credentials
    ("hdfs://nn/kafka", {}, "none", "spark"),
    ("s3://bucket/kafka", {}, "topic,partition", "arrow"),        # pyarrow's own S3 (as remote inputs)
    ("gs://bucket/kafka", {}, "none", "arrow"),
    ("/lake/kafka", {"spark.sql.parquet.compression.codec": "lz4"}, "none", "spark"),  # only Spark's writer reads it
    ("/lake/kafka", {"spark.hadoop.fs.defaultFS": "hdfs://nn"}, "none", "spark"),
    ("/lake/kafka", {"spark.sql.session.timeZone": "Europe/Paris"}, "date", "spark"),  # dates in that zone
    ("/lake/kafka", {"spark.sql.session.timeZone": "Europe/Paris"}, "topic,partition", "arrow"),
])
def test_auto_writer_is_arrow_where_it_writes_what_sparks_writer_would(output, conf, partition_by, writer):
    request = ExportRequest(["d"], output, spark_conf=conf, partition_by=partition_by)
    assert request.requested_writer == "auto" and request.writer == writer
    assert ExportRequest(["d"], "s3a://b/k", writer="arrow").writer == "arrow"  # asked for: kept
    assert ExportRequest(["d"], "/lake", writer="spark").writer == "spark"


def test_an_unknown_writer_is_a_usage_error():
    with pytest.raises(UsageError, match="--writer must be one of auto, spark, arrow"):
        ExportRequest(["d"], "o", writer="parquet-mr")
