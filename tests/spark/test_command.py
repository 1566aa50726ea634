"""The spark-export launcher's argument handling: usage errors exit 2 before Spark starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import CORPUS_LOGS, TXN_PARTITION

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("extra, message", [
    (["--starting-offsets", "{bad"], "not JSON"),
    (["--spark-conf", "novalue"], "KEY=VALUE"),
    (["--starting-offsets", '{"transactional":{"0":10}}', "--ending-offsets", '{"transactional":{"0":5}}'],
     "after the end offset"),
])
def test_usage_errors_exit_2_without_starting_spark(tmp_path, extra, message):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kstore_cli", "spark-export", str(TXN_PARTITION),
                           "--output", str(tmp_path / "out"), *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert time.monotonic() - started < 10  # no JVM was started
    assert not (tmp_path / "out").exists()


def test_help_has_an_example():
    done = subprocess.run([sys.executable, "-m", "kstore_cli", "spark-export", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Example:" in done.stdout and "--isolation-level" in done.stdout


def test_the_spark_package_never_imports_click_or_rich():
    code = ("import sys, kstore_cli.spark.source, kstore_cli.spark.export, kstore_cli.spark.read; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'rich', 'kstore_cli') "
            "and not m.startswith(('kstore_cli.spark', 'kstore_cli.record', 'kstore_cli.log', 'kstore_cli.operations', 'kstore_cli.cleaner', 'kstore_cli.cluster', 'kstore_cli.parsers', 'kstore_cli.codecs')) "
            "and m not in ('kstore_cli', 'kstore_cli.errors', 'kstore_cli.java')); print(bad)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _export(args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "kstore_cli", "spark-export", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_a_selection_that_matches_nothing_exits_1_before_spark_starts(tmp_path):
    started = time.monotonic()
    done = _export([CORPUS_LOGS, "--output", tmp_path / "out", "--topics", "orders*"])
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"kstore: error: nothing to export: no Kafka partition under {CORPUS_LOGS} matches "
                           f"--topics 'orders*'\n")
    assert time.monotonic() - started < 10 and not (tmp_path / "out").exists()
    # A data dir that holds only internal topics: the message says how to name them.
    data = tmp_path / "data"
    shutil.copytree(CORPUS_LOGS / "__consumer_offsets-0", data / "__consumer_offsets-0")
    done = _export([data, "--output", tmp_path / "out"])
    assert done.returncode == 1
    assert done.stderr == (f"kstore: error: nothing to export: no Kafka partition under {data} (internal topics "
                           f"are exported only when named: --topics '__consumer_offsets')\n")


@pytest.mark.parametrize("mode", [[], ["--mode", "error"]])
def test_an_existing_output_is_refused_before_spark_starts_naming_the_option(tmp_path, mode):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.parquet").write_bytes(b"x")
    started = time.monotonic()
    done = _export([TXN_PARTITION, "--output", out, *mode])
    assert done.returncode == 2
    assert done.stderr == (f"kstore: error: {out} already exists: use --mode overwrite to replace it, "
                           f"or --mode append to add to it\n")
    assert time.monotonic() - started < 10
    assert os.listdir(out) == ["keep.parquet"]


@pytest.mark.parametrize("mode", [[], ["--mode", "overwrite"]])
def test_an_output_inside_a_kafka_data_dir_is_refused_before_spark_starts(tmp_path, mode):
    data = tmp_path / "data"
    shutil.copytree(TXN_PARTITION, data / TXN_PARTITION.name)
    (data / "meta.properties").write_text("version=1\nnode.id=1\n")
    before = sorted(p.name for p in data.rglob("*"))
    for out in (data / "export", data):
        done = _export([data / TXN_PARTITION.name, "--output", out, *mode])
        assert done.returncode == 2, done.stderr
        assert f"--output is or lies inside the Kafka data dir {data}" in done.stderr
    assert sorted(p.name for p in data.rglob("*")) == before


def _env_without_java(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PATH")}
    env["PATH"] = "/nonexistent"
    env.update(extra)
    return env


def test_no_java_is_one_line_and_exit_3(tmp_path):
    done = _export([TXN_PARTITION, "--output", tmp_path / "out"], env=_env_without_java())
    assert done.returncode == 3
    assert done.stderr == ("kstore: error: spark-export needs Java 17+ (JAVA_HOME): no java on PATH and "
                           "JAVA_HOME not set\n")
    done = _export([TXN_PARTITION, "--output", tmp_path / "out"], env=_env_without_java(JAVA_HOME=str(tmp_path)))
    assert done.returncode == 3
    assert done.stderr == f"kstore: error: spark-export needs Java 17+ (JAVA_HOME): no {tmp_path}/bin/java\n"
    # A Java older than 17 (Spark 4 would die with UnsupportedClassVersionError).
    (tmp_path / "bin").mkdir()
    java = tmp_path / "bin" / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_392"\' >&2\n')
    java.chmod(0o755)
    done = _export([TXN_PARTITION, "--output", tmp_path / "out"], env=_env_without_java(JAVA_HOME=str(tmp_path)))
    assert done.returncode == 3
    assert done.stderr == f"kstore: error: spark-export needs Java 17+ (JAVA_HOME): {java} is Java 8\n"
    assert not (tmp_path / "out").exists()


def test_java_versions_are_read_as_spark_needs_them(tmp_path, monkeypatch):
    from kstore_cli.spark.session import JavaMissingError, check_java

    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    for banner, ok in [('openjdk version "17.0.15" 2025-04-15', True), ('java version "21" 2023-09-19', True),
                       ('openjdk version "11.0.2" 2019-01-15', False), ('java version "1.8.0_392"', False)]:
        java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
        java.chmod(0o755)
        if ok:
            assert check_java() == str(java)
        else:
            with pytest.raises(JavaMissingError):
                check_java()
