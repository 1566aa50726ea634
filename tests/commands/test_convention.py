"""The CLI convention of docs/cli.md, checked on every command with a table or a summary: no trailing
space, no escape byte under NO_COLOR or in a pipe, snake_case keys in every --json line (Kafka-defined JSON
excepted), human units on a terminal and raw numbers in a pipe, 249-character topic names folded at 80 columns."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Iterator, List

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.commands import _render
from tests.conftest import CORPUS
from tests.test_json_lines import WRITTEN, argvs

_register_commands()

#: The JSON Kafka defines, whose field names kstore keeps (docs/cli.md): command -> line types (None: all).
KAFKA_DEFINED = {"dump-segment": None, "metadata": None, "find": {"record"}}
SNAKE = re.compile(r"^[a-z0-9_.]+$")
LONG_TOPIC = "t" * 249  # Kafka's longest topic name


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("convention")
    shutil.copytree(WRITTEN, root / "d")
    shutil.copytree(WRITTEN, root / "e")
    for name in ("__consumer_offsets-0", "__transaction_state-0", "transactional-0"):
        shutil.copytree(CORPUS / "logs" / name, root / "internal" / name)
    shutil.copytree(WRITTEN / "t-0", root / "long" / f"{LONG_TOPIC}-0")
    return root


def text_argvs(root: Path) -> dict:
    """Every command of test_json_lines with a table or a summary, without --json."""
    out = {name: [a for a in argv if a != "--json"] for name, argv in argvs(root).items()
           if name not in ("dump-segment", "find", "metadata")}
    return out


@pytest.fixture
def terminal(monkeypatch) -> Iterator[None]:
    """stdout taken for an 80-column terminal by every command module (without progress bars: transient, their
    cursor movements are no part of a result)."""
    for name, module in list(sys.modules.items()):
        if name.startswith("kstore_cli.commands"):
            for attr in ("is_tty", "_is_tty"):
                if callable(getattr(module, attr, None)):
                    monkeypatch.setattr(module, attr, lambda: True)
            if callable(getattr(module, "byte_progress", None)):
                monkeypatch.setattr(module, "byte_progress", lambda show, label, total: (None, None))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NO_COLOR", raising=False)
    yield


def _run(argv: List[str]):
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code in (0, 1), (argv, result.output, result.exception)
    return result


def _keys(obj, where: str) -> Iterator[str]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield f"{where}.{key}"
            if key not in ("config", "settings"):  # keyed by Kafka's config names (retention.ms, ...)
                yield from _keys(value, f"{where}.{key}")
    elif isinstance(obj, list):
        for value in obj:
            yield from _keys(value, f"{where}[]")


@pytest.mark.parametrize("name", sorted(argvs(Path("/x"))))
def test_json_keys_are_snake_case(data, name) -> None:
    kafka = KAFKA_DEFINED.get(name, set())
    bad = []
    for line in _run(argvs(data)[name]).stdout.splitlines():
        row = json.loads(line)
        if kafka is None or row["type"] in kafka:
            continue
        bad += [k for k in _keys(row, row["type"]) if not SNAKE.match(k.rsplit(".", 1)[-1])]
    assert not bad, f"{name}: {sorted(set(bad))}"


@pytest.mark.parametrize("name", sorted(text_argvs(Path("/x"))))
def test_pipe_has_no_escape_and_no_trailing_space(data, name) -> None:
    out = _run(text_argvs(data)[name]).stdout
    assert "\x1b" not in out
    assert [line for line in out.splitlines() if line != line.rstrip()] == []


@pytest.mark.parametrize("name", sorted(text_argvs(Path("/x"))))
def test_terminal_no_trailing_space_and_no_escape_with_no_color(data, name, terminal, monkeypatch) -> None:
    out = _run(text_argvs(data)[name]).stdout
    assert [line for line in out.splitlines() if line != line.rstrip(" ")] == []
    monkeypatch.setenv("NO_COLOR", "1")
    out = _run(text_argvs(data)[name]).stdout
    assert "\x1b" not in out  # bold and italic included
    assert [line for line in out.splitlines() if line != line.rstrip()] == []


@pytest.mark.parametrize("argv", [  # inspect never cuts a name: too narrow for its table, a block of lines
    ["verify-index"], ["doctor"], ["rebuild-index", "--dry-run"],
    ["retain", "--dry-run", "--retention-ms", "1000"], ["compact", "--dry-run", "--policy", "compact"],
    ["convert-format", "--dry-run", "--to-magic", "1"],
], ids=lambda argv: argv[0])
def test_long_topic_names_fold_at_80_columns(data, argv, terminal, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out = _run(argv + [str(data / "long")]).stdout
    assert out.count("t") >= len(LONG_TOPIC)
    assert max(len(line) for line in out.splitlines()) <= 80, out


def test_groups_table_folds_and_pipe_is_tsv(capsys, monkeypatch) -> None:
    columns = (_render.Column("topic"), _render.Column("partition"), _render.Column("bytes", "bytes"))
    monkeypatch.setenv("COLUMNS", "80")
    _render.print_table("group g", columns, [(LONG_TOPIC, 0, 1536)], tty=True)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80 and "1.5 KiB" in out
    _render.print_table(None, columns, [(LONG_TOPIC, 0, 1536)], tty=False)
    assert capsys.readouterr().out == f"topic\tpartition\tbytes\n{LONG_TOPIC}\t0\t1536\n"


@pytest.mark.parametrize("argv, human, raw", [
    (["retain", "--dry-run", "--retention-ms", "1000"], re.compile(r"\d(\.\d)? (B|KiB|MiB)\b"), " bytes"),
    (["recover", "--dry-run"], re.compile(r"segment\(s\), \d+(\.\d)? (B|KiB|MiB);"), " bytes;"),
    (["convert-format", "--dry-run", "--to-magic", "1"], re.compile(r"\d(\.\d)? (B|KiB|MiB) -> "), " bytes -> "),
    (["inspect"], re.compile(r"\d(\.\d)? (B|KiB|MiB)"), None),
], ids=lambda v: v[0] if isinstance(v, list) else "")
def test_human_units_on_a_terminal_raw_in_a_pipe(data, argv, human, raw, terminal, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    path = str(data / ("long" if argv[0] == "retain" else "d"))  # d's high watermark keeps every segment
    assert human.search(_run(argv + [path]).stdout)
    monkeypatch.undo()
    piped = _run(argv + [path]).stdout
    assert not human.search(piped)
    if raw:
        assert raw in piped


def test_spark_export_summary_units() -> None:
    from kstore_cli.commands._render import human_bytes
    from kstore_cli.spark.export import ExportSummary

    summary = ExportSummary()
    summary.records, summary.bytes_in, summary.parquet_bytes, summary.output = 10, 3 << 20, 1536, "out"
    assert "3.0 MiB in, 1.5 KiB of Parquet out" in summary.text(size=human_bytes)
    assert f"{3 << 20} bytes in, 1536 Parquet bytes out" in summary.text()
    keys = summary.to_dict()
    assert all(SNAKE.match(k) for k in keys), keys


def test_units() -> None:
    assert _render.human_duration(896 * 86_400_000) == "896 d"
    assert _render.human_duration(5_400_000) == "1.5 h" and _render.human_duration(250) == "250 ms"
    assert _render.iso_time(1795870800000) == "2026-11-28T13:00:00Z"
    assert _render.iso_time(1795870800123) == "2026-11-28T13:00:00.123Z"
    assert _render.cell(1 << 30, "bytes", human=True) == "1.0 GiB" and _render.cell(1 << 30, "bytes") == str(1 << 30)
    assert _render.cell(None) == "-"
