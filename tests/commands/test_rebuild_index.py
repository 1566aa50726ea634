"""kstore rebuild-index through Click's runner, plus real processes for the lock."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.errors import LogDirLockedError
from tests.conftest import CORPUS, ROOT, lock_held

_register_commands()


def dir_hash(root: Path, *, with_lock: bool = True) -> str:
    """Names and contents of every file under root (optionally not the data dir's .lock, which
    taking the lock creates, as a broker does)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            if name == ".lock" and not with_lock:
                continue
            p = Path(dirpath) / name
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def copy_case(case: str, tmp_path: Path) -> Path:
    shutil.copytree(CORPUS / "recovery" / case / "input", tmp_path / "data")
    (name,) = os.listdir(tmp_path / "data")
    return tmp_path / "data" / name


def run(*args: str):
    return CliRunner().invoke(cli, ["rebuild-index", *args])


def test_rebuilds_missing_indexes_like_kafka_then_is_idempotent(tmp_path: Path) -> None:
    part = copy_case("missing-indexes", tmp_path)
    result = run("--index-interval-bytes", "100", str(part))
    assert result.exit_code == 0, result.output
    assert "rebuilt" in result.output
    expected = CORPUS / "recovery" / "missing-indexes" / "expected" / part.name
    for p in expected.iterdir():
        if p.suffix in (".index", ".timeindex"):
            assert (part / p.name).read_bytes() == p.read_bytes(), p.name
    before = dir_hash(tmp_path / "data")
    again = run("--json", "--index-interval-bytes", "100", str(part))
    assert again.exit_code == 0
    rows = [json.loads(line) for line in again.output.splitlines()]
    assert rows and all(r["status"] == "unchanged" for r in rows)
    assert dir_hash(tmp_path / "data") == before


def test_data_dir_path_covers_every_partition(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs", tmp_path / "logs")
    for p in (tmp_path / "logs" / "v2-none-0").glob("*.index"):
        p.unlink()
    result = run("--json", str(tmp_path / "logs"))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    partitions = {os.path.basename(r["partition"]) for r in rows}
    assert {"v2-none-0", "transactional-0", "legacy-v0-0"} <= partitions
    created = [r for r in rows if r["files"].get("index") == "create"]
    assert {r["segment"] for r in created} == {0, 174, 327, 497}
    for p in (CORPUS / "logs" / "v2-none-0").glob("*.index"):
        assert (tmp_path / "logs" / "v2-none-0" / p.name).read_bytes() == p.read_bytes()


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    part = copy_case("txn-rebuild-logloader", tmp_path)
    before = dir_hash(tmp_path)
    result = run("--dry-run", "--index-interval-bytes", "512", str(part))
    assert result.exit_code == 0, result.output
    assert "would rebuild" in result.output
    assert dir_hash(tmp_path) == before


def test_damaged_tail_is_reported_and_left_alone_by_default(tmp_path: Path) -> None:
    part = copy_case("crc-flip-last-batch", tmp_path)
    before = dir_hash(tmp_path, with_lock=False)
    result = run(str(part))
    assert result.exit_code == 1
    assert "corrupt-batch at byte 2006" in result.output
    assert "--truncate" in result.output
    assert dir_hash(tmp_path, with_lock=False) == before


def test_truncate_quarantines_the_cut_tail_outside_the_data_dir(tmp_path: Path) -> None:
    part = copy_case("truncated-half-batch", tmp_path)
    log = part / "00000000000000000388.log"
    original = log.read_bytes()
    result = run("--truncate", str(part))
    assert result.exit_code == 0, result.output
    assert log.stat().st_size == 3714
    tails = list((tmp_path / "kstore-quarantine" / part.name).glob("*/00000000000000000388.log.tail"))
    assert len(tails) == 1 and tails[0].read_bytes() == original[3714:]
    manifest = json.loads((tails[0].parent / "kstore-quarantine.json").read_text())
    assert manifest["validBytes"] == 3714 and manifest["problem"]["kind"] == "partial-batch"
    expected = CORPUS / "recovery" / "truncated-half-batch" / "expected" / part.name
    for name in ("00000000000000000388.index", "00000000000000000388.timeindex"):
        assert (part / name).read_bytes() == (expected / name).read_bytes()


def test_zero_tail_is_reported_as_such_and_truncate_trims_it(tmp_path: Path) -> None:
    part = copy_case("preallocated-zero-tail-logloader", tmp_path)
    result = run("--index-interval-bytes", "100", str(part))
    assert result.exit_code == 1
    assert "zero-filled preallocated tail (not corruption)" in result.output
    qdir = tmp_path / "q"
    result = run("--truncate", "--quarantine-dir", str(qdir), "--index-interval-bytes", "100", str(part))
    assert result.exit_code == 0, result.output
    assert (part / "00000000000000000089.log").stat().st_size == 3166
    assert not list(qdir.glob("*/*/*.tail"))  # zeros are not worth keeping


def test_a_log_file_path_rebuilds_only_that_segment_with_txn_state_replayed(tmp_path: Path) -> None:
    part = copy_case("txn-rebuild-logloader", tmp_path)
    result = run("--index-interval-bytes", "512", str(part / "00000000000000000399.log"))
    assert result.exit_code == 0, result.output
    expected = CORPUS / "recovery" / "txn-rebuild-logloader" / "expected" / part.name
    assert (part / "00000000000000000399.txnindex").read_bytes() == (expected / "00000000000000000399.txnindex").read_bytes()
    assert not (part / "00000000000000000337.index").exists()


def test_lock_held_in_process_is_refused(tmp_path: Path) -> None:
    import fcntl

    part = copy_case("missing-indexes", tmp_path)
    fd = os.open(tmp_path / "data" / ".lock", os.O_RDWR | os.O_CREAT)
    # lockf locks are per process: a child holds it so that our process sees it held.
    with lock_held(tmp_path / "data"):
        result = run(str(part))
        assert isinstance(result.exception, LogDirLockedError)
        assert not (part / "00000000000000000000.index").exists()
    os.close(fd)
    del fcntl


def test_real_process_lock_makes_the_real_command_refuse_unless_forced(tmp_path: Path) -> None:
    part = copy_case("missing-indexes", tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with lock_held(tmp_path / "data"):
        refused = subprocess.run([sys.executable, "-m", "kstore_cli", "rebuild-index", str(part)],
                                 capture_output=True, text=True, env=env)
        assert refused.returncode != 0
        assert "locked by a running process" in refused.stderr and "--force" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert not (part / "00000000000000000000.index").exists()
        forced = subprocess.run([sys.executable, "-m", "kstore_cli", "rebuild-index", "--force",
                                 "--index-interval-bytes", "100", str(part)], capture_output=True, text=True, env=env)
        assert forced.returncode == 0, forced.stderr
        assert (part / "00000000000000000000.index").exists()


def test_missing_path_is_unreadable() -> None:
    result = run("/no/such/dir")
    assert result.exception is not None and result.exception.exit_status == 3
