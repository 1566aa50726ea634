"""A failed Spark job says its root Java cause on one line; the Java stack is its __cause__ (--traceback)."""

from __future__ import annotations

import pytest

from kstore_cli.errors import ExitStatus
from kstore_cli.spark.export import ExportRequest, SparkJobError, export_with
from kstore_cli.spark.failures import JavaStackTrace, describe, hadoop_version, missing_jar_hint

from tests.spark.conftest import TXN_PARTITION


class _Class:
    def __init__(self, name):
        self.name = name

    def getName(self):
        return self.name


class _Throwable:
    """A stand-in for a py4j JavaObject of a java.lang.Throwable."""

    def __init__(self, cls, message, cause=None):
        self.cls, self.message, self.cause = cls, message, cause

    def getCause(self):
        return self.cause

    def equals(self, other):
        return other is self

    def getClass(self):
        return _Class(self.cls)

    def getMessage(self):
        return self.message


class _Py4JJavaError(Exception):
    def __init__(self, java_exception):
        super().__init__("An error occurred while calling o64.parquet.")
        self.java_exception = java_exception


def test_the_root_of_the_cause_chain_is_named_with_its_message():
    root = _Throwable("java.io.FileNotFoundException", "File /x/y does not exist\nmore detail")
    chain = _Throwable("org.apache.spark.SparkException", "Job aborted.",
                       _Throwable("java.lang.RuntimeException", "wrapped", root))
    assert describe(_Py4JJavaError(chain)) == "java.io.FileNotFoundException: File /x/y does not exist"
    assert describe(ValueError("no Java here")) is None


def test_a_python_workers_failure_is_its_last_traceback_line():
    worker = _Throwable("org.apache.spark.api.python.PythonException",
                        "Traceback (most recent call last):\n  File \"w.py\", line 3, in f\n    raise OSError\n"
                        "OSError: [Errno 28] No space left on device: '/out/x'\n")
    chain = _Throwable("org.apache.spark.SparkException", "Job aborted due to stage failure", worker)
    assert describe(_Py4JJavaError(chain)) == "OSError: [Errno 28] No space left on device: '/out/x'"


@pytest.mark.parametrize("message, jar", [
    ("java.lang.ClassNotFoundException: Class org.apache.hadoop.fs.s3a.S3AFileSystem not found", "hadoop-aws"),
    ('No FileSystem for scheme "abfss"', "hadoop-azure"),
    ("Class com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem not found", "gcs-connector"),
])
def test_a_missing_filesystem_jar_says_which_and_how_to_add_it(message, jar):
    hint = missing_jar_hint(message)
    assert f"the {jar} jar" in hint and "--spark-conf spark.jars.packages=" in hint
    assert missing_jar_hint("Class com.example.Other not found") is None


def test_an_s3a_output_without_hadoop_aws_names_the_missing_class_on_one_line_exit_3(spark, tmp_path):
    req = ExportRequest([str(TXN_PARTITION)], "s3a://bucket/x", writer="spark")
    with pytest.raises(SparkJobError) as caught:
        export_with(spark, req)
    error = caught.value
    assert "\n" not in error.message
    assert error.message == ("Spark job failed: org.apache.hadoop.fs.s3a.S3AFileSystem not found: the hadoop-aws "
                             "jar (Hadoop's s3a:// filesystem) is not on the classpath: --spark-conf "
                             f"spark.jars.packages=org.apache.hadoop:hadoop-aws:{hadoop_version()}")
    assert error.exit_status == ExitStatus.UNREADABLE
    assert isinstance(error.__cause__, JavaStackTrace)
    assert "Caused by: java.lang.ClassNotFoundException" in str(error.__cause__)
    assert "\tat org.apache.hadoop" in str(error.__cause__)
