"""kstore inspect: per-partition summary from the corpus."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.log.index import TransactionIndex
from tests.conftest import CORPUS

_register_commands()


def rows_of(output: str) -> list:
    return [json.loads(line) for line in output.splitlines()]


def test_transactional_partition_summary() -> None:
    result = CliRunner().invoke(cli, ["inspect", "--json", str(CORPUS / "logs" / "transactional-0")])
    assert result.exit_code == 0, result.output
    (row,) = rows_of(result.output)
    part = CORPUS / "logs" / "transactional-0"
    aborted = sum(len(TransactionIndex(str(p)).entries()) for p in part.glob("*.txnindex"))
    assert row["aborted_transactions"] == aborted > 0
    assert row["open_transactions"] == [{"producer_id": 5002, "first_offset": 405}]  # pid 5002's txn left open
    assert {5000, 5001, 5002, 6000} <= set(row["producer_ids"])
    assert row["log_end_offset"] == 481 and row["segments"] == 8
    assert row["size_bytes"] == sum(p.stat().st_size for p in part.glob("*.log"))
    assert row["index_health"] == "ok"
    assert row["log_start_offset_source"] == "log-start-offset-checkpoint"


def test_data_dir_formats_codecs_leftovers_and_skipped(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs", tmp_path / "logs")
    (tmp_path / "logs" / "v2-none-0" / "00000000000000000000.log.deleted").write_bytes(b"x")
    (tmp_path / "logs" / "orders-0.0123456789abcdef0123456789abcdef-delete").mkdir()
    result = CliRunner().invoke(cli, ["inspect", "--json", str(tmp_path / "logs")])
    assert result.exit_code == 0, result.output
    rows = rows_of(result.output)
    by_name = {os.path.basename(r.get("partition", r.get("path", ""))): r for r in rows}
    assert by_name["v2-none-0"]["leftover_files"] == ["00000000000000000000.log.deleted"]
    assert by_name["mixed-magic-0"]["magics"] == [0, 1, 2]
    assert set(by_name["v2-zstd-0"]["codecs"]) == {"zstd"}
    assert by_name["orders-0.0123456789abcdef0123456789abcdef-delete"]["type"] == "skipped"


def test_a_child_holding_data_dir_files_is_skipped_with_any_jobs(tmp_path: Path) -> None:
    """A child named like a partition that holds a data dir's own files is no partition, found by the
    process that lists it (the walk leaves that to it), and said in the walk's order among the others."""
    shutil.copytree(CORPUS / "logs-crashed", tmp_path / "logs")
    (tmp_path / "logs" / "aaa-0").mkdir()
    (tmp_path / "logs" / "aaa-0" / "meta.properties").write_text("version=0\nbroker.id=1\n")
    (tmp_path / "logs" / "zzz-0.0123456789abcdef0123456789abcdef-delete").mkdir()
    outputs = []
    for jobs in ("1", "2"):
        result = CliRunner().invoke(cli, ["inspect", "--jobs", jobs, str(tmp_path / "logs")])
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
        lines = result.output.splitlines()
        assert not any(line.startswith("aaa-0") for line in lines)
        assert [line for line in lines if line.startswith("# skipped")] == [
            f"# skipped {tmp_path / 'logs' / 'aaa-0'}: a data directory of its own, not a partition",
            f"# skipped {tmp_path / 'logs' / 'zzz-0.0123456789abcdef0123456789abcdef-delete'}: delete replica directory"]
    assert outputs[0] == outputs[1]


def test_text_output_in_a_pipe_is_one_line_per_partition() -> None:
    result = CliRunner().invoke(cli, ["inspect", str(CORPUS / "logs-crashed")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("partition\tsegs")
    assert len(lines) == 4 and all("\t" in line for line in lines)


def _on_a_terminal(args: list, columns: int) -> str:
    """kstore's output when stdout is a terminal `columns` wide (a pseudo-terminal)."""
    import os
    import pty
    import re
    import subprocess
    import sys

    from tests.conftest import ROOT

    leader, follower = pty.openpty()
    env = dict(os.environ, COLUMNS=str(columns), LINES="50", TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "kstore_cli", *args], stdout=follower, stderr=follower,
                            cwd=ROOT, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())


def test_a_terminal_table_never_cuts_a_name_or_a_time(tmp_path: Path) -> None:
    name = "payments.settlements.eu-west-1.v2-0"
    shutil.copytree(CORPUS / "logs" / "v2-none-0", tmp_path / name)
    import re

    for columns in (60, 100, 250):
        text = _on_a_terminal(["inspect", str(tmp_path / name)], columns)
        assert name in text and str(tmp_path) in text, text
        assert re.search(r"2023-11-14 \d\d:\d\d:\d\d\.\d{3}Z", text), text  # UTC, whole
        assert " KiB" in text  # sizes for humans on a terminal
    narrow = _on_a_terminal(["inspect", str(tmp_path / name)], 60)
    assert "    time range: 2023-11-14 " in narrow  # too narrow for the table: a block per partition
    wide = _on_a_terminal(["inspect", str(tmp_path / name)], 250)
    assert "time range" in wide and "    time range:" not in wide


def test_a_terminal_with_many_partitions_lists_none_of_them_up_front(tmp_path: Path, monkeypatch) -> None:
    """On a terminal, many partitions get a bar counting partitions: none is listed by the parent first (each
    is listed by the process that reads it), and the rows are those of a pipe."""
    from kstore_cli.commands import inspect as command
    from kstore_cli.log.logdir import resolve_partitions

    data = tmp_path / "data"
    for i in range(3):
        shutil.copytree(CORPUS / "logs-crashed" / "active-open-0", data / f"t-{i}")
    monkeypatch.setattr(command, "COUNT_BAR_FROM", 3)
    monkeypatch.setattr(command, "loaded", lambda p: (_ for _ in ()).throw(AssertionError("listed up front")))
    partitions = resolve_partitions([str(data)])
    skipped: list = []
    rows = command._read_with_bar(partitions, 2, skipped)
    assert [os.path.basename(r.partition) for r in rows] == ["t-0", "t-1", "t-2"] and skipped == []
    piped = CliRunner().invoke(cli, ["inspect", "--json", str(data)])
    assert [json.loads(line)["log_end_offset"] for line in piped.output.splitlines()] == \
        [r.log_end_offset for r in rows]
