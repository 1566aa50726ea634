"""kstore recover: after it, Kafka's loader (no clean-shutdown marker) has nothing left to recover and reads
what its own recovery of the original reads: the same records, indexes and producer state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.log import fileops
from kstore_cli.log.logdir import Partition
from kstore_cli.operations.loader import advance_recovery_points, recover_partition
from kstore_cli.log.snapshot import read_snapshot
from tests.conftest import ROOT

_register_commands()
SOURCE = ROOT / "fixtures" / "kafka-written" / "leader-4.0"
RECOVERY_POINT = 354


def crashed(dst: Path) -> Path:
    """leader-4.0 as an unclean shutdown leaves it: the last roll (empty segment 1074 and its snapshot) never
    made it to disk, the active segment 697 has a torn write at its end and its preallocated offset index,
    and the recovery point checkpoint says 354."""
    shutil.copytree(SOURCE, dst)
    part = dst / "t-0"
    for name in ("00000000000000001074.log", "00000000000000001074.index", "00000000000000001074.timeindex",
                 "00000000000000001074.snapshot"):
        (part / name).unlink()
    with open(part / "00000000000000000697.log", "ab") as f:
        f.write(bytes(range(40)))
    index = part / "00000000000000000697.index"
    index.write_bytes(index.read_bytes() + bytes(10 * 1024 * 1024 - index.stat().st_size))
    (dst / "recovery-point-offset-checkpoint").write_text(f"0\n1\nt 0 {RECOVERY_POINT}\n")
    return part


@pytest.fixture(scope="module")
def recovered(oracle, tmp_path_factory):
    root = tmp_path_factory.mktemp("recover")
    kafka = crashed(root / "kafka")
    ours = crashed(root / "ours")
    result = recover_partition(str(ours), quarantine_root=str(root / "q"))
    advance_recovery_points(str(ours.parent), [result])
    after = root / "after"
    shutil.copytree(ours.parent, after)
    kafka_own, kafka_after = oracle.run_many([
        ("load-log", [str(kafka), "--unclean", "--recovery-point", str(RECOVERY_POINT)]),
        ("load-log", [str(after / "t-0"), "--unclean", "--recovery-point", str(result.log_end_offset)]),
    ])
    return result, ours, kafka, kafka_own, kafka_after


def test_kafka_has_nothing_left_to_recover(recovered) -> None:
    result, _ours, _kafka, _own, after = recovered
    summary = after.one("summary")
    assert summary["ok"] and summary["truncations"] == [] and summary["deleted_segments"] == []
    recovering = [m for m in summary["kafka_log_messages"] if "Recovering unflushed segment" in m]
    assert len(recovering) == 1 and f"segment {result.log_end_offset}. 0 recovered" in recovering[0], recovering
    assert all(i["identical_to_before"] for i in summary["indexes_after_load"]), summary["indexes_after_load"]


def test_the_same_records_and_log_end_as_kafkas_own_recovery(recovered) -> None:
    result, _ours, _kafka, own, after = recovered
    assert own.one("summary")["truncations"]  # Kafka's own recovery cut the torn write too
    assert result.cut_at is not None and result.log_end_offset == own.one("summary")["log_end_offset"]
    assert [(r["offset"], r.get("key"), r.get("value")) for r in after.of_type("record")] == \
        [(r["offset"], r.get("key"), r.get("value")) for r in own.of_type("record")]


def test_the_same_indexes_as_kafkas_own_recovery(recovered) -> None:
    _result, ours, kafka, _own, _after = recovered
    for suffix in (".index", ".timeindex", ".txnindex"):
        for theirs in sorted(kafka.glob("*" + suffix)):
            mine = ours / theirs.name
            if theirs.name.startswith("00000000000000001074"):
                continue  # Kafka's close() rolled nothing: our rolled active segment is the extra one
            assert mine.read_bytes() == theirs.read_bytes(), theirs.name


def test_the_same_producer_state_as_kafkas_own_recovery(recovered) -> None:
    result, ours, kafka, _own, _after = recovered
    snap = f"{result.log_end_offset:020d}.snapshot"
    theirs = {e.producer_id: e.pack() for e in read_snapshot(str(kafka / snap)).producers}
    mine = {e.producer_id: e for e in read_snapshot(str(ours / snap)).producers}
    assert {pid: mine[pid].pack() for pid in theirs} == theirs
    # Producers Kafka left out of its snapshot expired at its load (producer.id.expiration.ms, a day; the
    # fixture's clock is in 2023): no open transaction among them.
    assert all(mine[pid].current_txn_first_offset < 0 for pid in set(mine) - set(theirs))


def test_cli_jobs_and_dry_run(tmp_path) -> None:
    for n in range(3):
        part = crashed(tmp_path / f"d{n}")
        (part.parent / f"u-{n}").mkdir()
        shutil.copytree(part, part.parent / f"u-{n}", dirs_exist_ok=True)
    dry = CliRunner().invoke(cli, ["recover", "--dry-run", "--json", str(tmp_path / "d0")])
    rows = [json.loads(line) for line in dry.output.splitlines()]
    assert dry.exit_code == 1 and rows[-1]["type"] == "summary" and rows[-1]["cut"] == 2
    assert (tmp_path / "d0" / "recovery-point-offset-checkpoint").read_text().endswith(f"t 0 {RECOVERY_POINT}\n")
    done = CliRunner().invoke(cli, ["recover", "--jobs", "2", "--json", str(tmp_path / "d1"), str(tmp_path / "d2")])
    rows = [json.loads(line) for line in done.output.splitlines()]
    assert rows[-1]["partitions"] == 4 and rows[-1]["problems"] == 0, done.output
    again = CliRunner().invoke(cli, ["recover", "--json", str(tmp_path / "d1")])
    assert again.exit_code == 0, again.output  # nothing left: no cut, nothing rewritten
    assert all(not json.loads(line).get("indexes_written") for line in again.output.splitlines()[:-1])


class _Crash(Exception):
    pass


def _crash(_n, _kind, _path):
    raise _Crash()


def test_crash_safe_at_every_file_operation(oracle, tmp_path) -> None:
    ref = crashed(tmp_path / "ref")
    fileops.arm_crash(None)
    result = recover_partition(str(ref), quarantine_root=str(tmp_path / "q"))
    advance_recovery_points(str(ref.parent), [result])
    steps = fileops.operation_count()
    expected = sorted(p.name for p in ref.iterdir())
    states = []
    for n in range(1, steps + 1):
        part = crashed(tmp_path / f"c{n}")
        fileops.arm_crash(n, _crash)
        with pytest.raises(_Crash):
            r = recover_partition(str(part), quarantine_root=str(tmp_path / f"q{n}"))
            if r.problem is None:
                advance_recovery_points(str(part.parent), [r])
        fileops.arm_crash(None)
        shutil.copytree(part.parent, tmp_path / f"s{n}")
        states.append(tmp_path / f"s{n}" / "t-0")
        r = recover_partition(str(part), quarantine_root=str(tmp_path / f"q{n}"))
        advance_recovery_points(str(part.parent), [r])
        assert r.problem is None and sorted(p.name for p in part.iterdir()) == expected, n
        assert r.log_end_offset == result.log_end_offset
    for n, res in enumerate(oracle.run_many([("load-log", [str(s), "--unclean", "--no-records"]) for s in states]), 1):
        assert res.one("summary")["ok"], f"crash before operation {n}: {res.stderr[-400:]}"
