"""The root command: help, version, and that every command documents itself with an example."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.commands import COMMANDS

_register_commands()


def test_root_help_has_example_and_lists_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output
    for command in COMMANDS:
        assert command.name in result.output


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_command_has_help_with_an_example(command) -> None:
    result = CliRunner().invoke(cli, [command.name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert "kstore " + command.name in result.output


def test_version_names_the_decoder() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert "record decoder:" in result.output


def test_core_does_not_import_click_or_rich() -> None:
    code = (
        "import sys, kstore_cli, kstore_cli.segment, kstore_cli.codecs, kstore_cli.segment.index, "
        "kstore_cli.segment.snapshot, kstore_cli.segment.checkpoint, kstore_cli.parsers, kstore_cli.parsers.metadata, "
        "kstore_cli.parsers.coordinator, kstore_cli.parsers.txnlog, kstore_cli.parsers.remote\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('click', 'rich')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_unknown_command_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "kstore_cli", "no-such-command"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


def test_closed_pipe_exits_quietly_with_zero(tmp_path) -> None:
    from tests.conftest import GOLDEN

    log = str(GOLDEN / "inputs" / "multiseg-0" / "00000000000000000000.log")
    script = (
        f"{sys.executable} -m kstore_cli dump-segment --deep-iteration --print-data-log "
        + " ".join([log] * 300)
        + " | head -1; echo rc=${PIPESTATUS[0]}"
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert out.stdout.splitlines()[-1] == "rc=0"
    assert out.stderr == ""
