"""One runner for the commands that work partition by partition (recover, rebuild-index, salvage, restore,
retain, compact, convert-format): the PATHS resolved, what the mutating scope rule leaves alone set aside
(:mod:`~kstore_cli.log.scope`), the partitions grouped by data dir, every data dir's ``.lock`` taken first
(a live broker's lock is respected unless ``force``; none for a dry run), and a function run per partition,
in this process or in a pool of forked workers bound to it.

A run's outcome (:class:`Outcome`) is typed: its rows (each with ``to_dict`` for ``--json``), the
``(partition, problem)`` pairs and the errors the command reports on stderr after them, and its exit status.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import islice
from typing import (Callable, ContextManager, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    TypeVar)

from kstore_cli.errors import ExitStatus, KstoreError, UsageError
from kstore_cli.log import fileops, locks, scope
from kstore_cli.log.logdir import Target, group_by_data_dir, resolve_some

T = TypeVar("T")
R = TypeVar("R")


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask): the default of every ``--jobs``."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


#: What the forked workers of :func:`_forked_map` run: (work, items), inherited at the fork.
_FORKED: Optional[Tuple[Callable, Sequence]] = None


def _forked_chunk(start: int, stop: int) -> list:
    work, items = _FORKED  # type: ignore[misc] - set before the pool forks
    return [work(items[i]) for i in range(start, stop)]


def _forked_map(work: Callable[[T], R], items: Sequence[T], jobs: int, initargs: tuple) -> Iterator[R]:
    """`work` on each item in a pool of `jobs` forked processes (each first runs fileops.bind_to_parent with
    `initargs`), started now; results in the items' order as they come. The workers inherit `work` and
    `items` at the fork: only a chunk's bounds and its results cross between processes (`work` may be a
    closure; a result and an error it raises must pickle). A worker that dies (killed, out of memory) is an
    error, not a hang."""
    global _FORKED
    _FORKED = (work, items)
    jobs = min(jobs, len(items))
    # fork, explicitly: not spawned nor from a forkserver
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                               initializer=fileops.bind_to_parent, initargs=initargs)
    # Chunks of up to 64 items (one round trip each: at 16 a chunk, receiving 10,000 small partitions' results
    # kept the parent busier than either worker; small enough, an eighth of a worker's share at most, that the
    # workers end together), a window of them submitted ahead (the workers fork and start now): results not yet
    # read are held for that window only, not for every item (10,000 partitions).
    chunk = max(1, min(64, len(items) // (8 * jobs)))
    try:
        results = _windowed(pool, len(items), chunk, window=8 * jobs)
        next(results)  # the first window submitted
    except BaseException:
        pool.shutdown(cancel_futures=True)
        _FORKED = None
        raise
    return _Results(pool, results)


def _windowed(pool: ProcessPoolExecutor, n: int, chunk: int, window: int) -> Iterator:
    """The results of items 0..n-1 in chunks, `window` chunks in flight; the first chunks are submitted at
    once, before the first result is asked for (a generator: started by its first next())."""
    starts = iter(range(0, n, chunk))
    pending = deque(pool.submit(_forked_chunk, s, min(s + chunk, n)) for s in islice(starts, window))
    yield None  # submitted: the caller goes on while the workers run
    while pending:
        done = pending.popleft().result()
        start = next(starts, None)
        if start is not None:
            pending.append(pool.submit(_forked_chunk, start, min(start + chunk, n)))
        yield from done


class _Results:
    """The results of a started pool, in order; the pool is shut down (work not started cancelled) once they
    are all read, on an error, or when the iterator is dropped unread (a command that failed before)."""

    def __init__(self, pool: ProcessPoolExecutor, results: Iterator) -> None:
        self._pool: Optional[ProcessPoolExecutor] = pool
        self._results = results

    def __iter__(self) -> "_Results":
        return self

    def __next__(self):
        try:
            return next(self._results)
        except BrokenProcessPool as exc:
            self.close()
            raise KstoreError(f"a --jobs worker process died ({exc}); rerun with --jobs 1 to see why") from None
        except BaseException:  # StopIteration included: every result read
            self.close()
            raise

    def close(self) -> None:
        global _FORKED
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
            _FORKED = None

    def __del__(self) -> None:
        self.close()


def stream(work: Callable[[T], R], items: Sequence[T], *, jobs: int = 1) -> Iterator[R]:
    """`work` on each item, results yielded in the items' order, each as soon as it and those before it are
    done: what a read-only command renders while later partitions are still being checked. With `jobs` > 1
    and several items, in that many forked processes bound to this one (killed with it; see
    :func:`_forked_map`), started at once: this process may do other work before it asks for the first
    result. No lock is taken for them: read-only work only (a command that writes runs
    :meth:`PartitionRunner.map` under its locks)."""
    if jobs <= 1 or len(items) <= 1:
        return map(work, items)
    return _forked_map(work, items, jobs, (os.getpid(),))


@dataclass
class Selection:
    """The targets a command works on and the ``(partition, reason)`` of those a data dir's walk left alone."""

    paths: List[str]
    targets: List[Target]
    skipped: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def groups(self) -> Dict[str, List[Target]]:
        """The targets keyed by their data dir (one lock each), in the order first named."""
        return group_by_data_dir(self.targets)


def select(paths: Iterable[str], topics: Optional[str], command: str, *, whole_partitions: bool = False,
           skip_left_alone: bool = True, quarantine_dir: Optional[str] = None, in_place: bool = True) -> Selection:
    """PATHS resolved (a usage error when nothing is found). `whole_partitions`: a ``.log`` given is a usage
    error. A PATH naming a log no command may change is refused; in a data dir's walk such a log is skipped
    (`skip_left_alone`; else the command skips it itself). Not `in_place` (the logs are only read: output
    elsewhere), a partition dir that is a symlink is taken too. A --quarantine-dir given holds to the
    output-dir rule."""
    paths = list(paths)
    targets = resolve_some(paths, topics)
    if whole_partitions and any(t.only is not None for t in targets):
        raise UsageError(f"{command} works on whole partitions: give a partition or data directory, not a .log file")
    skipped: List[Tuple[str, str]] = []
    if skip_left_alone:
        targets, skipped = scope.mutable_targets(paths, targets, command, in_place=in_place)
    else:
        scope.refuse_named(paths, targets, command)
    scope.check_quarantine_dir(quarantine_dir, paths, targets)
    return Selection(paths, targets, skipped)


class PartitionRunner:
    """Work on partitions under their data dirs' locks: `partitions_by_data_dir` maps each data dir to the
    partition dirs about to change; `force` takes a lock a running process holds; `lock=False` (a dry run)
    takes none."""

    def __init__(self, partitions_by_data_dir: Mapping[str, Iterable[str]], *, force: bool = False,
                 lock: bool = True) -> None:
        self.partitions_by_data_dir = {d: list(ps) for d, ps in partitions_by_data_dir.items()}
        self.force = force
        self.lock = lock

    @classmethod
    def for_targets(cls, groups: Mapping[str, Iterable[Target]], *, force: bool = False,
                    lock: bool = True) -> "PartitionRunner":
        """A runner over `groups` (data dir -> targets, as :attr:`Selection.groups`). A data dir's child that is
        a symlink is left unchanged (scope.symlinked_reason): no lock is taken, nor a ``.lock`` made, for it."""
        changed = {d: [t.partition.path for t in ts if scope.symlinked_reason(t.partition.path) is None]
                   for d, ts in groups.items()}
        return cls({d: paths for d, paths in changed.items() if paths}, force=force, lock=lock)

    def locked(self) -> ContextManager[None]:
        """Every data dir's ``.lock``, in path order, held until the block ends (:func:`locks.lock_data_dirs`)."""
        return locks.lock_data_dirs(self.partitions_by_data_dir, force=self.force, enabled=self.lock)

    def in_use(self, data_dir: str) -> bool:
        """In a dry run (no lock taken): whether a running process holds the data dir (a real run would refuse)."""
        return not self.lock and not self.force and locks.is_locked(data_dir)

    def map(self, work: Callable[[T], R], items: Sequence[T], *, jobs: int = 1,
            on_result: Optional[Callable[[R], None]] = None) -> List[R]:
        """`work` on each item, results in the items' order; the caller holds the locks (:meth:`locked`).
        With `jobs` > 1 and several items, in a pool of that many processes (`work` and the items pickled)."""
        if jobs == 1 or len(items) <= 1:
            results = []
            for item in items:
                results.append(work(item))
                if on_result is not None:
                    on_result(results[-1])
            return results
        # Workers are forked (explicitly: not spawned nor from a forkserver) by this process, which holds
        # the data dirs' .lock for them: an fcntl lock is not inherited, so each worker is bound to its
        # parent (fileops.bind_to_parent: killed by the kernel when the parent dies, and no file
        # operation once it is gone) and no write happens without the lock held by its living parent.
        # The lock shared by the workers serializes their updates of the data dirs' checkpoints.
        results = []
        for result in _forked_map(work, items, jobs, (os.getpid(), multiprocessing.get_context("fork").Lock())):
            results.append(result)
            if on_result is not None:
                on_result(result)
        return results

    def each_target(self, groups: Mapping[str, Iterable[Target]], work: Callable[[Target, str], R], *,
                    on_result: Optional[Callable[[R], None]] = None, jobs: int = 1) -> List[R]:
        """Under the locks, `work(target, data_dir)` on every target of `groups`, data dir by data dir in
        their order (in `jobs` processes); `on_result` is told each result, in that order, as it is done."""
        with self.locked():
            return self.map(lambda pair: work(*pair), [(t, d) for d, ts in groups.items() for t in ts],
                            on_result=on_result, jobs=jobs)


class Outcome:
    """What a per-partition run hands its command to emit: after the rows, each ``(partition, problem)``
    is a line on stderr and each error its own line; the exit status is the worst one. A run's class
    says its own rows (each with ``to_dict`` for --json) and overrides what applies."""

    #: the partitions a data dir's walk left alone (scope), reported with the rows
    skipped: Sequence[Tuple[str, str]] = ()
    #: files that could not be read or written, each with its own exit status (3), after the rows
    errors: Sequence[KstoreError] = ()

    def problem_lines(self) -> List[Tuple[str, str]]:
        """The ``(partition, problem)`` pairs reported on stderr ("kstore: <partition>: <problem>")."""
        return []

    def problems_status(self) -> int:
        """The exit status when there is a problem but no error (0: none)."""
        return int(ExitStatus.PROBLEMS) if self.problem_lines() else 0

    @property
    def exit_status(self) -> int:
        """The worst of the errors' statuses, else :meth:`problems_status`."""
        if self.errors:
            return max(int(e.exit_status) for e in self.errors)
        return self.problems_status() or (int(ExitStatus.PROBLEMS) if scope.unhandled(self.skipped) else 0)

