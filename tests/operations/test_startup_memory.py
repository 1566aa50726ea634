"""Issue 34: what doctor's and verify-index's survey (and inspect's resolution) hold stays flat in the partition
count: a data dir's partitions are held by name in one string, its checkpoints as arrays, so that 10,000
partitions cost well under 100 bytes each (they cost about 330 as PartitionDir objects, paths, target tuples
and a set of paths). bench/scale.py measures the peak RSS of the real commands."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Callable, Tuple

from kstore_cli.log.checkpoint import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from kstore_cli.log.logdir import resolve_partitions
from kstore_cli.operations.startup import survey

#: Bytes a partition may add to what is held (names, checkpoint entries, topic ID positions) ...
HELD_PER_PARTITION = 100
#: ... and to the peak on the way (the names are sorted a run at a time, never all as objects).
PEAK_PER_PARTITION = 250


def _data_dir(root: Path, partitions: int) -> Path:
    """`partitions` partition dirs of 30 topics (empty: the survey's cost is its own, not the segments'),
    with both checkpoints naming each, and a partition.metadata in each."""
    root.mkdir()
    (root / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\n")
    entries = [(f"orders.events.eu-west-{i % 30}", i // 30) for i in range(partitions)]
    for topic, p in entries:
        d = root / f"{topic}-{p}"
        d.mkdir()
        (d / "partition.metadata").write_text(f"version: 0\ntopic_id: {'AAAAAAAAAAAAAAAAAAAA%02d' % (hash(topic) % 97)}\n")
    text = "0\n%d\n" % partitions + "".join(f"{t} {p} {p * 1000}\n" for t, p in entries)
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        (root / name).write_text(text)
    return root


def _held_and_peak(make: Callable[[], object]) -> Tuple[int, int, object]:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held - before, peak - before, made


def test_the_survey_holds_under_100_bytes_a_partition(tmp_path: Path) -> None:
    small, big = _data_dir(tmp_path / "small", 300), _data_dir(tmp_path / "big", 3300)
    survey([str(small)], lazy=True)  # the modules it imports loaded first
    held_small, peak_small, found_small = _held_and_peak(lambda: survey([str(small)], lazy=True))
    held_big, peak_big, found_big = _held_and_peak(lambda: survey([str(big)], lazy=True))
    assert len(found_small.targets) == 300 and len(found_big.targets) == 3300  # type: ignore[attr-defined]
    info = next(iter(found_big.data_dirs.values()))  # type: ignore[attr-defined]
    assert sum(len(paths) for by_id in info.topic_ids.values() for paths in by_id.values()) == 3300
    per_partition = (held_big - held_small) / 3000
    assert per_partition < HELD_PER_PARTITION, f"{per_partition:.0f} bytes held a partition"
    assert (peak_big - peak_small) / 3000 < PEAK_PER_PARTITION, f"{(peak_big - peak_small) / 3000:.0f} at the peak"


def test_inspects_resolution_holds_under_100_bytes_a_partition(tmp_path: Path) -> None:
    small, big = _data_dir(tmp_path / "small", 300), _data_dir(tmp_path / "big", 3300)
    resolve_partitions([str(small)])
    held_small, peak_small, _ = _held_and_peak(lambda: resolve_partitions([str(small)]))
    held_big, peak_big, found = _held_and_peak(lambda: resolve_partitions([str(big)]))
    assert len(found) == 3300  # type: ignore[arg-type]
    assert (held_big - held_small) / 3000 < 40  # names only: no checkpoints read
    assert (peak_big - peak_small) / 3000 < PEAK_PER_PARTITION
