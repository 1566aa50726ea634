"""`rebuild-index --truncate` quarantines a tail exactly once and records the checkpoints it lowers;
`kstore restore` undoes it (crash-safe, refusing a changed partition, respecting the lock), and
Kafka's loader reads exactly the original records from what it restores."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstore_cli.cli import main
from kstore_cli.log import fileops
from kstore_cli.log.checkpoint import (
    format_offset_checkpoint, read_leader_epoch_checkpoint, read_offset_checkpoint)
from kstore_cli.log.logdir import Partition
from tests.conftest import lock_held
from tests.oracle import kafka_records
from tests.ownership import invoke
from tests.safety_data import INTERVAL, LEFTOVER_SUFFIXES, make_data_dir, tree_bytes

TRUNCATE = ["rebuild-index", "--truncate", "--index-interval-bytes", str(INTERVAL)]
CHECKPOINTS = ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint",
               "cleaner-offset-checkpoint")


def damaged_in_place(data: Path) -> Path:
    """orders-0 with a CRC mismatch in the last batch of its second segment: the cut drops 2 later
    segments and 3 snapshots and lowers the leader epochs, recovery point and high watermark; the
    cleaner offset is put past the cut, so that it is dropped."""
    part = data / "orders-0"
    seg = Partition(str(part)).segments[1]
    raw = bytearray(Path(seg.log).read_bytes())
    raw[-10] ^= 0xFF
    Path(seg.log).write_bytes(bytes(raw))
    cleaner = data / "cleaner-offset-checkpoint"
    entries = read_offset_checkpoint(str(cleaner))
    entries[("orders", 0)] = 40
    assert list(entries)[0] == ("orders", 0) and len(entries) > 1  # restore must put it back first
    cleaner.write_bytes(format_offset_checkpoint(entries).encode())
    return part


def quarantine_dirs(root: Path) -> List[Path]:
    return sorted(p for p in (root / "kstore-quarantine" / "orders-0").iterdir())


def forked_crash(argv: List[str], at: int) -> bool:
    """Run kstore argv in a forked child killed (SIGKILL) before its at-th file operation; True if it was."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            fileops.arm_crash(at)
            try:
                main(argv)
            except SystemExit:
                pass
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status)


def ops_of(argv: List[str]) -> int:
    fileops.arm_crash(None)
    res = invoke(argv)
    assert res.exit_code == 0, res.output
    return fileops.operation_count()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("restore-template")
    part = make_data_dir(root / "data")
    shutil.copy2(part / "00000000000000000015.log", root / "pristine.log")
    damaged_in_place(root / "data")
    return root


def fresh(template: Path, tmp_path: Path, name: str = "w") -> Path:
    work = tmp_path / name
    shutil.copytree(template, work, symlinks=True)
    return work


def test_the_manifest_records_the_checkpoints_the_cut_lowered(template: Path, tmp_path: Path) -> None:
    work = fresh(template, tmp_path)
    data = work / "data"
    before = {name: read_offset_checkpoint(str(data / name)) for name in CHECKPOINTS}
    epochs = read_leader_epoch_checkpoint(str(data / "orders-0" / "leader-epoch-checkpoint"))
    assert invoke(TRUNCATE + [str(data / "orders-0")]).exit_code == 0
    (qdir,) = quarantine_dirs(work)
    manifest = json.loads((qdir / "kstore-quarantine.json").read_text())
    got = {os.path.basename(c["file"]): (c["before"], c["after"]) for c in manifest["checkpoints"]}
    key = ("orders", 0)
    end = manifest["nextOffset"]
    assert got == {
        "leader-epoch-checkpoint": ([list(e) for e in epochs], [list(e) for e in epochs if e[1] < end]),
        "recovery-point-offset-checkpoint": (before["recovery-point-offset-checkpoint"][key], end),
        "replication-offset-checkpoint": (before["replication-offset-checkpoint"][key], end),
        "cleaner-offset-checkpoint": (40, None),
    }
    assert got["leader-epoch-checkpoint"][0] != got["leader-epoch-checkpoint"][1]
    for name, (_, after) in got.items():
        if name != "leader-epoch-checkpoint":
            assert read_offset_checkpoint(str(data / name)).get(key) == after


def _quarantined(work: Path) -> Dict[str, List[bytes]]:
    out: Dict[str, List[bytes]] = {}
    for p in sorted((work / "kstore-quarantine").rglob("*")):
        if p.is_file() and p.name != "kstore-quarantine.json":
            out.setdefault(p.name, []).append(p.read_bytes())
    return out


def test_a_tail_is_quarantined_exactly_once_whatever_the_kill_point(template: Path, tmp_path: Path) -> None:
    ref = fresh(template, tmp_path, "ref")
    argv = lambda w: TRUNCATE + [str(w / "data" / "orders-0")]  # noqa: E731
    ops = ops_of(argv(ref))
    want_data, want_q = tree_bytes(ref / "data"), _quarantined(ref)
    assert any(name.endswith(".tail") for name in want_q)
    # 9 moved files and the tail, plus copies of the damaged segment's 3 original indexes
    assert len(want_q) == 13 and sum(name.endswith(".orig") for name in want_q) == 3
    (ref_qdir,) = quarantine_dirs(ref)
    ref_manifest = (ref_qdir / "kstore-quarantine.json").read_text().replace(str(ref), "W")
    want_checkpoints = json.loads(ref_manifest).get("checkpoints")
    killed = 0
    for n in range(1, ops + 1):
        work = fresh(template, tmp_path, f"k{n}")
        killed += forked_crash(argv(work), n)
        res = invoke(argv(work))
        assert res.exit_code == 0, (n, res.output)
        got = _quarantined(work)
        assert {k: len(v) for k, v in got.items() if len(v) != 1} == {}, f"kill before op {n}: quarantined twice"
        assert got == {k: v for k, v in want_q.items()}, f"kill before op {n}"
        assert tree_bytes(work / "data") == want_data, f"kill before op {n}: the rerun does not converge"
        manifests = [json.loads((q / "kstore-quarantine.json").read_text().replace(str(work), "W"))
                     for q in quarantine_dirs(work)]
        assert [m.get("checkpoints") for m in manifests] == [want_checkpoints], f"kill before op {n}"
        assert not [p for p in work.rglob("*") if p.name.endswith(LEFTOVER_SUFFIXES)]
        shutil.rmtree(work)
    assert killed == ops >= 20


def _state(data: Path) -> Dict[str, bytes]:
    """What restore must bring back: every file, the damaged segment's original indexes included (a
    clean load trusts them: a .txnindex short of the tail's aborted transactions would let
    read_committed consumers see aborted records)."""
    return tree_bytes(data)


def _cut(template: Path, tmp_path: Path, name: str = "w") -> Tuple[Path, Path]:
    work = fresh(template, tmp_path, name)
    assert invoke(TRUNCATE + [str(work / "data" / "orders-0")]).exit_code == 0
    (qdir,) = quarantine_dirs(work)
    return work, qdir


def test_restore_puts_back_what_the_cut_took(template: Path, tmp_path: Path) -> None:
    work, qdir = _cut(template, tmp_path)
    dry = invoke(["restore", "--dry-run", str(qdir)])
    assert dry.exit_code == 0 and "would append 171 bytes" in dry.output and "move 9 files back" in dry.output
    res = invoke(["restore", str(qdir)])
    assert res.exit_code == 0, res.output
    assert _state(work / "data") == _state(template / "data")
    assert json.loads((qdir / "kstore-quarantine.json").read_text())["restored"]
    again = invoke(["restore", str(qdir)])
    assert again.exit_code == 0 and "already restored" in again.output
    assert _state(work / "data") == _state(template / "data")


def _changes() -> List[Tuple[str, object]]:
    def grow(data: Path) -> None:
        with open(Partition(str(data / "orders-0")).segments[-1].log, "ab") as f:
            f.write(b"\0" * 100)

    def checkpoint(data: Path) -> None:
        (data / "recovery-point-offset-checkpoint").write_text("0\n1\norders 0 29\n")

    def segment(data: Path) -> None:
        (data / "orders-0" / "00000000000000000030.log").write_bytes(b"")

    return [("log grew", grow), ("checkpoint moved", checkpoint), ("new segment", segment)]


@pytest.mark.parametrize("change", _changes(), ids=lambda c: c[0])
def test_restore_refuses_a_partition_changed_since(change, template: Path, tmp_path: Path) -> None:
    work, qdir = _cut(template, tmp_path)
    change[1](work / "data")
    before = tree_bytes(work)
    res = invoke(["restore", str(qdir)])
    assert res.exit_code == 1, res.output
    assert "the partition changed since the cut" in res.output and res.output.count("\n") == 1
    assert tree_bytes(work) == before


def test_restore_respects_the_lock(template: Path, tmp_path: Path) -> None:
    work, qdir = _cut(template, tmp_path)
    before = tree_bytes(work)
    with lock_held(work / "data"):
        res = invoke(["restore", str(qdir)])
        assert res.exit_code == 1 and "locked" in res.output
        assert tree_bytes(work) == before
        assert invoke(["restore", "--force", str(qdir)]).exit_code == 0
    assert _state(work / "data") == _state(template / "data")


def _restore_converges_after_a_kill_at_every_step(make, template: Path, tmp_path: Path) -> Dict[str, bytes]:
    """restore of the quarantine `make` leaves, killed before each of its file operations and rerun: the
    state of an uninterrupted restore (returned), and no leftovers."""
    ref, ref_q = make(template, tmp_path, "ref")
    ops = ops_of(["restore", str(ref_q)])
    want = _state(ref / "data")
    cut, cut_q = make(template, tmp_path, "cut")
    killed = 0
    for n in range(1, ops + 1):
        work = tmp_path / f"k{n}"
        shutil.copytree(cut, work)
        qdir = work / cut_q.relative_to(cut)
        manifest = qdir / "kstore-quarantine.json"
        manifest.write_text(manifest.read_text().replace(str(cut), str(work)))
        killed += forked_crash(["restore", str(qdir)], n)
        res = invoke(["restore", str(qdir)])
        assert res.exit_code == 0, (n, res.output)
        assert _state(work / "data") == want, f"kill before restore op {n}: does not converge"
        assert not [p for p in work.rglob("*") if p.name.endswith(LEFTOVER_SUFFIXES)]
        shutil.rmtree(work)
    assert killed == ops >= 10
    return want


def test_restore_finishes_after_a_kill_at_every_step(template: Path, tmp_path: Path) -> None:
    want = _restore_converges_after_a_kill_at_every_step(_cut, template, tmp_path)
    assert want == _state(template / "data")  # restore gives back exactly the original


def test_kafka_loads_the_restored_partition_with_exactly_the_original_records(oracle, template: Path,
                                                                              tmp_path: Path) -> None:
    work, qdir = _cut(template, tmp_path)
    assert invoke(["restore", str(qdir)]).exit_code == 0
    scratch = Path(tempfile.mkdtemp(prefix="kstore-restore-oracle-"))
    try:
        calls = []
        for label, data in (("original", template / "data"), ("restored", work / "data")):
            for mode in ("--clean", "--unclean"):
                parent = scratch / f"{label}{mode}"
                shutil.copytree(data, parent, ignore=shutil.ignore_patterns(".lock"))
                calls.append(("load-log", [str(parent / "orders-0"), mode]))
        original_clean, original_unclean, restored_clean, restored_unclean = oracle.run_many(calls)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for res in (original_clean, original_unclean, restored_clean, restored_unclean):
        assert res.rc == 0, res.stdout[-2000:]
    assert kafka_records(restored_clean) == kafka_records(original_clean)
    assert kafka_records(restored_unclean) == kafka_records(original_unclean)
    assert kafka_records(restored_unclean)

    def shape(res) -> tuple:
        summary = res.one("summary")
        segments = re.findall(r"'base_offset': (\d+), 'size': (\d+)", str(summary["segments"]))
        return summary["log_start_offset"], summary["log_end_offset"], summary["recovery_point"], segments

    assert shape(restored_clean) == shape(original_clean)
    assert shape(restored_unclean) == shape(original_unclean)
    # The clean load keeps every restored segment (as the original's); the recovery cuts them again.
    assert shape(restored_clean)[1] == 72 > shape(restored_unclean)[1]


def test_restore_puts_a_cut_zero_tail_back(tmp_path: Path) -> None:
    """A preallocated zero tail is cut without a tail file (zeros are not data); restore appends the
    zeros back all the same, so the undo is exact."""
    part = make_data_dir(tmp_path / "data")
    log = Path(Partition(str(part)).segments[-1].log)
    with open(log, "ab") as f:
        f.write(bytes(5000))
    original = log.read_bytes()
    assert invoke(TRUNCATE + [str(part)]).exit_code == 0
    assert log.read_bytes() == original[:-5000]
    (qdir,) = quarantine_dirs(tmp_path)
    assert json.loads((qdir / "kstore-quarantine.json").read_text())["tailFile"] is None
    res = invoke(["restore", str(qdir)])
    assert res.exit_code == 0 and "5000 bytes appended" in res.output, res.output
    assert log.read_bytes() == original


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment=st.integers(0, 3), back=st.integers(1, 400), flip=st.integers(1, 255))
def test_truncate_then_restore_is_the_identity(template: Path, tmp_path: Path, segment: int, back: int,
                                               flip: int) -> None:
    """Whatever byte of whichever segment is damaged: cut, restore, and the partition is the original."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copytree(template / "data", work / "data")
    part = work / "data" / "orders-0"
    # the template's damage undone: this example's is the only one
    shutil.copy2(template / "pristine.log", part / "00000000000000000015.log")
    log = Path(Partition(str(part)).segments[segment].log)
    raw = bytearray(log.read_bytes())
    raw[-min(back, len(raw))] ^= flip
    log.write_bytes(bytes(raw))
    original = _state(work / "data")
    cut = invoke(TRUNCATE + [str(part)])
    assert cut.exit_code in (0, 1), cut.output
    qroot = work / "kstore-quarantine" / "orders-0"
    if not qroot.exists():
        return  # a damage Kafka's recovery does not cut (kstore leaves it alone): nothing to undo
    (qdir,) = sorted(qroot.iterdir())
    res = invoke(["restore", str(qdir)])
    assert res.exit_code == 0, res.output
    assert _state(work / "data") == original


def _recovered(template: Path, tmp_path: Path, name: str = "rec") -> Tuple[Path, Path]:
    """The template after an unclean shutdown (recovery point 0: every segment recovered), then `recover`:
    the cut, and the empty segment recover rolls at the new log end (UnifiedLog.roll)."""
    work = fresh(template, tmp_path, name)
    data = work / "data"
    path = data / "recovery-point-offset-checkpoint"
    path.write_text(format_offset_checkpoint({k: 0 for k in read_offset_checkpoint(str(path))}))
    shutil.copytree(data, work / "before-recover")
    res = invoke(["recover", "--jobs", "1", "--index-interval-bytes", str(INTERVAL), str(data / "orders-0")])
    assert res.exit_code == 0 and "rolled an empty segment" in res.output, res.output
    (qdir,) = quarantine_dirs(work)
    return work, qdir


def _segments(part: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in part.iterdir() if p.name.endswith(".log")}


def test_restore_undoes_recovers_cut(oracle, template: Path, tmp_path: Path) -> None:
    """Medium: recover rolls an empty segment after its cut, and restore then always refused ("a new segment
    follows the cut one"). The manifest names the segment recover rolls; restore removes it (empty, as
    rolled) and puts the cut back: the original segments byte for byte, and Kafka loads the original
    records. What recover did besides the cut stays (valid for the restored log): indexes rebuilt as
    Kafka's recovery writes them, the producer snapshot at the cut, the recovery point at the cut."""
    work, qdir = _recovered(template, tmp_path)
    manifest = json.loads((qdir / "kstore-quarantine.json").read_text())
    rolled = f"{manifest['nextOffset']:020d}.log"
    assert (work / "data" / "orders-0" / rolled).exists()
    dry = invoke(["restore", "--dry-run", str(qdir)])
    assert dry.exit_code == 0 and f"would remove the empty segment {rolled}" in dry.output, dry.output
    res = invoke(["restore", str(qdir)])
    assert res.exit_code == 0, res.output
    part, original = work / "data" / "orders-0", work / "before-recover" / "orders-0"
    assert _segments(part) == _segments(original)
    assert not [p for p in part.iterdir() if p.name.startswith(rolled[:-4]) and not p.name.endswith(".snapshot")]
    calls = [("load-log", [str(p), "--unclean"]) for p in (original, part)]
    before, after = oracle.run_many(calls)
    assert before.rc == 0 and after.rc == 0, after.stdout[-2000:]
    assert kafka_records(after) == kafka_records(before) and kafka_records(after)
    assert manifest.get("rolledSegment") == rolled  # the cut recorded it, before recover rolled it


def test_restore_refuses_a_rolled_segment_written_since(template: Path, tmp_path: Path) -> None:
    """The segment recover rolled is removed only while it is empty: a broker that appended to it wrote
    after the cut, and restore refuses as for any new segment."""
    work, qdir = _recovered(template, tmp_path)
    rolled = f"{json.loads((qdir / 'kstore-quarantine.json').read_text())['nextOffset']:020d}.log"
    with open(work / "data" / "orders-0" / rolled, "ab") as f:
        f.write(b"\0" * 10)
    before = tree_bytes(work)
    res = invoke(["restore", str(qdir)])
    assert res.exit_code == 1 and f"a new segment {rolled} follows the cut one" in res.output, res.output
    assert tree_bytes(work) == before


def test_restore_of_recovers_cut_finishes_after_a_kill_at_every_step(template: Path, tmp_path: Path) -> None:
    _restore_converges_after_a_kill_at_every_step(_recovered, template, tmp_path)
