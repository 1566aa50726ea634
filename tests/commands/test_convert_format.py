"""kstore convert-format through Click's runner, and real processes for the lock and the crash test
(SIGKILL at every file operation of an in-place conversion, then a rerun)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.errors import KstoreError, LogDirLockedError
from kstore_cli.log import fileops
from kstore_cli.log.logdir import Partition
from kstore_cli.record.reader import read_batches
from kstore_cli.log.snapshot import ProducerEntry, build_snapshot, read_snapshot
from tests.commands.test_rebuild_index import dir_hash
from tests.conftest import CORPUS, ROOT, lock_held
from tests.operations.test_convert import (
    IMPLS,
    expected_after,
    kstore_records,
    library_records,
    make_v2_partition,
    source_records,
)

_register_commands()
LEFTOVER = (".cleaned", ".swap", ".deleted", fileops.TMP_SUFFIX)


def run(*args: str):
    fileops.arm_crash(None)
    return CliRunner().invoke(cli, ["convert-format", *args])


def status(result) -> int:
    """The exit status cli.main gives (it maps KstoreError subclasses to their codes)."""
    if isinstance(result.exception, KstoreError):
        return int(result.exception.exit_status)
    return result.exit_code


def text(result) -> str:
    return result.output + (str(result.exception) if isinstance(result.exception, KstoreError) else "")


def test_help_has_an_example() -> None:
    result = CliRunner().invoke(cli, ["convert-format", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "kstore convert-format --to-magic 2" in result.output


def test_where_the_result_goes_must_be_said(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs" / "legacy-v1-0", tmp_path / "legacy-v1-0")
    result = run("--to-magic", "2", str(tmp_path / "legacy-v1-0"))
    assert status(result) == 2 and "--output-dir" in text(result)
    result = run("--to-magic", "2", "--in-place", "--output-dir", str(tmp_path / "o"), str(tmp_path / "legacy-v1-0"))
    assert status(result) == 2
    result = run("--to-magic", "1", "--compression", "zstd", "--dry-run", str(tmp_path / "legacy-v1-0"))
    assert status(result) == 2 and "zstd" in text(result)


def test_output_dir_mirrors_a_data_dir_and_passes_verify_and_rebuild(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs", tmp_path / "logs")
    before = dir_hash(tmp_path / "logs")
    result = run("--to-magic", "2", "--compression", "zstd", "--json", "--output-dir", str(tmp_path / "out"),
                 str(tmp_path / "logs"))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    summary = rows[-1]
    assert summary["type"] == "summary" and summary["partitions"] == len(rows) - 1 == 20
    assert summary["records_in"] == summary["records_out"] and summary["losses"] == {}
    assert summary["bytes_out"] < summary["bytes_in"]
    assert dir_hash(tmp_path / "logs") == before  # the input is only read
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "logs" / name).read_bytes()
    assert (tmp_path / "out" / "v2-none-0" / "partition.metadata").exists()
    verify = CliRunner().invoke(cli, ["verify-index", "--quiet", str(tmp_path / "out")])
    assert verify.exit_code == 0, verify.output
    rebuild = CliRunner().invoke(cli, ["rebuild-index", "--dry-run", "--json", str(tmp_path / "out")])
    assert rebuild.exit_code == 0
    assert {json.loads(line)["status"] for line in rebuild.output.splitlines()} == {"unchanged"}
    again = run("--to-magic", "2", "--output-dir", str(tmp_path / "out"), str(tmp_path / "logs" / "v2-none-0"))
    assert status(again) == 2 and "inside the Kafka data dir" in text(again)  # out holds checkpoints now
    shutil.copytree(tmp_path / "out" / "v2-none-0", tmp_path / "plain" / "v2-none-0")
    again = run("--to-magic", "2", "--output-dir", str(tmp_path / "plain"), str(tmp_path / "logs" / "v2-none-0"))
    assert status(again) == 2 and "already holds segments" in text(again)


def test_text_summary_reports_losses_and_strict_refuses(tmp_path: Path) -> None:
    part = make_v2_partition(tmp_path / "data" / "gen-v2-0")
    src_records = source_records(part)
    before = dir_hash(tmp_path / "data")
    refused = run("--to-magic", "1", "--strict", "--in-place", str(part))
    assert status(refused) == 1 and "--strict" in text(refused)
    assert dir_hash(tmp_path / "data", with_lock=False) == before
    dry = run("--to-magic", "0", "--compression", "lz4", "--dry-run", str(part))
    assert dry.exit_code == 0
    assert "would convert" in dry.output and "control_batches" in dry.output and "timestamps" in dry.output
    assert dir_hash(tmp_path / "data", with_lock=False) == before
    done = run("--to-magic", "1", "--compression", "snappy", "--in-place", str(part))
    assert done.exit_code == 0, done.output
    assert "3 control_batches" in done.output and "lost:" in done.output
    assert kstore_records(part) == expected_after(src_records, 1)
    rerun = run("--to-magic", "1", "--compression", "snappy", "--in-place", "--json", str(part))
    assert json.loads(rerun.output.splitlines()[0])["status"] == "unchanged"


def test_lock_held_by_a_broker_is_refused_unless_forced(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs" / "legacy-v0-0", tmp_path / "data" / "legacy-v0-0")
    part = tmp_path / "data" / "legacy-v0-0"
    with lock_held(tmp_path / "data"):
        before = dir_hash(tmp_path / "data")
        refused = run("--to-magic", "2", "--in-place", str(part))
        assert isinstance(refused.exception, LogDirLockedError)
        assert dir_hash(tmp_path / "data") == before
        forced = run("--to-magic", "2", "--in-place", "--force", str(part))
        assert forced.exit_code == 0, forced.output
        assert {b.magic for s in Partition(str(part)).segments for b in read_batches(s.log)} == {2}



def test_every_data_dir_is_locked_before_any_changes(tmp_path: Path) -> None:
    # Two data dirs, the second held by a broker: the first must not be converted either.
    first = tmp_path / "a" / "legacy-v0-0"
    second = tmp_path / "b" / "legacy-v0-0"
    shutil.copytree(CORPUS / "logs" / "legacy-v0-0", first)
    shutil.copytree(CORPUS / "logs" / "legacy-v0-0", second)
    before = dir_hash(tmp_path / "a", with_lock=False)
    with lock_held(tmp_path / "b"):
        refused = run("--to-magic", "2", "--in-place", str(first), str(second))
        assert isinstance(refused.exception, LogDirLockedError)
    assert dir_hash(tmp_path / "a", with_lock=False) == before


# --------------------------------------------------------------------------- crash test


def crash_partition(directory: Path) -> Path:
    """Two segments with transactions, markers (one at the very end), headers, an empty batch,
    and a producer snapshot: a down-conversion drops markers, keeps the log end with an empty
    segment, and empties the snapshot -- every kind of file operation."""
    part = make_v2_partition(directory / "gen-v2-0")
    (part / "00000000000000000034.snapshot").write_bytes(build_snapshot([ProducerEntry(11, 2, 1, 33, 0, 0, 4, -1)]))
    return part


ARGS = ["--to-magic", "1", "--compression", "gzip", "--in-place"]


def test_sigkill_at_every_file_operation_then_rerun(tmp_path: Path) -> None:
    reference = crash_partition(tmp_path / "reference")
    source = source_records(reference)
    fileops.arm_crash(None)
    result = CliRunner().invoke(cli, ["convert-format", *ARGS, str(reference)])
    assert result.exit_code == 0, result.output
    steps = fileops.operation_count()
    assert steps > 30
    want_records = expected_after(source, 1)
    assert kstore_records(reference) == want_records
    want_files = {n: (reference / n).read_bytes() for n in os.listdir(reference) if n.endswith((".log", ".index", ".timeindex", ".txnindex"))}
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def crash_at(n: int):
        work = crash_partition(tmp_path / f"crash-{n}")
        env_n = dict(env, KSTORE_CRASH_AT=str(n))
        proc = subprocess.run([sys.executable, "-m", "kstore_cli", "convert-format", *ARGS, str(work)],
                              env=env_n, capture_output=True, text=True)
        return n, work, proc

    with ThreadPoolExecutor(max_workers=2) as pool:
        crashed = list(pool.map(crash_at, range(1, steps + 1)))
    left_behind = 0
    for n, work, proc in crashed:
        assert proc.returncode == -9, (n, proc.returncode, proc.stderr)
        left_behind += any(x.endswith(LEFTOVER) for x in os.listdir(work))
        rerun = run(*ARGS, str(work))
        assert rerun.exit_code == 0, (n, rerun.output)
        names = os.listdir(work)
        assert not [x for x in names if x.endswith(LEFTOVER)], (n, names)
        got = kstore_records(work)
        assert got == want_records, n  # every record exactly once
        assert {x: (work / x).read_bytes() for x in names if x.endswith((".log", ".index", ".timeindex", ".txnindex"))} \
            == want_files, n
        assert all(not read_snapshot(work / x).producers for x in names if x.endswith(".snapshot"))
        verify = CliRunner().invoke(cli, ["verify-index", "--quiet", str(work)])
        assert verify.exit_code == 0, (n, verify.output)
    assert left_behind > steps // 2  # most crash points really left an interrupted replacement behind
    # and the libraries read the result
    want_data = expected_after([s for s in source if not s[1]], 1)
    for impl in IMPLS:
        assert library_records(impl, crashed[-1][1]) == want_data
    # one more step than there are operations: the run completes
    n, work, proc = crash_at(steps + 1)
    assert proc.returncode == 0, proc.stderr


def test_a_batch_whose_crc_fails_is_refused_not_rewritten(tmp_path: Path) -> None:
    """A batch that still decodes but fails its CRC is refused (file and byte named, exit 1): converting it
    would give damaged bytes a fresh, valid CRC. Nothing is written; the input is unchanged."""
    part = make_v2_partition(tmp_path / "data" / "gen-v2-0")
    log = sorted(part.glob("*.log"))[0]
    raw = bytearray(log.read_bytes())
    at = raw.index(b"value-1")  # inside the first (uncompressed) batch's record values: still decodes
    raw[at] ^= 0x01
    log.write_bytes(bytes(raw))
    before = dir_hash(part)
    for args in (["--dry-run"], ["--output-dir", str(tmp_path / "out")]):
        result = run(str(part), "--to-magic", "2", "--compression", "zstd", *args)
        assert status(result) == 1, text(result)
        message = str(result.exception)
        assert "\n" not in message and "Record is corrupt" in message
        assert f"{log}" in message and "at byte 0" in message
        assert dir_hash(part) == before
    assert not list((tmp_path / "out").rglob("*.log"))


def test_a_partial_trailing_batch_is_refused_not_dropped(tmp_path: Path) -> None:
    """A segment whose last batch was cut short (the framing stops before it) is refused, file and byte of
    the partial batch named, exit 1, in every mode: converting would drop those bytes without a word.
    Nothing is written; the input is unchanged; recover (which quarantines the bytes) is named."""
    part = make_v2_partition(tmp_path / "data" / "gen-v2-0")
    log = sorted(part.glob("*.log"))[0]
    positions = [(b.position, b.size) for b in read_batches(str(log))]
    last_pos, last_size = positions[-1]
    log.write_bytes(log.read_bytes()[: last_pos + last_size - 5])
    before = dir_hash(part)
    for args in (["--dry-run"], ["--output-dir", str(tmp_path / "out")], ["--in-place"]):
        result = run(str(part), "--to-magic", "2", "--compression", "zstd", *args)
        assert status(result) == 1, text(result)
        message = str(result.exception)
        assert "\n" not in message and f"{log} at byte {last_pos}: {last_size - 5} bytes at the end" in message
        assert "kstore recover" in message
        assert dir_hash(part) == before
    assert not list((tmp_path / "out").rglob("*.log"))
    assert not (tmp_path / "out" / part.name).exists()
    assert not [f for f in part.iterdir() if f.name.endswith(LEFTOVER)]


def test_a_refused_conversion_removes_only_the_directory_it_made(tmp_path: Path) -> None:
    """A conversion refused into --output-dir removes the partition directory it created (empty), and
    keeps one that was there before it (an operator's, even empty)."""
    part = make_v2_partition(tmp_path / "data" / "gen-v2-0")
    for fresh in (True, False):
        out = tmp_path / ("fresh" if fresh else "existing")
        if not fresh:
            (out / part.name).mkdir(parents=True)
        result = run(str(part), "--to-magic", "1", "--strict", "--output-dir", str(out))
        assert status(result) == 1, text(result)
        assert (out / part.name).exists() is not fresh
    assert not list((tmp_path / "existing" / part.name).iterdir())


def test_jobs_option_changes_no_output_byte(tmp_path: Path) -> None:
    """--jobs 1 (no threads) and -j 2 write the same files and say the same; --jobs 0 is a usage error."""
    part = make_v2_partition(tmp_path / "data" / "gen-v2-0")
    said = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out{jobs}"
        result = run(str(part), "--to-magic", "1", "--compression", "gzip", "--json", "-j", jobs, "--output-dir", str(out))
        assert status(result) == 0, text(result)
        said.append([{k: v for k, v in json.loads(line).items() if k != "destination"} for line in result.output.splitlines()])
    assert dir_hash(tmp_path / "out1" / "gen-v2-0") == dir_hash(tmp_path / "out2" / "gen-v2-0")
    assert said[0] == said[1] and said[0][-1]["type"] == "summary"
    assert status(run(str(part), "--to-magic", "2", "--jobs", "0", "--dry-run")) == 2
