"""kstore verify-index: flags every damaged golden case, passes every healthy corpus partition."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from tests.conftest import CORPUS, GOLDEN, ROOT

_register_commands()


def run(*args: str):
    return CliRunner().invoke(cli, ["verify-index", *args])


@pytest.mark.parametrize("case", ["bad-index-0", "bad-sanity-0", "sparse-index-0", "missing-log-0"])
def test_damaged_golden_cases_exit_1(case: str) -> None:
    result = run("--json", str(GOLDEN / "inputs" / case))
    assert result.exit_code == 1, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert any(r["type"] == "finding" and r["severity"] == "error" for r in rows)
    assert rows[-1]["type"] == "partition" and rows[-1]["healthy"] is False


def test_sparse_index_zero_padding_is_named() -> None:
    result = run(str(GOLDEN / "inputs" / "sparse-index-0"))
    assert "index-zero-padding" in result.output and "timeindex-zero-padding" in result.output


def test_healthy_corpus_data_dir_exits_0() -> None:
    result = run("--json", str(CORPUS / "logs"))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    summaries = [r for r in rows if r["type"] == "partition"]
    assert len(summaries) == len([d for d in os.listdir(CORPUS / "logs") if os.path.isdir(CORPUS / "logs" / d)])
    assert all(r["healthy"] for r in summaries)


def test_crashed_active_segments_give_notes_not_errors() -> None:
    result = run("--json", str(CORPUS / "logs-crashed"))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    findings = [r for r in rows if r["type"] == "finding"]
    assert findings and {f["severity"] for f in findings} == {"note"}
    assert any(f["check"] == "index-preallocated" for f in findings)
    assert any(f["check"] == "log-zero-tail" for f in findings)


def test_real_process_text_output_and_exit_code() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "kstore_cli", "verify-index", str(GOLDEN / "inputs" / "bad-index-0")],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 1
    assert "error: index-order" in out.stdout and "Traceback" not in out.stderr
    ok = subprocess.run([sys.executable, "-m", "kstore_cli", "verify-index", str(CORPUS / "logs" / "v2-none-0")],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and "healthy" in ok.stdout
