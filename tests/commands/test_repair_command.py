"""``kstore repair`` on the command line: one line per change, `would` in a dry run, JSON Lines, the exit codes."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli, main
from tests.conftest import CORPUS, lock_held

_register_commands()

LOGS = CORPUS / "logs"


def _dirs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, node in ((a, 1), (b, 2)):
        shutil.copytree(LOGS / "v2-none-0", d / "v2-none-0")
        (d / "meta.properties").write_text(f"version=1\nnode.id={node}\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\n")
    (a / "v2-none-0" / "partition.metadata").unlink()
    (a / "v2-none-0" / "leader-epoch-checkpoint").write_text("0\n1\n0\n")
    return a, b


def run(*argv):
    return CliRunner().invoke(cli, ["repair", *map(str, argv)], catch_exceptions=False)


def test_text_one_line_per_change_then_totals(tmp_path):
    a, b = _dirs(tmp_path)
    dry = run("--dry-run", a, b)
    assert dry.exit_code == 0
    lines = dry.output.splitlines()
    assert lines[-1] == "repair: 2 change(s) to make, 0 finding(s) not repairable"
    assert sorted(lines[:-1]) == [
        f"{a}/v2-none-0/leader-epoch-checkpoint: checkpoint-malformed: would rebuild leader-epoch-checkpoint from the "
        "batches: epoch 0 from 0, epoch 1 from 150, epoch 3 from 327",
        f"{a}/v2-none-0/partition.metadata: partition-metadata-missing: would write partition.metadata: topic ID "
        f"ZacG7npp8PBwZfzuq0OGqQ, from partition.metadata of {b}/v2-none-0"]
    assert not (a / "v2-none-0" / "partition.metadata").exists()
    done = run(a, b)
    assert done.exit_code == 0 and done.output.splitlines()[-1] == "repair: 2 change(s) made, 0 finding(s) not repairable"
    assert "(old file kept in " in done.output
    # the corpus partition's own leader-epoch-checkpoint, as Kafka wrote it
    assert (a / "v2-none-0" / "leader-epoch-checkpoint").read_bytes() == \
        (LOGS / "v2-none-0" / "leader-epoch-checkpoint").read_bytes()
    again = run(a, b)
    assert again.exit_code == 0 and again.output == "repair: 0 change(s) made, 0 finding(s) not repairable\n"


def test_json_and_a_finding_not_repairable_exits_1(tmp_path):
    a, _b = _dirs(tmp_path)
    result = CliRunner().invoke(cli, ["repair", "--json", str(a)])
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["type"] for r in rows] == ["change", "not_repaired", "summary"]
    assert rows[0]["action"] == "write" and rows[0]["check"] == "checkpoint-malformed"
    assert rows[1]["check"] == "partition-metadata-missing" and "no other copy" in rows[1]["reason"]
    assert rows[2] == {"type": "summary", "dry_run": False, "changes": 1, "not_repaired": 1, "other_findings": 0}
    assert f"kstore: {a}/v2-none-0/partition.metadata: not repaired (partition-metadata-missing): " in result.stderr


def test_a_locked_data_dir_exits_1_with_one_line(tmp_path, capsys):
    a, b = _dirs(tmp_path)
    with lock_held(a):
        with pytest.raises(SystemExit) as exit_info:
            main(["repair", str(a), str(b)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1 and "locked by a running process" in err
    assert not (a / "v2-none-0" / "partition.metadata").exists()
