"""--traceback / KSTORE_TRACEBACK: the traceback is shown AND the documented exit code is kept (issue 15)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli import cli as cli_module
from kstore_cli.cli import main
from tests.conftest import ROOT
from tests.parsers.metadata_factory import LogWriter

TRACEBACK = "Traceback (most recent call last)"


def _files(tmp_path: Path) -> dict:
    part = tmp_path / "t-0"
    part.mkdir()
    w = LogWriter()
    w.batch([(b"k", b"v")])
    good = part / "00000000000000000000.log"
    good.write_bytes(bytes(w.data))
    bad = part / "00000000000000000001.log"
    w = LogWriter(1)
    w.batch([(None, b"v")])  # with --offsets-decoder: Kafka's "message had a missing key" abort
    bad.write_bytes(bytes(w.data))
    no_dot = part / "leader-epoch-checkpoint"
    no_dot.write_text("0\n0\n")
    return {"good": good, "bad": bad, "no_dot": no_dot, "missing": part / "00000000000000000099.log"}


#: (file, exit code): 1 data problems, 2 usage, 3 unreadable
CASES = [("bad", 1), ("no_dot", 2), ("missing", 3)]


def _in_process(args: List[str], monkeypatch, env: str = "") -> Tuple[int, str]:
    if env:
        monkeypatch.setenv("KSTORE_TRACEBACK", env)
    else:
        monkeypatch.delenv("KSTORE_TRACEBACK", raising=False)
    runner = CliRunner()
    with runner.isolation() as (_, err, _mixed):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stderr.flush()
        return code, err.getvalue().decode()


@pytest.mark.parametrize("which, code", CASES)
@pytest.mark.parametrize("how", ["flag", "env", "none"])
def test_traceback_keeps_the_exit_code(tmp_path, monkeypatch, which: str, code: int, how: str) -> None:
    path = str(_files(tmp_path)[which])
    args = (["--traceback"] if how == "flag" else []) + ["dump-segment", "--offsets-decoder", path]
    got, err = _in_process(args, monkeypatch, env="1" if how == "env" else "")
    assert got == code, err
    assert err.rstrip().splitlines()[-1].startswith("kstore: error: ")
    assert (TRACEBACK in err) == (how != "none")


def test_traceback_flag_does_not_leak_into_the_next_run(tmp_path, monkeypatch) -> None:
    files = _files(tmp_path)
    assert _in_process(["--traceback", "dump-segment", str(files["missing"])], monkeypatch)[0] == 3
    code, err = _in_process(["dump-segment", str(files["missing"])], monkeypatch)
    assert code == 3 and TRACEBACK not in err
    assert "KSTORE_TRACEBACK" not in os.environ
    code, err = _in_process(["dump-segment", str(files["missing"])], monkeypatch, env="0")
    assert code == 3 and TRACEBACK not in err


def test_internal_error_with_traceback_exits_1(tmp_path, monkeypatch) -> None:
    import kstore_cli.dump.dumplog as dumplog

    def boom(*_a, **_k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(dumplog, "dump_files", boom)
    path = str(_files(tmp_path)["good"])
    code, err = _in_process(["--traceback", "dump-segment", path], monkeypatch)
    assert code == 1 and TRACEBACK in err and "RuntimeError: a bug" in err
    assert err.rstrip().splitlines()[-1].startswith("kstore: internal error: RuntimeError: a bug")
    code, err = _in_process(["dump-segment", path], monkeypatch)
    assert code == 1 and TRACEBACK not in err


def test_real_process_keeps_exit_codes_with_traceback(tmp_path) -> None:
    files = _files(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "KSTORE_TRACEBACK"}
    for which, code in CASES:
        for extra_env, flag in (({}, ["--traceback"]), ({"KSTORE_TRACEBACK": "1"}, [])):
            proc = subprocess.run([sys.executable, "-m", "kstore_cli", *flag, "dump-segment", "--offsets-decoder",
                                   str(files[which])],
                                  capture_output=True, text=True, cwd=ROOT, env={**env, **extra_env})
            assert proc.returncode == code, (which, proc.stderr)
            assert TRACEBACK in proc.stderr and "kstore: error: " in proc.stderr


def test_traceback_state_is_not_in_the_environment_after_the_callback() -> None:
    assert cli_module.traceback_wanted() is bool(os.environ.get("KSTORE_TRACEBACK", "") not in ("", "0"))
