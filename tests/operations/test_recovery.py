"""Recovery (LogSegment.recover) offline: byte-identical to Kafka's own results."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kstore_cli.record.builder import RecordSpec, build_control_batch, build_v2_batch
from kstore_cli.log.index import SegmentIndexBuilder, pack_offset_entries
from kstore_cli.log.logdir import Partition, resolve
from kstore_cli.operations.recovery import (
    BAD_SIZE,
    CORRUPT_BATCH,
    INVALID_CONTROL,
    PARTIAL_BATCH,
    SHORT_TAIL,
    ZERO_TAIL,
    apply_plan,
    plan_partition,
    recover_segment,
)
from kstore_cli.operations.verify import looks_preallocated, verify_partition
from tests.conftest import CORPUS, GOLDEN, load_manifest

SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")
MANIFEST = load_manifest()
CASES = sorted(MANIFEST["recoveryCases"])


def _segment_files(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in SEGMENT_FILES}


def _run_case(case: str, tmp_path: Path):
    info = MANIFEST["recoveryCases"][case]
    src = CORPUS / "recovery" / case / "input"
    shutil.copytree(src, tmp_path / "data")
    (part_name,) = os.listdir(tmp_path / "data")
    partition = Partition(str(tmp_path / "data" / part_name))
    plan = plan_partition(partition, index_interval_bytes=info["topicConfig"]["index.interval.bytes"])
    apply_plan(plan, truncate=True, quarantine_root=str(tmp_path / "quarantine"))
    return info, part_name, plan


@pytest.mark.parametrize("case", CASES)
def test_recovery_case_is_byte_identical_to_kafka(case: str, tmp_path: Path) -> None:
    info, part_name, plan = _run_case(case, tmp_path)
    got = _segment_files(tmp_path / "data" / part_name)
    expected_case = case
    if case == "untrimmed-active-clean-load":
        # Kafka's clean load keeps the untrimmed active indexes with their zero slots counted as
        # entries; kstore rebuilds them as recovery does, which is the unclean-load result.
        expected_case = "untrimmed-active-logloader"
    expected = _segment_files(CORPUS / "recovery" / expected_case / "expected" / part_name)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], name
    if isinstance(info["results"], list):  # LogSegment.recover cases: the truncated byte counts too
        by_base = {s.segment.base_offset: s.result for s in plan.segments}
        for r in info["results"]:
            result = by_base[r["segmentBaseOffset"]]
            assert result.log_size == r["logSizeBefore"]
            assert result.truncated_bytes == r["recoverReturnedTruncatedBytes"]
            assert result.next_offset == r["nextOffsetAfter"]


def test_clean_load_case_really_differs_from_kafka_clean_load(tmp_path: Path) -> None:
    _run_case("untrimmed-active-clean-load", tmp_path)
    expected = CORPUS / "recovery" / "untrimmed-active-clean-load" / "expected" / "active-open-0"
    got = tmp_path / "data" / "active-open-0" / "00000000000000000237.index"
    assert (expected / got.name).stat().st_size == 1024  # Kafka kept the preallocated length
    assert got.stat().st_size == 32


def test_logloader_case_moves_later_segments_to_quarantine_and_trims_epochs(tmp_path: Path) -> None:
    case = "crc-flip-middle-first-segment-logloader"
    info, part_name, plan = _run_case(case, tmp_path)
    part = tmp_path / "data" / part_name
    expected = CORPUS / "recovery" / case / "expected" / part_name
    assert (part / "leader-epoch-checkpoint").read_bytes() == (expected / "leader-epoch-checkpoint").read_bytes()
    removed = set(info["results"]["filesRemoved"])
    assert not any((part / name).exists() for name in removed)
    (qdir,) = list((tmp_path / "quarantine" / part_name).iterdir())
    moved = {p.name for p in qdir.iterdir()}
    assert removed <= moved
    tail = qdir / "00000000000000000000.log.tail"
    original = (CORPUS / "recovery" / case / "input" / part_name / "00000000000000000000.log").read_bytes()
    assert tail.read_bytes() == original[8587:]


def _v2_only(key: str) -> bool:
    p = MANIFEST["partitions"][key]
    return key.startswith("logs/") and p.get("recordVersion") == 2 and "phases" not in p


@pytest.mark.parametrize("key", sorted(k for k in MANIFEST["partitions"] if _v2_only(k)))
def test_rebuilt_indexes_equal_kafkas_for_every_corpus_segment(key: str, tmp_path: Path) -> None:
    src = CORPUS / key
    dst = tmp_path / "data" / src.name
    shutil.copytree(src, dst)
    for p in list(dst.iterdir()):
        if p.suffix in (".index", ".timeindex", ".txnindex"):
            p.unlink()
    interval = MANIFEST["partitions"][key]["topicConfig"].get("index.interval.bytes", 4096)
    plan = plan_partition(Partition(str(dst)), index_interval_bytes=interval)
    assert not plan.has_problems
    apply_plan(plan)
    assert _segment_files(dst) == _segment_files(src)


@pytest.mark.parametrize("key", ["logs/legacy-v0-0", "logs/legacy-v1-0", "logs/mixed-magic-0"])
def test_legacy_rebuild_differs_only_where_appends_indexed_differently(key: str) -> None:
    """Legacy uncompressed message sets are multi-batch appends: the append path indexes the
    append's last offset, recovery each batch's (see the missing-indexes-legacy-v1 case). The
    originals must still verify clean, and the rebuilt ones must too."""
    findings, _ = verify_partition(Partition(str(CORPUS / key)))
    assert [f for f in findings if f.severity == "error"] == []


def _batch(base: int, n: int, ts: int, **kw) -> bytes:
    return build_v2_batch([RecordSpec(base + i, ts + i, b"k%d" % i, b"v" * 30) for i in range(n)], **kw)


def test_zero_tail_is_reported_as_preallocation_not_corruption() -> None:
    data = _batch(0, 3, 1000) + bytes(4096)
    result, _ = recover_segment(data, 0)
    assert result.problem.kind == ZERO_TAIL and not result.problem.is_corruption
    assert result.truncated_bytes == 4096 and result.valid_bytes == len(data) - 4096


@pytest.mark.parametrize(
    "tail,kind",
    [
        (b"\x00" * 8 + (5).to_bytes(4, "big") + b"\x01" * 9, BAD_SIZE),
        (b"\x01" * 10, SHORT_TAIL),
        (b"\x00" * 8 + (500).to_bytes(4, "big") + b"\x07" * 40, PARTIAL_BATCH),
    ],
)
def test_tail_kinds(tail: bytes, kind: str) -> None:
    good = _batch(0, 2, 5)
    result, _ = recover_segment(good + tail, 0)
    assert result.problem.kind == kind
    assert result.valid_bytes == len(good)
    assert result.truncated_bytes == len(tail)


def test_crc_mismatch_cuts_at_the_batch() -> None:
    first, second = _batch(0, 2, 5), bytearray(_batch(2, 2, 9))
    second[-1] ^= 0xFF
    result, _ = recover_segment(first + bytes(second), 0)
    assert result.problem.kind == CORRUPT_BATCH and result.valid_bytes == len(first)


def test_invalid_marker_is_cut_after_the_batch_as_kafka_counts_it_first() -> None:
    data = _batch(0, 1, 5, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    bad = build_v2_batch([RecordSpec(1, 6, b"\x00\x00\x00\x00", b"\x00")], producer_id=7, producer_epoch=0,
                         is_transactional=True, is_control=True)
    result, _ = recover_segment(data + bad + _batch(2, 1, 7), 0)
    assert result.problem.kind == INVALID_CONTROL
    assert result.valid_bytes == len(data) + len(bad)


def test_aborted_txn_gets_the_lso_of_the_earliest_other_open_transaction() -> None:
    kw = dict(producer_epoch=0, is_transactional=True)
    log = (
        _batch(0, 2, 10, producer_id=1, base_sequence=0, **kw)  # txn of pid 1 opens at 0
        + _batch(2, 2, 20, producer_id=2, base_sequence=0, **kw)  # txn of pid 2 opens at 2
        + build_control_batch(4, 30, commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=3)
        + build_control_batch(5, 40, commit=False, producer_id=2, producer_epoch=0, coordinator_epoch=3)
        + build_control_batch(6, 50, commit=False, producer_id=9, producer_epoch=0, coordinator_epoch=3)  # empty
    )
    result, state = recover_segment(log, 0)
    assert result.problem is None
    got = [(t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset) for t in result.aborted]
    assert got == [(1, 0, 4, 2), (2, 2, 5, 6)]
    assert state.open_transactions() == []


def test_builder_append_rule_indexes_the_appends_last_offset_at_its_first_position() -> None:
    b = SegmentIndexBuilder(100, index_interval_bytes=10)
    b.appended(0, 50, 104, 1000, 104)  # first append: never indexed
    b.appended(50, 60, 120, 900, 120)  # two batches 105..110 and 111..120: one entry (120, 50)
    b.appended(110, 5, 121, 2000, 121)
    b.finish()
    assert b.offsets == [(120, 50), (121, 110)]
    assert b.times == [(1000, 104), (2000, 121)]
    assert b.offset_index_bytes() == pack_offset_entries(100, [(120, 50), (121, 110)])


def test_preallocation_heuristic() -> None:
    assert looks_preallocated(1024, 1020) and looks_preallocated(2048, 2040)
    assert not looks_preallocated(88, 144)  # golden sparse-index-0: zero padding, not preallocation


@pytest.mark.parametrize("case,checks", [
    ("bad-index-0", {"index-order", "index-offset", "timeindex-order", "timeindex-offset", "timeindex-timestamp"}),
    ("bad-sanity-0", {"index-sanity", "timeindex-sanity"}),
    ("sparse-index-0", {"index-zero-padding", "timeindex-zero-padding"}),
    ("missing-log-0", {"orphan-index"}),
])
def test_verify_flags_every_damaged_golden_index(case: str, checks: set) -> None:
    (target,) = resolve([str(GOLDEN / "inputs" / case)])
    findings, _ = verify_partition(target.partition)
    errors = {f.check for f in findings if f.severity == "error"}
    assert checks <= errors


@pytest.mark.parametrize("key", sorted(MANIFEST["partitions"]))
def test_verify_passes_healthy_corpus_partitions(key: str) -> None:
    findings, _ = verify_partition(Partition(str(CORPUS / key)))
    assert [f for f in findings if f.severity == "error"] == []
    if key.startswith("logs/"):
        assert findings == []
    else:  # crash state: preallocated zero slots are notes
        assert findings and all(f.severity == "note" for f in findings)
