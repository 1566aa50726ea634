"""One JSON Lines style: every command's --json writes one JSON object per line, each with a `type`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from tests.conftest import CORPUS, ROOT

_register_commands()
WRITTEN = ROOT / "fixtures" / "kafka-written" / "leader-4.0"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("jsonl")
    shutil.copytree(WRITTEN, root / "d")
    shutil.copytree(WRITTEN, root / "e")
    for name in ("__consumer_offsets-0", "__transaction_state-0", "transactional-0"):
        shutil.copytree(CORPUS / "logs" / name, root / "internal" / name)
    return root


def argvs(root: Path):
    d, part = root / "d", root / "d" / "t-0"
    return {
        "dump-segment": ["dump-segment", "--json", "--files", str(part / "00000000000000000000.log")],
        "inspect": ["inspect", "--json", str(d)],
        "verify-index": ["verify-index", "--json", str(d)],
        "doctor": ["doctor", "--json", str(d)],
        "find": ["find", "--json", "--offset", "5", str(part)],
        "rebuild-index": ["rebuild-index", "--dry-run", "--json", str(d)],
        "retain": ["retain", "--dry-run", "--json", "--retention-ms", "1000", str(d)],
        "compact": ["compact", "--dry-run", "--json", "--policy", "compact", str(part)],
        "convert-format": ["convert-format", "--dry-run", "--json", "--to-magic", "1", str(d)],
        "metadata": ["metadata", "--json", str(ROOT / "fixtures" / "kraft-cluster" / "full")],
        "groups": ["groups", "--json", "--offsets-partitions", "1", str(root / "internal")],
        "transactions": ["transactions", "--json", "--transaction-partitions", "1", str(root / "internal")],
        "replicas": ["replicas", "--json", str(root / "d"), str(root / "e")],
        "salvage": ["salvage", "--dry-run", "--json", str(part)],
        "recover": ["recover", "--dry-run", "--json", str(d)],
        "schemas": ["schemas", "--json", str(ROOT / "fixtures" / "schema-registry" / "registry")],
    }


@pytest.mark.parametrize("name", sorted(argvs(Path("/x"))))
def test_every_line_is_an_object_with_a_type(data, name) -> None:
    result = CliRunner().invoke(cli, argvs(data)[name])
    assert result.exit_code in (0, 1), (result.output, result.exception)
    lines = result.stdout.splitlines()
    assert lines, f"{name} --json wrote nothing"
    for line in lines:
        row = json.loads(line)
        assert isinstance(row, dict) and isinstance(row.get("type"), str), f"{name}: {line[:200]}"
