"""Quarantine dirs of same-named partitions of two data dirs that share a quarantine root stay apart: one
run never tidies, resumes or finishes the other's (recover --jobs runs them at the same time)."""

from __future__ import annotations

import json
from pathlib import Path

from kstore_cli.log import fileops
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.log.logdir import Partition
from kstore_cli.operations.quarantine import (
    MANIFEST,
    default_quarantine_root,
    new_quarantine_dir,
    quarantine_dirs_of,
    tidy_quarantine,
)
from kstore_cli.operations.salvage import _unfinished


def _partition(data: Path) -> Partition:
    part = data / "orders-0"
    part.mkdir(parents=True)
    (part / f"{0:020d}.log").write_bytes(build_v2_batch([RecordSpec(0, 1, b"k", b"v")]))
    return Partition(str(part))


def test_a_partitions_runs_leave_a_same_named_partitions_quarantine_alone(tmp_path: Path) -> None:
    a, b = _partition(tmp_path / "data1"), _partition(tmp_path / "data2")
    root = default_quarantine_root(a)
    assert root == default_quarantine_root(b)  # side by side: one quarantine root
    partition_root = f"{root}/orders-0"
    qa, qb = new_quarantine_dir(partition_root, a), new_quarantine_dir(partition_root, b, "salvage")
    for qdir in (qa, qb):
        fileops.make_dirs(qdir, like=a.path)
    in_flight = Path(qb) / (MANIFEST + fileops.TMP_SUFFIX)  # b's run is writing its manifest right now
    in_flight.write_text("{}")
    (Path(qa) / ("x" + fileops.TMP_SUFFIX)).write_text("left by a killed run of a")
    tidy_quarantine(partition_root, a)
    assert in_flight.exists() and not Path(qa).exists()  # a's leftovers gone, b's files untouched
    in_flight.rename(Path(qb) / MANIFEST)
    (Path(qb) / MANIFEST).write_text(json.dumps({"partition": b.path, "kind": "salvage", "finished": False}))
    assert _unfinished(partition_root, a) == [] and _unfinished(partition_root, b) == [qb]
    assert quarantine_dirs_of(partition_root, a) == [] and quarantine_dirs_of(partition_root, b) == [qb]
    # A dir named before owner tags is the partition's whose manifest names it.
    legacy = Path(partition_root) / "20260101T000000000000Z"
    legacy.mkdir()
    (legacy / MANIFEST).write_text(json.dumps({"partition": a.path}))
    assert quarantine_dirs_of(partition_root, a) == [str(legacy)]
