"""Retention scenarios on generated partitions with a fixed `now`: each of Kafka's rules, their
combination and the edge cases, checked against what must survive untouched."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from kstore_cli.errors import CorruptCheckpointError, UsageError
from kstore_cli.log.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from kstore_cli.log.config import ConfigResolver, parse_topic_overrides, retention_flags
from kstore_cli.log.logdir import Partition
from kstore_cli.log.names import filename_prefix
from kstore_cli.operations.verify import ERROR, verify_partition
from kstore_cli.log.log_segment import TS_BATCHES, TS_MTIME, TS_TIMEINDEX, largest_timestamp
from kstore_cli.operations.retention import (
    RULE_LOG_START_OFFSET,
    RULE_RETENTION_BYTES,
    RULE_RETENTION_MS,
    DataDirState,
    RetentionPlan,
    apply_retention,
    plan_partition,
    truncate_epochs_from_start,
)
from tests.conftest import CORPUS
from tests.log.partition_factory import (
    DAY,
    HOUR,
    T0,
    SegSpec,
    file_hashes,
    make_partition,
    records_of,
    set_checkpoint,
)

NOW = T0 + 30 * DAY


def run(data_dir: Path, *, now: int = NOW, flags: Optional[dict] = None, overrides: Optional[str] = None,
        log_start_offset: Optional[int] = None, delay: int = 0, dry_run: bool = False,
        topic: str = "orders") -> List[RetentionPlan]:
    state = DataDirState(str(data_dir))
    resolver = ConfigResolver(flags=retention_flags(**(flags or {})),
                              overrides=parse_topic_overrides(overrides) if overrides else None)
    plans = []
    for name in sorted(os.listdir(data_dir)):
        if (data_dir / name).is_dir():
            p = Partition(str(data_dir / name))
            plans.append(plan_partition(p, resolver.for_topic(p.topic), state, now=now,
                                        log_start_offset=log_start_offset, delete_delay_ms=delay))
    if not dry_run:
        apply_retention(state, plans, delete_delay_ms=delay)
    return plans


def deleted_bases(plan: RetentionPlan) -> List[int]:
    return [d.base_offset for d in plan.deletions]


def four_days(**kw) -> List[SegSpec]:
    """Four segments, one a day apart, the last one (active) newest."""
    return [SegSpec(ts=T0 + i * DAY, epoch=i // 2, **kw) for i in range(4)]


class Snapshot:
    """What a partition holds before retention, to prove the survivors untouched afterwards."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hashes = file_hashes(path)
        self.records: Dict[int, list] = {}
        for name in os.listdir(path):
            if name.endswith(".log"):
                self.records[int(name[:20])] = records_of(path / name)

    def check_survivors(self, deleted: List[int], rolled: Optional[int] = None) -> None:
        now_files = file_hashes(self.path)
        for name, digest in self.hashes.items():
            base = int(name[:20]) if name[:20].isdigit() else None
            if base is not None and base in deleted:
                assert name not in now_files, f"{name} should be gone"
                assert not (self.path / (name + ".deleted")).exists()
            elif name != "leader-epoch-checkpoint":
                assert now_files.get(name) == digest, f"{name} changed"
        for base, records in self.records.items():
            if base not in deleted:
                assert records_of(self.path / (filename_prefix(base) + ".log")) == records
        extra = set(now_files) - set(self.hashes)
        expected_extra = set()
        if rolled is not None:
            expected_extra = {filename_prefix(rolled) + s for s in (".log", ".index", ".timeindex")}
        assert extra == expected_extra


def check_consistent(gen_path: Path, topic: str = "orders", partition: int = 0) -> int:
    """The checkpoint names the first remaining offset and verify-index passes; returns that offset."""
    p = Partition(str(gen_path))
    first = p.segments[0].base_offset
    lso = read_offset_checkpoint(str(gen_path.parent / "log-start-offset-checkpoint"))[(topic, partition)]
    assert lso == first
    findings, _ = verify_partition(p)
    assert [f for f in findings if f.severity == ERROR] == []
    return lso


# --------------------------------------------------------------------------- time rule


def test_time_rule_deletes_the_expired_prefix_strictly(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    before = Snapshot(gen.path)
    # Segment i's largest timestamp is T0 + i*DAY + 2000 (three batches, 1 s apart).
    largest1 = T0 + DAY + 2000
    retention = 10 * DAY
    now = largest1 + retention  # segment 1 is exactly retention.ms old: not strictly over, kept
    (plan,) = run(tmp_path, now=now, flags={"ms": retention})
    assert deleted_bases(plan) == [0]
    assert plan.deletions[0].rule == RULE_RETENTION_MS
    assert plan.new_log_start_offset == gen.bases[1]
    before.check_survivors([0])
    check_consistent(gen.path)
    (plan,) = run(tmp_path, now=now + 1, flags={"ms": retention})
    assert deleted_bases(plan) == [gen.bases[1]]
    check_consistent(gen.path)


def test_time_rule_uses_the_time_index_last_entry(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    seg = Partition(str(gen.path)).segments[2]
    assert largest_timestamp(seg) == (T0 + 2 * DAY + 2000, TS_TIMEINDEX)


def test_only_v0_data_falls_back_to_the_log_mtime(tmp_path: Path) -> None:
    old = T0 - 20 * DAY
    recent = NOW - HOUR
    gen = make_partition(tmp_path, [SegSpec(magic=0, mtime=old), SegSpec(magic=0, mtime=recent),
                                    SegSpec(magic=0, mtime=old)])
    p = Partition(str(gen.path))
    assert largest_timestamp(p.segments[0]) == (old, TS_MTIME)
    before = Snapshot(gen.path)
    (plan,) = run(tmp_path, flags={"hours": 7 * 24})
    # The third segment is older by mtime, but only a prefix is ever deleted.
    assert deleted_bases(plan) == [0]
    assert "from the mtime" in plan.deletions[0].reason
    before.check_survivors([0])
    check_consistent(gen.path)


def test_missing_offset_index_means_recovery_so_batches_give_the_timestamp(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    os.unlink(gen.path / (filename_prefix(gen.bases[1]) + ".index"))
    seg = Partition(str(gen.path)).segments[1]
    assert largest_timestamp(seg) == (T0 + DAY + 2000, TS_BATCHES)


def test_untrimmed_time_index_is_rebuilt_by_the_broker_so_batches_count(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    ti = gen.path / (filename_prefix(gen.bases[3]) + ".timeindex")
    ti.write_bytes(ti.read_bytes() + bytes(12 * 100))  # preallocated zero slots: an unclean shutdown
    seg = Partition(str(gen.path)).segments[3]
    assert largest_timestamp(seg) == (T0 + 3 * DAY + 2000, TS_BATCHES)


def test_expired_active_segment_rolls_an_empty_segment_first(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    before = Snapshot(gen.path)
    (plan,) = run(tmp_path, flags={"ms": DAY})
    assert deleted_bases(plan) == gen.bases
    assert plan.roll_offset == gen.leo
    before.check_survivors(gen.bases, rolled=gen.leo)
    new = Partition(str(gen.path))
    assert [s.base_offset for s in new.segments] == [gen.leo]
    assert os.path.getsize(new.segments[0].log) == 0
    assert new.segments[0].index and new.segments[0].timeindex
    assert check_consistent(gen.path) == gen.leo
    # The epoch cache keeps its latest epoch, re-based to the new log start offset.
    assert read_leader_epoch_checkpoint(str(gen.path / "leader-epoch-checkpoint")) == [(1, gen.leo)]
    # The snapshot at the log end offset belongs to the new segment and stays.
    assert (gen.path / (filename_prefix(gen.leo) + ".snapshot")).exists()
    # A second run finds nothing: the empty last segment is never deleted.
    (again,) = run(tmp_path, flags={"ms": DAY}, now=NOW + 365 * DAY)
    assert again.deletions == [] and again.roll_offset is None and again.checkpoint_offset is None


def test_empty_last_segment_is_never_deleted_and_needs_no_roll(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days() + [SegSpec(batches=0)])
    assert gen.bases[-1] == gen.leo
    before = Snapshot(gen.path)
    (plan,) = run(tmp_path, flags={"ms": DAY})
    assert deleted_bases(plan) == gen.bases[:-1]
    assert plan.roll_offset is None
    before.check_survivors(gen.bases[:-1])
    assert check_consistent(gen.path) == gen.leo


# --------------------------------------------------------------------------- size rule


def test_retention_bytes_exactly_at_the_boundary(tmp_path: Path) -> None:
    sizes = [SegSpec(batches=b, ts=NOW - HOUR) for b in (3, 2, 4, 1)]
    gen = make_partition(tmp_path / "a", sizes)
    total = sum(gen.sizes)
    # Log exactly at retention.bytes: nothing to do.
    (plan,) = run(tmp_path / "a", flags={"retention_bytes": total})
    assert plan.deletions == []
    # Exactly one segment over: that segment goes and the log lands exactly on the limit.
    (plan,) = run(tmp_path / "a", flags={"retention_bytes": total - gen.sizes[0]}, dry_run=True)
    assert deleted_bases(plan) == [0]
    # One byte less excess and the first segment no longer fits in it.
    (plan,) = run(tmp_path / "a", flags={"retention_bytes": total - gen.sizes[0] + 1})
    assert plan.deletions == []
    # Deletion never takes the log below retention.bytes.
    limit = total - gen.sizes[0] - gen.sizes[1] + 1
    before = Snapshot(gen.path)
    (plan,) = run(tmp_path / "a", flags={"retention_bytes": limit})
    assert deleted_bases(plan) == [0]
    assert sum(os.path.getsize(s.log) for s in Partition(str(gen.path)).segments) >= limit
    assert plan.deletions[0].rule == RULE_RETENTION_BYTES
    before.check_survivors([0])
    check_consistent(gen.path)


def test_retention_bytes_zero_takes_everything_and_rolls(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, [SegSpec(ts=NOW), SegSpec(ts=NOW)])
    (plan,) = run(tmp_path, flags={"retention_bytes": 0})
    assert deleted_bases(plan) == gen.bases and plan.roll_offset == gen.leo
    assert check_consistent(gen.path) == gen.leo


# --------------------------------------------------------------------------- log start offset rule


def test_log_start_offset_rule_from_the_checkpoint_and_from_the_flag(tmp_path: Path) -> None:
    specs = [SegSpec(ts=NOW) for _ in range(4)]
    gen = make_partition(tmp_path, specs, log_start_offset=0)
    inside_third = gen.bases[2] + 3
    before = Snapshot(gen.path)
    (plan,) = run(tmp_path, log_start_offset=inside_third)
    assert deleted_bases(plan) == gen.bases[:2]
    assert {d.rule for d in plan.deletions} == {RULE_LOG_START_OFFSET}
    before.check_survivors(gen.bases[:2])
    # The log start offset stays where it was asked to be, inside the first remaining segment.
    assert read_offset_checkpoint(str(tmp_path / "log-start-offset-checkpoint"))[("orders", 0)] == inside_third
    # A checkpointed log start offset (DeleteRecords) is applied by the next run on its own.
    (tmp_path / "log-start-offset-checkpoint").write_text(f"0\n1\norders 0 {gen.bases[3]}\n")
    (plan,) = run(tmp_path)
    assert deleted_bases(plan) == [gen.bases[2]]
    assert check_consistent(gen.path) == gen.bases[3]


def test_log_start_offset_above_the_high_watermark_is_refused(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days(), high_watermark=10)
    before = file_hashes(gen.path)
    with pytest.raises(UsageError, match="above its high watermark 10"):
        run(tmp_path, log_start_offset=11)
    assert file_hashes(gen.path) == before


# --------------------------------------------------------------------------- high watermark


def test_high_watermark_below_the_log_end_stops_deletion(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days(), high_watermark=None)
    hw = gen.bases[2] + 1  # inside segment 2
    set_checkpoint(tmp_path / "replication-offset-checkpoint", "orders", 0, hw)
    (plan,) = run(tmp_path, flags={"ms": 0}, dry_run=True)
    assert deleted_bases(plan) == gen.bases[:2] and plan.high_watermark == hw
    # A high watermark exactly at a segment's base offset still lets the segment before it go.
    set_checkpoint(tmp_path / "replication-offset-checkpoint", "orders", 0, gen.bases[1])
    before = Snapshot(gen.path)
    (plan,) = run(tmp_path, flags={"ms": 0})
    assert deleted_bases(plan) == [0]
    before.check_survivors([0])
    check_consistent(gen.path)


def test_partition_missing_from_the_hw_checkpoint_gets_nothing_deleted(tmp_path: Path) -> None:
    make_partition(tmp_path, four_days(), topic="other")
    gen = make_partition(tmp_path, four_days(), topic="orders", write_hw=False)
    plans = run(tmp_path, flags={"ms": 0}, dry_run=True)
    plan = next(p for p in plans if p.partition.topic == "orders")
    assert plan.deletions == [] and plan.high_watermark == 0
    del gen


def test_no_hw_checkpoint_at_all_means_the_log_end(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days(), write_hw=False)
    (plan,) = run(tmp_path, flags={"ms": 0}, dry_run=True)
    assert plan.high_watermark == gen.leo and plan.roll_offset == gen.leo


# --------------------------------------------------------------------------- policies and combination


def test_compact_only_topics_get_only_the_log_start_offset_rule(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    overrides = "[ord*]\ncleanup.policy = compact\n"
    (plan,) = run(tmp_path, flags={"ms": 0, "retention_bytes": 0}, overrides=overrides, dry_run=True)
    assert plan.deletions == []
    (plan,) = run(tmp_path, flags={"ms": 0}, overrides=overrides, log_start_offset=gen.bases[2])
    assert deleted_bases(plan) == gen.bases[:2]
    # compact,delete includes delete: every rule applies.
    (plan,) = run(tmp_path, flags={"ms": 0}, overrides="[orders]\ncleanup.policy = compact,delete\n", dry_run=True)
    assert deleted_bases(plan) == gen.bases[2:]


def test_rules_combine_in_kafkas_order(tmp_path: Path) -> None:
    specs = [SegSpec(ts=T0 + i * DAY) for i in range(6)]
    gen = make_partition(tmp_path, specs)
    total = sum(gen.sizes)
    before = Snapshot(gen.path)
    # LSO rule takes segment 0; the size rule (sizes recomputed) segment 1; the time rule 2 and 3.
    retention_bytes = total - gen.sizes[0] - gen.sizes[1]
    now = T0 + 3 * DAY + 2000 + 2 * DAY + 1
    (plan,) = run(tmp_path, now=now, flags={"ms": 2 * DAY, "retention_bytes": retention_bytes},
                  log_start_offset=gen.bases[1])
    assert [(d.base_offset, d.rule) for d in plan.deletions] == [
        (gen.bases[0], RULE_LOG_START_OFFSET), (gen.bases[1], RULE_RETENTION_BYTES),
        (gen.bases[2], RULE_RETENTION_MS), (gen.bases[3], RULE_RETENTION_MS)]
    before.check_survivors(gen.bases[:4])
    assert check_consistent(gen.path) == gen.bases[4]
    assert read_leader_epoch_checkpoint(str(gen.path / "leader-epoch-checkpoint")) == [(0, gen.bases[4])]


# --------------------------------------------------------------------------- deletion mechanics


def test_snapshots_of_deleted_segments_go_and_others_stay(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    run(tmp_path, flags={"ms": 10 * DAY}, now=T0 + 2 * DAY + 2000 + 10 * DAY + 1)
    snaps = sorted(n for n in os.listdir(gen.path) if n.endswith(".snapshot"))
    assert snaps == [filename_prefix(o) + ".snapshot" for o in (gen.bases[3], gen.leo)]


def test_delete_delay_keeps_deleted_files_for_a_later_run(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    (plan,) = run(tmp_path, flags={"ms": 10 * DAY}, now=T0 + DAY + 2000 + 10 * DAY + 1, delay=60_000)
    kept = sorted(n for n in os.listdir(gen.path) if n.endswith(".deleted"))
    assert kept and all(n[:20] in (filename_prefix(0), filename_prefix(gen.bases[1])) for n in kept)
    assert len(plan.leftovers_kept) == len(kept)
    check_consistent(gen.path)  # the checkpoint does not wait for the physical deletion
    # Too young for a second run with the delay...
    (plan,) = run(tmp_path, delay=60_000, flags={"ms": -1})
    assert plan.deletions == [] and plan.leftovers == [] and len(os.listdir(gen.path)) > len(kept)
    assert sorted(n for n in os.listdir(gen.path) if n.endswith(".deleted")) == kept
    # ...old enough once the delay has passed (the age is the time since the rename).
    time.sleep(0.05)
    (plan,) = run(tmp_path, delay=10, flags={"ms": -1})
    # Removal order: a segment's other files before its .log.deleted marker.
    assert [os.path.basename(f) for f in plan.leftovers] == sorted(kept, key=lambda n: (n.endswith(".log.deleted"), n))
    assert not [n for n in os.listdir(gen.path) if n.endswith(".deleted")]


def test_interrupted_deletion_is_finished_from_the_log_deleted_marker(tmp_path: Path) -> None:
    gen = make_partition(tmp_path / "a", four_days())
    reference = tmp_path / "b"
    shutil.copytree(tmp_path / "a", reference)
    # An earlier run renamed segment 0's .log and was killed before its other files.
    log0 = gen.log(0)
    os.rename(log0, str(log0) + ".deleted")
    before = file_hashes(gen.path)
    (plan,) = run(tmp_path / "a", flags={"ms": -1})
    assert sorted(os.path.basename(f) for f in plan.pending) == [
        filename_prefix(0) + ".index", filename_prefix(0) + ".timeindex"]
    assert plan.checkpoint_offset == gen.bases[1]
    assert not [n for n in os.listdir(gen.path) if n.startswith(filename_prefix(0))]
    # Same result as deleting segment 0 in one go.
    run(reference, log_start_offset=gen.bases[1], flags={"ms": -1})
    assert file_hashes(gen.path) == file_hashes(reference / gen.path.name)
    assert before != file_hashes(gen.path)


def test_leader_epoch_truncation_from_start_matches_kafka() -> None:
    entries = [(0, 0), (1, 100), (3, 250), (4, 400)]
    assert truncate_epochs_from_start(entries, 0) == entries
    assert truncate_epochs_from_start(entries, 99) == [(0, 99), (1, 100), (3, 250), (4, 400)]
    assert truncate_epochs_from_start(entries, 100) == [(1, 100), (3, 250), (4, 400)]
    assert truncate_epochs_from_start(entries, 300) == [(3, 300), (4, 400)]
    assert truncate_epochs_from_start(entries, 500) == [(4, 500)]
    assert truncate_epochs_from_start([], 5) == []


# --------------------------------------------------------------------------- partitions left alone


def test_remote_storage_topics_and_the_metadata_log_are_skipped(tmp_path: Path) -> None:
    make_partition(tmp_path, four_days(), topic="tiered")
    make_partition(tmp_path, four_days(), topic="__cluster_metadata")
    plans = run(tmp_path, flags={"ms": 0}, overrides="[tiered]\nremote.storage.enable = true\n")
    assert all(p.skipped and not p.deletions for p in plans)
    assert all(len(Partition(str(p.partition.path)).segments) == 4 for p in plans)


def test_a_pending_swap_is_a_problem_and_nothing_changes(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    (gen.path / (filename_prefix(0) + ".log.swap")).write_bytes(b"")
    before = file_hashes(gen.path)
    (plan,) = run(tmp_path, flags={"ms": 0})
    assert plan.problem and ".swap" in plan.problem
    assert file_hashes(gen.path) == before


def test_corrupt_checkpoint_is_an_error_before_anything_changes(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, four_days())
    (tmp_path / "replication-offset-checkpoint").write_text("0\n2\norders 0 5\n")
    before = file_hashes(gen.path)
    with pytest.raises(CorruptCheckpointError):
        run(tmp_path, flags={"ms": 0})
    assert file_hashes(gen.path) == before


def test_kafka_written_corpus_partition_after_retention(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs", tmp_path / "logs", ignore=shutil.ignore_patterns("*-0"))
    shutil.copytree(CORPUS / "logs" / "time-roll-0", tmp_path / "logs" / "time-roll-0")
    part = tmp_path / "logs" / "time-roll-0"
    segments = Partition(str(part)).segments
    assert len(segments) > 2
    third_largest, _ = largest_timestamp(segments[2])
    second_largest, _ = largest_timestamp(segments[1])
    before = Snapshot(part)
    (plan,) = run(tmp_path / "logs", now=third_largest + 1000, flags={"ms": third_largest + 1000 - second_largest - 1})
    assert deleted_bases(plan) == [s.base_offset for s in segments[:2]]
    before.check_survivors([s.base_offset for s in segments[:2]])
    check_consistent(part, topic="time-roll")
