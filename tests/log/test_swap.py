"""Crash-safe segment replacement (Kafka's replaceSegments) and LogLoader's resolution of leftovers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict

import pytest

from kstore_cli.errors import UsageError
from kstore_cli.log import fileops
from kstore_cli.log.logdir import Partition
from kstore_cli.record.reader import read_batches
from kstore_cli.log.swap import replace_segments, resolve_leftovers
from kstore_cli.log.writer import PartitionWriter
from tests.conftest import CORPUS

SEGMENT_EXTS = (".log", ".index", ".timeindex", ".txnindex")


class Crash(BaseException):
    """Stands in for SIGKILL: nothing after the crash point runs, no cleanup handler catches it."""


def segment_files(directory: Path) -> Dict[str, bytes]:
    return {n: (directory / n).read_bytes() for n in sorted(os.listdir(directory)) if n.endswith(SEGMENT_EXTS)}


def offsets(directory: Path):
    out = []
    for seg in Partition(str(directory)).segments:
        for batch in read_batches(seg.log):
            out.extend(r.offset for r in batch.records())
    return out


def rewrite(part: Path, segment_bytes: int) -> None:
    """Re-roll every batch of a partition into new segments and swap them in."""
    p = Partition(str(part))
    writer = PartitionWriter(str(part), segment_bytes=segment_bytes, index_interval_bytes=512)
    first = True
    for seg in p.segments:
        for batch in read_batches(seg.log):
            if first:
                writer.start_segment(p.segments[0].base_offset)
                first = False
            writer.append(batch)
    new = writer.close()
    old_next = max(b.last_offset for b in read_batches(p.segments[-1].log)) + 1
    replace_segments(str(part), [s.base_offset for s in new], p.segments,
                     old_next_offset=old_next, new_next_offset=new[-1].next_offset)


@pytest.fixture
def part(tmp_path: Path) -> Path:
    dst = tmp_path / "transactional-0"
    shutil.copytree(CORPUS / "logs" / "transactional-0", dst)
    return dst


def test_replace_installs_new_segments_and_leaves_nothing_behind(part: Path, tmp_path: Path) -> None:
    before = offsets(part)
    rewrite(part, 9000)
    names = os.listdir(part)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted", fileops.TMP_SUFFIX))]
    bases = [s.base_offset for s in Partition(str(part)).segments]
    assert bases[0] == 0 and len(bases) < 8  # re-rolled into fewer, larger segments
    assert offsets(part) == before


def test_rename_order_follows_kafka(part: Path) -> None:
    fileops.arm_crash(None)
    rewrite(part, 9000)
    ops = [(k, p) for k, p in fileops.journal if k == "rename"]
    fileops.arm_crash(None)
    to_swap = [p.split(" -> ")[0] for k, p in ops if p.endswith(".swap")]
    bases = [int(os.path.basename(p)[:20]) for p in to_swap]
    assert bases == sorted(bases, reverse=True)  # .cleaned -> .swap in descending offsets
    kinds = ["swap" if p.endswith(".swap") else "deleted" if p.endswith(".deleted") else "final" for _, p in ops]
    assert kinds == sorted(kinds, key=["swap", "deleted", "final"].index)  # then old -> .deleted, then final


def test_a_crash_at_every_step_resolves_to_old_or_new(part: Path, tmp_path: Path) -> None:
    original = tmp_path / "original"
    shutil.copytree(part, original)
    done = tmp_path / "done"
    shutil.copytree(part, done)
    fileops.arm_crash(None)
    rewrite(done, 9000)
    steps = fileops.operation_count()
    old_files, new_files = segment_files(original), segment_files(done)
    assert old_files != new_files and steps > 20
    leo_snapshot = "00000000000000000481.snapshot"
    outcomes = set()
    for n in range(1, steps + 1):
        work = tmp_path / f"crash-{n}"
        shutil.copytree(original, work)

        def crash(count, kind, path):
            raise Crash(f"{count} {kind} {path}")

        fileops.arm_crash(n, crash)
        with pytest.raises(Crash):
            rewrite(work, 9000)
        fileops.arm_crash(None)
        report = resolve_leftovers(str(work))
        got = segment_files(work)
        assert got in (old_files, new_files), f"crash before step {n}: {fileops.journal[-1:]}"
        outcomes.add((report.outcome, "old" if got == old_files else "new"))
        assert not [x for x in os.listdir(work) if x.endswith((".cleaned", ".swap", ".deleted", fileops.TMP_SUFFIX))]
        assert (work / leo_snapshot).exists()
        shutil.rmtree(work)
    # every kind of resolution was met: nothing to do, rollback, completion, cleanup of .deleted
    assert {o for o, _ in outcomes} >= {None, "rolled-back", "completed", "cleaned"}
    assert ("rolled-back", "old") in outcomes and ("completed", "new") in outcomes


def touch(directory: Path, name: str, data: bytes = b"") -> None:
    (directory / name).write_bytes(data)


def test_resolution_rules_of_log_loader(tmp_path: Path) -> None:
    """§6.2 step 1: swaps at or above the smallest .cleaned offset go, then every .cleaned;
    .deleted and kstore temp files go; a KRaft .checkpoint.deleted stays."""
    d = tmp_path / "t-0"
    d.mkdir()
    for name in ("00000000000000000000.log", "00000000000000000010.log.cleaned", "00000000000000000020.log.swap",
                 "00000000000000000005.log.swap", "00000000000000000003.index.deleted", "leader-epoch-checkpoint.kstore-tmp",
                 "00000000000000000001-0000000001.checkpoint.deleted"):
        touch(d, name)
    report = resolve_leftovers(str(d), dry_run=True)
    assert os.path.exists(d / "00000000000000000010.log.cleaned")  # dry run changes nothing
    report = resolve_leftovers(str(d))
    left = sorted(os.listdir(d))
    # 00005.log.swap is below the smallest .cleaned offset: it is a completed swap (empty segment at 5,
    # range [5, 5) deletes nothing), so it is renamed.
    assert left == ["00000000000000000000.log", "00000000000000000001-0000000001.checkpoint.deleted",
                    "00000000000000000005.log"]
    assert report.outcome == "completed"


def test_completion_deletes_old_files_and_snapshots_in_the_swapped_range(tmp_path: Path) -> None:
    from kstore_cli.record.builder import RecordSpec, build_v2_batch

    d = tmp_path / "t-0"
    d.mkdir()
    batch = build_v2_batch([RecordSpec(10 + i, 0, None, b"x") for i in range(5)])
    touch(d, "00000000000000000010.log.swap", batch)
    touch(d, "00000000000000000010.index.swap")
    for name in ("00000000000000000010.log", "00000000000000000012.log", "00000000000000000012.snapshot",
                 "00000000000000000015.snapshot", "00000000000000000000.log", "leader-epoch-checkpoint"):
        touch(d, name, b"old")
    report = resolve_leftovers(str(d))
    assert report.outcome == "completed"
    assert sorted(os.listdir(d)) == ["00000000000000000000.log", "00000000000000000010.index",
                                     "00000000000000000010.log", "00000000000000000015.snapshot",
                                     "leader-epoch-checkpoint"]
    assert (d / "00000000000000000010.log").read_bytes() == batch


def test_nothing_to_resolve(part: Path) -> None:
    report = resolve_leftovers(str(part))
    assert report.outcome is None and not report.changed


def test_replace_refuses_layouts_a_crash_could_not_resolve(part: Path) -> None:
    p = Partition(str(part))
    writer = PartitionWriter(str(part))
    for batch in read_batches(p.segments[1].log):
        writer.append(batch)
    new = writer.close()
    with pytest.raises(UsageError, match="first old segment"):
        replace_segments(str(part), [s.base_offset for s in new], p.segments)
    with pytest.raises(UsageError, match="old log end"):
        replace_segments(str(part), [s.base_offset for s in new], p.segments[1:2],
                         old_next_offset=200, new_next_offset=new[-1].next_offset)
    with pytest.raises(UsageError, match="nothing"):
        replace_segments(str(part), [], p.segments)
