"""kstore log-dirs on the command line: --json is one line of LogDirsCommand's JSON; text is a table of dirs and
one of topics, human units on a terminal and raw numbers in a pipe (TSV), no trailing space, long names folded."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import cli
from kstore_cli.commands import log_dirs as command
from tests.operations.test_log_dirs import parse_log_dirs_json

WRITTEN = Path(__file__).resolve().parents[2] / "fixtures" / "kafka-written" / "leader-4.0"
LONG_TOPIC = "t" * 249


@pytest.fixture(scope="module")
def brokers(tmp_path_factory) -> Path:
    """Brokers 1 and 2 with Kafka-written t-0 (broker 2 under a 249-character topic name too)."""
    root = tmp_path_factory.mktemp("logdirs-cli")
    for node in (1, 2):
        d = root / f"broker-{node}"
        shutil.copytree(WRITTEN, d)
        (d / "meta.properties").write_text(f"version=1\ncluster.id=c\nnode.id={node}\n")
    shutil.copytree(WRITTEN / "t-0", root / "broker-2" / f"{LONG_TOPIC}-0")
    return root


def _run(*args: str):
    return CliRunner().invoke(cli, ["log-dirs", *args])


def test_json_is_one_line_of_kafkas_json(brokers):
    result = _run("--json", str(brokers))
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1
    parsed = parse_log_dirs_json(result.stdout)
    size = sum(f.stat().st_size for f in (WRITTEN / "t-0").glob("*.log"))
    assert parsed[(1, str(brokers / "broker-1"), "t", 0, False)] == (size, 0)
    assert {k[0] for k in parsed} == {1, 2} and len(parsed) == 3


def test_pipe_is_tsv_with_raw_numbers(brokers):
    result = _run(str(brokers), "--topics", "t")
    assert result.exit_code == 0 and result.stderr == ""
    dirs, topics = result.stdout.split("\n\n")
    assert dirs.split("\n")[0] == "broker\tlog_dir\tpartitions\tfuture\tsize\ttotal_bytes\tusable_bytes"
    size = sum(f.stat().st_size for f in (WRITTEN / "t-0").glob("*.log"))
    assert topics.split("\n") == ["topic\tpartitions\treplicas\tfuture\tsize\toffset_lag", f"t\t1\t2\t0\t{2 * size}\t0", ""]
    assert all(line == line.rstrip() for line in result.stdout.split("\n"))


def test_terminal_has_human_units_and_folds(brokers, monkeypatch):
    monkeypatch.setattr(command, "is_tty", lambda: True)
    monkeypatch.setattr("kstore_cli.commands._render.is_tty", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    out = _run(str(brokers)).stdout
    assert re.search(r"\d\.\d (KiB|MiB|GiB)", out) and "\x1b" not in out
    assert max(len(line) for line in out.splitlines()) <= 80 and out.count("t") >= len(LONG_TOPIC)
    assert all(line == line.rstrip() for line in out.splitlines())


def test_data_dir_without_node_id_is_named(tmp_path):
    shutil.copytree(WRITTEN, tmp_path / "copy")
    result = _run("--json", str(tmp_path / "copy"))
    assert result.exit_code == 0
    assert json.loads(result.stdout)["brokers"][0]["broker"] == -1
    assert "no node id in meta.properties, shown as broker -1" in result.stderr
