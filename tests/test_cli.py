"""The root command: help, version, the lazy command registry, one-line usage errors, shell
completion, and that every command documents itself with an example."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import cli, main
from kstore_cli.commands import COMMANDS, TABLE

ROOT = Path(__file__).resolve().parent.parent


def test_root_help_has_example_and_lists_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output
    listed = result.output.split("Commands:", 1)[1].splitlines()
    for command in COMMANDS:
        # each command on its own line with the start of its own one-line help
        line = next(line for line in listed if line.split()[:1] == [command.name])
        assert command.get_short_help_str(1000)[:20] in line


def test_every_module_under_commands_is_in_the_registry() -> None:
    modules = {p.stem for p in (ROOT / "kstore_cli" / "commands").glob("*.py") if not p.stem.startswith("_")}
    assert modules == {entry.module for entry in TABLE}
    assert len({entry.name for entry in TABLE}) == len(TABLE)


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: e.name)
def test_registry_line_matches_the_command(entry) -> None:
    """The table's name and one-line help are what the command itself says (its docstring)."""
    from kstore_cli.commands import load

    command = load(entry.name)
    assert command.name == entry.name
    assert entry.short_help == command.get_short_help_str(1000)


def _imported_by(argv: list, env: dict = None) -> tuple:
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['kstore', *{argv!r}]\n"
        "try:\n    runpy.run_module('kstore_cli', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        "mods = sorted(m for m in sys.modules if m.startswith('kstore_cli') or m.split('.')[0] in "
        "('rich', 'pyspark', 'pyarrow', 'crc32c', 'lz4', 'zstandard', 'snappy'))\n"
        "print('MODULES', ','.join(mods))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, **(env or {})))
    assert out.returncode == 0, out.stderr
    text, _, mods = out.stdout.rpartition("MODULES ")
    return text, set(mods.strip().split(",")) - {""}


def test_help_and_version_import_no_command_module_and_no_core() -> None:
    """The lazy group: listing commands and printing the version import no command module, nor the
    segment core, rich, pyspark or pyarrow; `dump-segment --help` imports dump-segment's only
    (and the shared options, no core)."""
    text, mods = _imported_by(["--help"])
    assert "spark-export" in text
    assert mods == {"kstore_cli", "kstore_cli.cli", "kstore_cli.errors", "kstore_cli.commands"}
    text, mods = _imported_by(["--version"])
    assert "record decoder:" in text
    assert mods == {"kstore_cli", "kstore_cli.cli", "kstore_cli.errors"}
    text, mods = _imported_by(["dump-segment", "--help"])
    assert "Example" in text
    assert {m for m in mods if m.startswith("kstore_cli.commands.")} == {"kstore_cli.commands.dump_segment",
                                                                        "kstore_cli.commands._options"}
    assert not any(m.startswith(("kstore_cli.record", "kstore_cli.log", "kstore_cli.operations")) for m in mods)


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


@pytest.mark.parametrize("policy", ["", "python", "native"])
def test_version_names_the_decoder_the_core_picks(policy) -> None:
    """--version finds the decoder without importing the core: it names the one decode.py loads."""
    code = (
        "import sys, runpy\n"
        "sys.argv = ['kstore', '--version']\n"
        "try:\n    runpy.run_module('kstore_cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "for name in ('decode', 'encode', 'record_filter'):\n"
        "    try:\n        m = __import__('kstore_cli.record.' + name, fromlist=['BACKEND'])\n"
        "        print('CORE', m.BACKEND)\n"
        "    except ImportError:\n        print('CORE none')\n"
        "from kstore_cli.spark.avro_columns import _native_module\n"
        "print('CORE', 'python' if _native_module() is None else 'native')\n"
    )
    env = dict(os.environ, KSTORE_DECODER=policy)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    version, *cores = out.stdout.splitlines()
    named = version.split(" (", 1)[1].rstrip(")").split("; ")
    assert [n.split(": ", 1)[0] for n in named] == ["record decoder", "record encoder", "cleaner", "Avro column reader"]
    assert [n.split(": ", 1)[1].split(",")[0] for n in named] == [c.split()[1] for c in cores]


def _core_modules() -> list:
    """Every module of the core: the whole package but the CLI layer (cli.py, __main__, commands/)."""
    import pkgutil

    import kstore_cli

    found = []
    for info in pkgutil.walk_packages(kstore_cli.__path__, "kstore_cli."):
        name = info.name
        if name in ("kstore_cli.cli", "kstore_cli.__main__") or name.startswith("kstore_cli.commands"):
            continue
        found.append(name)
    return found


def test_core_does_not_import_click_or_rich() -> None:
    modules = _core_modules()
    assert "kstore_cli.cleaner.cleaner" in modules and "kstore_cli.cluster.metadata_image" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('click', 'rich')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_unknown_command_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "kstore_cli", "no-such-command"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr == "kstore: error: No such command 'no-such-command' (see 'kstore --help')\n"


def _usage_error_argv():
    """For every command, a bad option, a bad value or a missing argument."""
    for entry in TABLE:
        yield [entry.name, "--no-such-option"]
        yield [entry.name]  # a missing argument (dump-segment: Kafka's 'Missing required argument "[files]"')
    yield ["retain", "--retention-ms", "abc", "x"]
    yield ["find", "/etc/hostname", "--offset", "1"]  # a file where a partition dir is expected
    yield ["--no-such-root-option"]


@pytest.mark.parametrize("argv", list(_usage_error_argv()), ids=" ".join)
def test_usage_errors_are_one_line_with_exit_2(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("kstore: error: "), err
    assert "Usage:" not in err and "Try " not in err
    command = argv[0] if not argv[0].startswith("-") else None
    if command:
        assert err.startswith(f"kstore: error: {command}: ")
        assert err.endswith(f"(see 'kstore {command} --help')\n")


#: Every command given a path that does not exist (with its other required options).
_MISSING_PATH_ARGV = {
    "dump-segment": ["/no/such/dir/00000000000000000000.log"],
    "rebuild-index": ["/no/such/dir"], "verify-index": ["/no/such/dir"], "doctor": ["/no/such/dir"],
    "find": ["/no/such/dir", "--offset", "1"], "inspect": ["/no/such/dir"],
    "convert-format": ["/no/such/dir", "--to-magic", "2", "--dry-run"], "retain": ["/no/such/dir", "--dry-run"],
    "compact": ["/no/such/dir", "--dry-run"], "replicas": ["/no/such/dir", "/no/such/dir2"],
    "merge": ["--output-dir", "/tmp/kstore-never-made", "/no/such/dir", "/no/such/dir2"],
    "recover": ["/no/such/dir"], "repair": ["/no/such/dir"], "salvage": ["/no/such/dir", "--output-dir", "/tmp/kstore-never-made"],
    "restore": ["/no/such/dir"], "spark-export": ["/no/such/dir", "--output", "/tmp/kstore-never-made"],
    "metadata": ["/no/such/dir"], "transactions": ["/no/such/dir"], "groups": ["/no/such/dir"],
    "log-dirs": ["/no/such/dir"], "reassign": ["--generate", "/no/such/dir"],
    "schemas": ["/no/such/dir"],
}


def test_every_command_has_a_missing_path_case() -> None:
    assert sorted(_MISSING_PATH_ARGV) == sorted(entry.name for entry in TABLE)


@pytest.mark.parametrize("command", sorted(_MISSING_PATH_ARGV))
def test_a_missing_path_is_one_line_and_exit_3(command, capsys) -> None:
    """A path that is not there is a file that cannot be opened (exit 3) in every command, never a usage error."""
    with pytest.raises(SystemExit) as exit_info:
        main([command, *_MISSING_PATH_ARGV[command]])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 3, err
    assert err.count("\n") == 1 and err.startswith("kstore: error: /no/such/dir"), err
    assert "no such" in err
    assert not os.path.exists("/tmp/kstore-never-made")


def test_usage_error_through_a_real_process() -> None:
    out = subprocess.run([sys.executable, "-m", "kstore_cli", "dump-segment", "--deep"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == ("kstore: error: dump-segment: No such option '--deep'. Did you mean '--help'? "
                          "(see 'kstore dump-segment --help')\n")


def _complete(words: str, cword: int, capsys) -> str:
    env = {"_KSTORE_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main([])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_bash_completion_script(capsys) -> None:
    os.environ["_KSTORE_COMPLETE"] = "bash_source"
    try:
        with pytest.raises(SystemExit):
            main([])
    finally:
        del os.environ["_KSTORE_COMPLETE"]
    script = capsys.readouterr().out
    assert "_kstore_completion()" in script and "complete -o nosort -F _kstore_completion kstore" in script
    assert "_KSTORE_COMPLETE=bash_complete" in script


def test_completion_of_command_names_and_options(capsys) -> None:
    assert _complete("kstore ", 1, capsys).split() == [f"plain,{e.name}" for e in TABLE]
    assert _complete("kstore re", 1, capsys).split() == [f"plain,{e.name}" for e in TABLE if e.name.startswith("re")]
    assert "plain,rebuild-index" in _complete("kstore reb", 1, capsys).split()
    options = _complete("kstore dump-segment --deep", 2, capsys).split()
    assert options == ["plain,--deep-iteration"]
    options = _complete("kstore verify-index --", 2, capsys).split()
    assert "plain,--json" in options and "plain,--help" in options


def test_completion_through_a_real_process() -> None:
    env = dict(os.environ, _KSTORE_COMPLETE="bash_complete", COMP_WORDS="kstore spark", COMP_CWORD="1")
    out = subprocess.run([sys.executable, "-m", "kstore_cli"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0 and out.stdout.split() == ["plain,spark-export"]
    env["_KSTORE_COMPLETE"] = "bash_source"
    out = subprocess.run([sys.executable, "-m", "kstore_cli"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.returncode == 0 and "complete -o nosort -F _kstore_completion kstore" in out.stdout


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
