"""spark-export --incremental (kstore_cli.spark.incremental): three appends between three runs export every
record once; a run stopped at each step of its commit and run again still gives each (topic, partition,
offset) once and none missing; retention, truncation and a vanished partition between runs are gaps (exit 1).
Runs on the arrow engine (no JVM)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

pytest.importorskip("pyarrow")

from kstore_cli.record.builder import RecordSpec, build_v2_batch  # noqa: E402
from kstore_cli.spark import incremental  # noqa: E402
from kstore_cli.spark.engines import LocalEngine  # noqa: E402
from kstore_cli.spark.export import ExportRequest, export_on  # noqa: E402

T0 = 1_700_000_000_000
PARTITIONS = ("events-0", "events-1")


def append(root: Path, partition: str, first: int, count: int, new_segment: bool = False) -> None:
    """`count` records from offset `first`, one batch each: onto the partition's last segment, or into a new
    segment named `first` (a roll)."""
    part = root / partition
    part.mkdir(parents=True, exist_ok=True)
    logs = sorted(part.glob("*.log"))
    log = part / f"{first:020d}.log" if new_segment or not logs else logs[-1]
    with open(log, "ab") as f:
        for offset in range(first, first + count):
            f.write(build_v2_batch([RecordSpec(offset, T0 + offset, b"k%d" % offset, b"%s@%d" % (partition.encode(), offset))],
                                   base_offset=offset))


def exported(out: Path) -> List[Tuple[str, int, int]]:
    import pyarrow.dataset as pads

    table = pads.dataset(str(out), format="parquet", partitioning="hive",
                         ignore_prefixes=["_", "."]).to_table(columns=["topic", "partition", "offset", "value"])
    rows = table.to_pylist()
    for r in rows:
        assert r["value"] == b"%s-%d@%d" % (r["topic"].encode(), r["partition"], r["offset"])
    return sorted((r["topic"], r["partition"], r["offset"]) for r in rows)


def run(root: Path, out: Path, state: Path, **kwargs):
    request = ExportRequest([str(root)], str(out), engine="arrow", jobs=1, incremental=str(state), **kwargs)
    request.validate()
    return export_on(LocalEngine(1), request)


def expected(sizes: Dict[str, int]) -> List[Tuple[str, int, int]]:
    return sorted(("events", int(p.rsplit("-", 1)[1]), o) for p, n in sizes.items() for o in range(n))


def test_three_appends_between_three_runs_export_each_record_once(tmp_path):
    root, out, state = tmp_path / "data", tmp_path / "out", tmp_path / "state"
    append(root, "events-0", 0, 5)
    append(root, "events-1", 0, 3)
    first = run(root, out, state)
    assert first.records == 8 and first.gaps == [] and first.incremental["run"] == 1
    assert exported(out) == expected({"events-0": 5, "events-1": 3})
    append(root, "events-0", 5, 4)                    # onto the active segment
    append(root, "events-1", 3, 2, new_segment=True)  # a roll
    second = run(root, out, state)
    assert second.records == 6
    assert exported(out) == expected({"events-0": 9, "events-1": 5})
    third = run(root, out, state)                     # nothing new: nothing added
    assert third.records == 0 and exported(out) == expected({"events-0": 9, "events-1": 5})
    append(root, "events-2", 0, 2)                    # a new partition: from its start
    append(root, "events-0", 9, 1, new_segment=True)
    fourth = run(root, out, state)
    assert fourth.records == 3 and len(exported(out)) == 17
    saved = json.loads((state / incremental.STATE_FILE).read_text())
    assert saved["next_offsets"] == {"events": {"0": 10, "1": 5, "2": 2}} and saved["runs"] == 4
    assert not (state / incremental.PENDING_FILE).exists() and not (out / "_temporary").exists()


class Stop(Exception):
    """A kill at a step of the run."""


def _steps_of_a_run(root: Path, tmp: Path) -> List[str]:
    seen: List[str] = []
    incremental.CRASH_HOOK = seen.append
    try:
        run(root, tmp / "o", tmp / "s")
    finally:
        incremental.CRASH_HOOK = None
    return seen


def test_a_run_stopped_at_any_step_and_run_again_exports_each_record_once(tmp_path):
    """Every step of each of four runs (pending, tasks, every file's move, _SUCCESS, state, unpending): stopped
    there, then run again."""
    root = tmp_path / "template"
    append(root, "events-0", 0, 4)
    append(root, "events-1", 0, 2)
    points = 0
    for n_runs in (1, 2, 3, 4):
        probe = tmp_path / f"probe{n_runs}"
        shutil.copytree(root, probe / "data")
        for r in range(1, n_runs):
            run(probe / "data", probe / "o", probe / "s")
            append(probe / "data", "events-0", 4 + 3 * (r - 1), 3, new_segment=r == 2)
        steps = _steps_of_a_run(probe / "data", probe)
        for k in range(len(steps)):
            points += 1
            case = tmp_path / f"run{n_runs}-step{k}"
            shutil.copytree(root, case / "data")
            data, out, state = case / "data", case / "out", case / "state"
            sizes = {"events-0": 4, "events-1": 2}
            for r in range(1, n_runs):
                run(data, out, state)
                append(data, "events-0", 4 + 3 * (r - 1), 3, new_segment=r == 2)
                sizes["events-0"] += 3
            calls = iter(range(len(steps)))

            def stop_at(step: str, k=k) -> None:
                if next(calls) == k:
                    raise Stop(step)

            incremental.CRASH_HOOK = stop_at
            try:
                with pytest.raises(Stop):
                    run(data, out, state)
            finally:
                incremental.CRASH_HOOK = None
            rerun = run(data, out, state)
            assert exported(out) == expected(sizes), (n_runs, k, steps[k])
            assert (rerun.incremental["recovered_job"] is not None) == (steps[k] not in ("pending", "unpending"))
    assert points >= 20


def test_retention_truncation_and_a_vanished_partition_are_gaps_exit_1(tmp_path, capsys):
    from kstore_cli.cli import main

    root, out, state = tmp_path / "data", tmp_path / "out", tmp_path / "state"
    append(root, "events-0", 0, 3)
    append(root, "events-1", 0, 4)
    append(root, "events-2", 0, 1)
    run(root, out, state)
    append(root, "events-0", 3, 3, new_segment=True)
    append(root, "events-0", 6, 2, new_segment=True)
    (root / "events-0" / f"{0:020d}.log").unlink()   # retention: 0..2 were exported already
    (root / "events-0" / f"{3:020d}.log").unlink()   # ... 3..5 were not
    shutil.rmtree(root / "events-1")
    append(root, "events-1", 0, 2)                   # replaced: now ends before offset 4
    shutil.rmtree(root / "events-2")
    with pytest.raises(SystemExit) as exit_info:
        main(["spark-export", str(root), "-o", str(out), "--engine", "arrow", "--incremental", str(state), "--json"])
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out.splitlines()[0])
    gaps = {(g["partition"], g["kind"]): (g["first_offset"], g["last_offset"], g["records"])
            for g in summary["incremental"]["gaps"]}
    assert gaps == {(0, "retention"): (3, 5, 3), (1, "truncated"): (4, 1, None), (2, "vanished"): (1, None, None)}
    assert captured.err.startswith("kstore: error: events-0: offsets 3..5 (3) were removed (retention)")
    assert exported(out) == sorted([("events", 0, o) for o in (0, 1, 2, 6, 7)] + [("events", 1, o) for o in range(4)]
                                   + [("events", 2, 0)])
    # the replaced partition's offsets 0..1 are not exported again; past 4 they are
    append(root, "events-1", 2, 4)
    run(root, out, state)
    assert [o for t, p, o in exported(out) if p == 1] == [0, 1, 2, 3, 4, 5]


def test_usage_errors(tmp_path):
    from kstore_cli.errors import UsageError

    root = tmp_path / "data"
    append(root, "events-0", 0, 1)
    with pytest.raises(UsageError, match="--mode overwrite would remove"):
        ExportRequest([str(root)], str(tmp_path / "o"), engine="arrow", incremental=str(tmp_path / "s"),
                      mode="overwrite").validate()
    run(root, tmp_path / "o", tmp_path / "s")
    with pytest.raises(UsageError, match="holds the state of --output"):
        run(root, tmp_path / "other", tmp_path / "s")
    with pytest.raises(UsageError, match="takes its offsets from STATE_DIR"):
        run(root, tmp_path / "o", tmp_path / "s", starting_offsets="earliest")


def test_incremental_runs_on_spark_too(spark, tmp_path):
    from kstore_cli.spark.engines import SparkEngine

    root, out, state = tmp_path / "data", tmp_path / "out", tmp_path / "state"
    append(root, "events-0", 0, 3)
    for first in (3, 5):
        request = ExportRequest([str(root)], str(out), incremental=str(state))
        request.validate()
        summary = export_on(SparkEngine(spark), request)
        assert summary.engine == "spark" and summary.records == (3 if first == 3 else 2)
        append(root, "events-0", first, 2, new_segment=True)
    assert exported(out) == expected({"events-0": 5})
