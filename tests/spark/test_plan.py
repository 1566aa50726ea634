"""The planner and the task reader without Spark: bounds, pruning, byte ranges, transactions."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore_cli.errors import UsageError
from kstore_cli.log.logdir import Partition
from kstore_cli.record.reader import read_batches
from kstore_cli.spark.columns import arrow_schema
from kstore_cli.spark.options import ReadOptions
from kstore_cli.spark.plan import Pushed, plan_read
from kstore_cli.spark.read import read_task

from tests.spark.conftest import CORPUS_LOGS, TXN_PARTITION, arrow_rows, by_key, core_rows, transaction_outcomes


def rows_of(plan, **kw):
    import pyarrow as pa

    batches = [b for t in plan.tasks for b in read_task(t, **kw)]
    if not batches:
        return []
    return arrow_rows(pa.Table.from_batches(batches), headers=kw.get("include_headers", False))


def test_whole_corpus_reads_like_the_core():
    plan = plan_read(ReadOptions({"path": str(CORPUS_LOGS), "includeHeaders": "true"}))
    got = rows_of(plan, include_headers=True)
    assert len(got) > 6000
    assert by_key(got) == by_key(core_rows([CORPUS_LOGS], headers=True))


def test_arrow_batches_have_the_declared_schema(gen_dir):
    plan = plan_read(ReadOptions({"path": str(gen_dir / "orders-0"), "includeHeaders": "true",
                                  "includeMetadata": "true"}))
    batch = next(read_task(plan.tasks[0], include_headers=True, include_metadata=True))
    assert batch.schema == arrow_schema(True, True)
    assert str(batch.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"


def test_byte_ranges_start_at_batch_boundaries_and_read_the_same_rows(gen_dir):
    part = str(gen_dir / "orders-0")
    whole = plan_read(ReadOptions({"path": part}))
    split = plan_read(ReadOptions({"path": part, "maxBytesPerPartition": "4096"}))
    assert len(split.slices) > 3 * len(whole.slices)
    positions = {}
    for sl in split.slices:
        positions.setdefault(sl.log, set()).update(b.position for b in read_batches(sl.log))
    for sl in split.slices:
        assert sl.start in positions[sl.log] or sl.start == 0
        assert sl.end in positions[sl.log] or sl.end == os.path.getsize(sl.log)
    # Ranges of a segment tile it exactly.
    for log in positions:
        mine = sorted((s.start, s.end) for s in split.slices if s.log == log)
        assert mine[0][0] == 0 and mine[-1][1] == os.path.getsize(log)
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))
    assert rows_of(split) == rows_of(whole)
    assert by_key(rows_of(whole)) == by_key(core_rows([part]))


def test_offset_bounds_prune_segments_and_index_ranges(gen_dir):
    part = Partition(str(gen_dir / "orders-0"))
    assert len(part.segments) >= 4
    lo = part.segments[1].base_offset + 137
    hi = part.segments[2].base_offset + 11
    opts = {"path": part.path, "startingOffsets": json.dumps({"orders": {"0": lo}}),
            "endingOffsets": json.dumps({"orders": {"0": hi}})}
    plan = plan_read(ReadOptions(opts))
    logs = {sl.log for sl in plan.slices}
    assert logs == {part.segments[1].log, part.segments[2].log}
    first = [sl for sl in plan.slices if sl.log == part.segments[1].log]
    assert min(sl.start for sl in first) > 0  # the .index skipped the head of the segment
    last = [sl for sl in plan.slices if sl.log == part.segments[2].log]
    assert max(sl.end for sl in last) < os.path.getsize(part.segments[2].log)
    got = [r["offset"] for r in rows_of(plan)]
    assert got == list(range(lo, hi))


def test_timestamp_bounds_use_kafkas_offset_for_time(gen_dir):
    part = str(gen_dir / "clicks-1")
    rows = core_rows([part])
    t_start = rows[400]["timestamp"] // 1000
    t_end = rows[900]["timestamp"] // 1000
    plan = plan_read(ReadOptions({"path": part, "startingTimestamp": str(t_start), "endingTimestamp": str(t_end)}))
    got = [r["offset"] for r in rows_of(plan)]
    first = next(r["offset"] for r in rows if r["timestamp"] >= t_start * 1000)
    end = next(r["offset"] for r in rows if r["timestamp"] >= t_end * 1000)
    assert got == list(range(first, end))


def test_specific_offsets_must_name_every_partition(gen_dir):
    with pytest.raises(UsageError, match="must specify all TopicPartitions"):
        plan_read(ReadOptions({"path": str(gen_dir), "topics": "orders",
                               "startingOffsets": json.dumps({"orders": {"0": 5}})}))


@pytest.mark.parametrize("opts, message", [
    ({"startingOffsets": "latest"}, "can't be latest"),
    ({"endingOffsets": "earliest"}, "can't be earliest"),
    ({"startingOffsets": "{nope"}, "not JSON"),
    ({"kafka.isolation.level": "read_sometimes"}, "isolation level"),
    ({"startingTimestamp": "99999999999999"}, "No offset matched"),
])
def test_bad_options_are_usage_errors(opts, message):
    with pytest.raises(UsageError, match=message):
        plan_read(ReadOptions({"path": str(TXN_PARTITION), **opts}))


def test_read_committed_drops_exactly_aborted_and_open_transactions():
    outcome = transaction_outcomes(str(TXN_PARTITION))
    assert outcome["aborted"] and outcome["open"]
    all_rows = rows_of(plan_read(ReadOptions({"path": str(TXN_PARTITION)})))
    committed = rows_of(plan_read(ReadOptions({"path": str(TXN_PARTITION), "kafka.isolation.level": "read_committed"})))
    dropped = {r["offset"] for r in all_rows} - {r["offset"] for r in committed}
    assert dropped == outcome["aborted"] | outcome["open"]
    assert [r for r in all_rows if r["offset"] not in dropped] == committed


def test_pushed_filters_prune_partitions_and_offsets(gen_dir):
    pushed = Pushed()
    pushed.intersect_topics(["clicks"])
    pushed.intersect_partitions([2])
    pushed.lower_offset(1000)
    plan = plan_read(ReadOptions({"path": str(gen_dir)}), pushed)
    assert {(s.topic, s.partition) for s in plan.scans} == {("clicks", 2)}
    got = [r["offset"] for r in rows_of(plan)]
    assert got == list(range(1000, 1500))


# --------------------------------------------------------------------------- packing slices into tasks

def _slices(sizes):
    from kstore_cli.spark.plan import Slice

    out, pos = [], 0
    for size in sizes:
        out.append(Slice(None, "x.log", 0, pos, pos + size))
        pos += size
    return out


def test_four_near_equal_partitions_make_one_task_per_core():
    # The bench's spark input: 4 partitions of ~64 MB; filling tasks up to total/2 made 3 tasks
    # (two waves on 2 cores) because the first two were 20 KB over.
    from kstore_cli.spark.plan import _pack, _task_count

    sizes = [63851497, 63848067, 64034442, 63632167]
    for cores in (1, 2):
        opts = ReadOptions({"path": "x", "minPartitions": str(cores), "maxBytesPerPartition": str(128 << 20)})
        count = _task_count(sum(sizes), opts)
        assert count == 2
        tasks = _pack(_slices(sizes), count)
        assert [len(t.slices) for t in tasks] == [2, 2]


def test_task_count_is_a_multiple_of_min_partitions_and_respects_max_bytes():
    from kstore_cli.spark.plan import _task_count

    mib = 1 << 20
    assert _task_count(300 * mib, ReadOptions({"path": "x"})) == 5  # 64 MiB by default
    assert _task_count(300 * mib, ReadOptions({"path": "x", "minPartitions": "2"})) == 6
    assert _task_count(10, ReadOptions({"path": "x", "minPartitions": "8"})) == 8
    assert _task_count(10 * mib, ReadOptions({"path": "x", "maxBytesPerPartition": str(mib)})) == 10


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=0, max_size=40), st.integers(1, 12))
def test_packing_keeps_log_order_and_balances(sizes, count):
    from kstore_cli.spark.plan import _pack

    slices = _slices(sizes)
    tasks = _pack(slices, count)
    assert [sl for t in tasks for sl in t.slices] == slices  # every slice once, in log order
    assert len(tasks) <= count and all(t.slices for t in tasks)
    if len(slices) >= count:
        assert len(tasks) == count
    if tasks:
        # No task holds more than an equal share plus one slice.
        assert max(t.size for t in tasks) <= sum(sizes) / len(tasks) + max(sizes)
