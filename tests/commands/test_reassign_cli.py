"""kstore reassign --generate on the command line: the tool's two headed JSON lines, parsed as
ReassignPartitionsCommand parses them; the partitions no reassignment restores on stderr, exit 1; --brokers."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from kstore_cli.cli import main
from tests.operations.test_reassign import cluster, parse_reassignment  # noqa: F401 - the fixture


class Run(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def run(capsys):
    """`kstore reassign ARGS` through the real entry point (errors mapped to lines and exit codes)."""
    def invoke(*args: str) -> Run:
        with pytest.raises(SystemExit) as exit_info:
            main(["reassign", *args])
        out, err = capsys.readouterr()
        return Run(exit_info.value.code or 0, out, err)
    return invoke


def test_cli_output_parses_as_kafkas_tool_parses_it(cluster, run):  # noqa: F811
    root, _sizes = cluster
    result = run("--generate", str(root))
    assert result.exit_code == 1  # lost-0 and empty-0 cannot be restored
    lines = result.stdout.split("\n")
    assert lines[0] == "Current partition replica assignment" and lines[2] == ""
    assert lines[3] == "Proposed partition reassignment configuration" and lines[5] == ""
    current, proposed = parse_reassignment(lines[1]), parse_reassignment(lines[4])
    assert current == {("orders", 0): [1, 2, 3], ("orders", 1): [2, 3, 4]}
    assert proposed[("orders", 0)] == [2, 1, 4] and set(proposed) == set(current)
    assert lines[4].startswith('{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,1,4],'
                               '"log_dirs":["any","any","any"]}')
    assert "kstore: lost-0: replicas [3]: every replica (3) is on a lost broker" in result.stderr
    assert "to copy" in result.stderr


def test_brokers_option_is_checked(cluster, run):  # noqa: F811
    root, _sizes = cluster
    result = run("--generate", "--brokers", "1,1", str(root))
    assert result.exit_code == 2 and "duplicate entries: 1" in result.stderr
    result = run(str(root))
    assert result.exit_code == 2 and "give --generate" in result.stderr
    result = run("--generate", "--topics", "orders", "--brokers", "1,2,4,5", str(root))
    assert result.exit_code == 0, result.stderr
    assert parse_reassignment(result.stdout.split("\n")[4])[("orders", 0)] == [2, 1, 4]


def test_no_metadata_is_a_usage_error(tmp_path, run):
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(b"")
    result = run("--generate", str(tmp_path))
    assert result.exit_code == 2 and "no __cluster_metadata-0" in result.stderr


def test_nothing_to_reassign(cluster, run):  # noqa: F811
    root, _sizes = cluster
    result = run("--generate", "--topics", "orders", "--brokers", "1,2,3,4,5", str(root))
    assert result.exit_code == 0
    assert result.stdout.split("\n")[4] == '{"version":1,"partitions":[]}'
    assert "nothing to reassign: every replica is on a live broker" in result.stderr
