"""operations/runner.py: select's scope rule, PartitionRunner's locks and worker pool, Outcome's exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Sequence, Tuple

import pytest

from kstore_cli.errors import (
    CorruptDataError, ExitStatus, FileUnreadableError, KstoreError, LogDirLockedError, UsageError,
)
from kstore_cli.log.scope import RAFT_LOG_REASON
from kstore_cli.operations.runner import Outcome, PartitionRunner, select
from tests.conftest import lock_held
from tests.log.partition_factory import SegSpec, make_partition

_PROBE = ("import sys\nfrom kstore_cli.log.locks import is_locked\n"
          "print('held' if is_locked(sys.argv[1]) else 'free')\n")


def _held_by_another_process(data_dir: str) -> bool:
    """Whether the data dir's .lock is held, seen from another process (an fcntl lock is per process)."""
    out = subprocess.run([sys.executable, "-c", _PROBE, data_dir], capture_output=True, text=True, check=True,
                         cwd=str(Path(__file__).resolve().parents[2]))
    return out.stdout.strip() == "held"


def _data_dir(tmp_path: Path, topics: Sequence[Tuple[str, int]] = (("orders", 0),)) -> Path:
    data = tmp_path / "data"
    for topic, partition in topics:
        make_partition(data, [SegSpec(batches=2, per_batch=2)], topic=topic, partition=partition)
    return data


# --------------------------------------------------------------------------- locks


def test_a_held_lock_makes_a_locking_run_refuse_and_force_runs_it(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    selection = select([str(data)], None, "recover")
    ran: List[str] = []
    with lock_held(data):
        with pytest.raises(LogDirLockedError) as refused:
            PartitionRunner.for_targets(selection.groups).each_target(
                selection.groups, lambda t, d: ran.append(t.partition.name))
        assert ran == []  # refused before any partition ran
        assert refused.value.exit_status == ExitStatus.PROBLEMS == 1
        assert refused.value.path == str(data.resolve() / ".lock")
        assert "the log dir is locked by a running process" in str(refused.value)
        assert "--force" in str(refused.value)
        runner = PartitionRunner.for_targets(selection.groups)
        assert not runner.in_use(str(data))  # a locking run never calls itself "in use": it refuses

        forced = PartitionRunner.for_targets(selection.groups, force=True)
        assert forced.each_target(selection.groups, lambda t, d: t.partition.name) == ["orders-0"]
        dry = PartitionRunner.for_targets(selection.groups, lock=False)
        assert dry.in_use(str(data))  # a dry run reports what a real run would refuse
    assert not PartitionRunner.for_targets(selection.groups, lock=False).in_use(str(data))


def test_a_locking_run_holds_the_lock_while_it_works(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    selection = select([str(data)], None, "recover")
    seen = PartitionRunner.for_targets(selection.groups).each_target(
        selection.groups, lambda t, d: _held_by_another_process(d))
    assert seen == [True]
    assert not _held_by_another_process(str(data))  # released after the block


def test_a_dry_run_takes_no_lock(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    assert not (data / ".lock").exists()
    selection = select([str(data)], None, "recover")
    runner = PartitionRunner.for_targets(selection.groups, lock=False)
    seen = runner.each_target(selection.groups, lambda t, d: (os.path.lexists(os.path.join(d, ".lock")),
                                                               _held_by_another_process(d)))
    assert seen == [(False, False)]
    assert not (data / ".lock").exists()
    # An existing .lock is not taken either.
    (data / ".lock").write_bytes(b"")
    seen = runner.each_target(selection.groups, lambda t, d: _held_by_another_process(d))
    assert seen == [False]


# --------------------------------------------------------------------------- the worker pool


def _touch_and_report(partition: str) -> Tuple[str, int, int]:
    """Worker: append a line to the partition's marker (one line per run), later partitions done first."""
    index = int(partition.rsplit("-", 1)[1])
    time.sleep(0.05 * (4 - index))
    with open(os.path.join(partition, "runs.txt"), "a") as marker:
        marker.write(f"{os.getpid()}\n")
    return os.path.basename(partition), index * index, os.getpid()


def test_jobs_runs_every_partition_once_with_results_in_order(tmp_path: Path) -> None:
    data = _data_dir(tmp_path, [("orders", p) for p in range(4)])
    selection = select([str(data)], None, "recover")
    partitions = [t.partition.path for t in selection.targets]
    assert len(partitions) == 4
    runner = PartitionRunner.for_targets(selection.groups)

    told: List[Tuple[str, int, int]] = []
    with runner.locked():
        parallel = runner.map(_touch_and_report, partitions, jobs=2, on_result=told.append)
    assert told == parallel
    for p in partitions:
        assert len(Path(p, "runs.txt").read_text().splitlines()) == 1
    assert {pid for _, _, pid in parallel} - {os.getpid()}  # run by workers, not this process

    with runner.locked():
        serial = runner.map(_touch_and_report, partitions, jobs=1)
    assert {pid for _, _, pid in serial} == {os.getpid()}
    assert [r[:2] for r in parallel] == [r[:2] for r in serial] == [
        ("orders-0", 0), ("orders-1", 1), ("orders-2", 4), ("orders-3", 9)]
    for p in partitions:
        assert len(Path(p, "runs.txt").read_text().splitlines()) == 2


# --------------------------------------------------------------------------- select's scope rule


def test_select_skips_the_metadata_log_in_a_data_dir_walk(tmp_path: Path) -> None:
    data = _data_dir(tmp_path, [("orders", 0), ("__cluster_metadata", 0), ("orders", 1)])
    selection = select([str(data)], None, "recover")
    assert [t.partition.name for t in selection.targets] == ["orders-0", "orders-1"]
    assert selection.skipped == [(str(data / "__cluster_metadata-0"), RAFT_LOG_REASON)]
    assert list(selection.groups) == [str(data)]

    # skip_left_alone=False: the command skips it itself, so it stays among the targets.
    kept = select([str(data)], None, "recover", skip_left_alone=False)
    assert "__cluster_metadata-0" in [t.partition.name for t in kept.targets]
    assert kept.skipped == []


@pytest.mark.parametrize("skip_left_alone", [True, False])
def test_select_refuses_the_metadata_log_named_directly(tmp_path: Path, skip_left_alone: bool) -> None:
    data = _data_dir(tmp_path, [("orders", 0), ("__cluster_metadata", 0)])
    named = data / "__cluster_metadata-0"
    for path in (named, named / "00000000000000000000.log"):
        with pytest.raises(UsageError) as refused:
            select([str(path)], None, "recover", skip_left_alone=skip_left_alone)
        assert refused.value.exit_status == ExitStatus.USAGE == 2
        assert str(refused.value).startswith(f"{named}: recover does not change __cluster_metadata-0: ")


def test_select_whole_partitions_refuses_a_log_file(tmp_path: Path) -> None:
    data = _data_dir(tmp_path)
    log = data / "orders-0" / "00000000000000000000.log"
    assert [t.only for t in select([str(log)], None, "recover").targets] == [0]
    with pytest.raises(UsageError, match="works on whole partitions"):
        select([str(log)], None, "rebuild-index", whole_partitions=True)


def test_select_with_nothing_found_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError):
        select([str(tmp_path / "empty")], None, "recover")


# --------------------------------------------------------------------------- Outcome


class _Run(Outcome):
    def __init__(self, problems: Sequence[Tuple[str, str]] = (), errors: Sequence[KstoreError] = ()) -> None:
        self.problems = list(problems)
        self.errors = list(errors)

    def problem_lines(self) -> List[Tuple[str, str]]:
        return self.problems


def test_outcome_exit_status() -> None:
    assert _Run().exit_status == 0
    assert Outcome().exit_status == 0
    assert _Run(problems=[("orders-0", "2 bytes of garbage")]).exit_status == 1
    unreadable = FileUnreadableError("cannot read", path="orders-0/00000000000000000000.log")
    assert _Run(errors=[unreadable]).exit_status == 3
    # Errors decide alone, the worst of them; problems count only without errors.
    assert _Run(problems=[("orders-0", "x")], errors=[unreadable]).exit_status == 3
    assert _Run(errors=[CorruptDataError("bad"), unreadable, CorruptDataError("bad")]).exit_status == 3
    assert _Run(errors=[CorruptDataError("bad")]).exit_status == 1
    assert _Run(errors=[UsageError("bad option")]).exit_status == 2


# --------------------------------------------------------------------------- stream (read-only --jobs)


class _Odd(KstoreError):
    """An error whose __init__ takes other arguments than KstoreError's: it must still cross processes."""

    def __init__(self, n: int) -> None:
        super().__init__(f"item {n} is odd", path=f"/x/{n}", position=n)


def test_stream_yields_in_the_items_order_from_worker_processes() -> None:
    from kstore_cli.operations.runner import stream

    parent = os.getpid()
    items = list(range(40))
    # A closure over this process's state: the workers inherit it at the fork, nothing of it is pickled.
    seen = {"offset": 1000}

    def work(n: int) -> Tuple[int, int]:
        if n % 7 == 3:
            time.sleep(0.01)  # later items finish first: the order is still the items'
        return n + seen["offset"], os.getpid()

    results = list(stream(work, items, jobs=3))
    assert [r for r, _ in results] == [n + 1000 for n in items]
    assert parent not in {pid for _, pid in results}  # run in forked workers
    assert len({pid for _, pid in results}) > 1
    assert [r for r, _ in stream(work, items, jobs=1)] == [n + 1000 for n in items]
    assert {pid for _, pid in stream(work, items, jobs=1)} == {parent}


def test_stream_raises_a_workers_error_with_its_class_and_fields() -> None:
    from kstore_cli.operations.runner import stream

    def work(n: int) -> int:
        if n == 5:
            raise _Odd(n)
        return n

    got: List[int] = []
    with pytest.raises(_Odd) as raised:
        for n in stream(work, list(range(12)), jobs=2):
            got.append(n)
    assert got == [0, 1, 2, 3, 4]  # every result before the failing item, none after
    assert str(raised.value) == "/x/5 at byte 5: item 5 is odd" and raised.value.exit_status == ExitStatus.PROBLEMS
