"""The spark-export launcher's argument handling: usage errors exit 2 before Spark starts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.conftest import TXN_PARTITION

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
            "and not m.startswith(('kstore_cli.spark', 'kstore_cli.segment', 'kstore_cli.codecs')) "
            "and m not in ('kstore_cli', 'kstore_cli.errors')); print(bad)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
