"""Who runs spark-export's planned tasks: Spark's executors, or local worker processes (no JVM).

Both engines run the same :class:`~kstore_cli.spark.plan.Task` list through the same task writer
(:func:`~kstore_cli.spark.write.write_task`) and hand back what each task wrote; the caller commits
the job (:func:`~kstore_cli.spark.write.commit_job`) the same way for both, so the files are the
same row for row. ``engine.run_tasks(job, tasks, progress)`` is the one call the export (and any
other job writing planned tasks) needs:

- :class:`SparkEngine`: each task one partition of a Spark job (any ``--master``; kstore shipped to
  the executors by :func:`~kstore_cli.spark.register`).
- :class:`LocalEngine` (``--engine arrow``): each task in a pool of forked local processes
  (:func:`~kstore_cli.operations.runner.stream`), ``jobs`` at a time; needs pyarrow, not pyspark
  nor Java. A task that fails fails the job once the tasks already running have stopped.

`progress`, when given, is called as ``progress(tasks_done, rows_written, input_bytes_done)`` with
running totals while the tasks run (from the driver's own thread or, for Spark, a polling thread).
"""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.spark.plan import Task
from kstore_cli.spark.write import WriteJob, write_partition, write_task

#: The engines of ``spark-export --engine``.
ENGINES = ("spark", "arrow")

#: progress(tasks_done, rows_written, input_bytes_done)
Progress = Callable[[int, int, int], None]

IndexedTasks = List[Tuple[int, Task]]


class TaskFailedError(KstoreError):
    """A local task failed with an error that is not kstore's own (its class and message on one line)."""


class Engine:
    """What runs the planned tasks of a write job."""

    name = ""
    #: how many tasks run at once (the planner makes a multiple of it)
    parallelism = 1

    def prepare(self, source: bool = True) -> None:
        """Ready the workers (ship kstore's code) once the plan is made; with `source`, also register
        the ``kstore`` data source (only Spark's writer reads through it)."""

    def time_zone(self) -> Optional[str]:
        """The session time zone the rows' dates are taken in (None: UTC)."""
        return None

    def run_tasks(self, job: WriteJob, tasks: IndexedTasks, progress: Optional[Progress] = None) -> List[Dict]:
        """Run every task; what each wrote (:func:`write_task`'s entries, in task order)."""
        raise NotImplementedError

    def settle(self, job: WriteJob) -> None:
        """After a failed run: return once no task of `job` can write any more."""


class LocalEngine(Engine):
    """The planned tasks in `jobs` forked local processes (default: the usable cores)."""

    name = "arrow"

    def __init__(self, jobs: Optional[int] = None) -> None:
        from kstore_cli.operations.runner import usable_cores

        self.parallelism = max(1, jobs or usable_cores())

    def run_tasks(self, job: WriteJob, tasks: IndexedTasks, progress: Optional[Progress] = None) -> List[Dict]:
        from kstore_cli.operations.runner import stream

        written: List[Dict] = []
        done = rows = size = 0
        # stream() shuts its pool down (tasks not started cancelled, running ones waited for) on an error
        results = stream(partial(_write_one, job), tasks, jobs=self.parallelism)
        try:
            for (_index, task), entries in zip(tasks, results):
                written += entries
                done += 1
                rows += sum(e.get("rows", 0) for e in entries)
                size += task.size
                if progress is not None:
                    progress(done, rows, size)
        except KstoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - a worker's own error: one line with its class
            lines = str(exc).strip().splitlines()
            raise TaskFailedError(f"a task failed: {type(exc).__name__}: {lines[0] if lines else ''}") from exc
        return written


def _write_one(job: WriteJob, indexed: Tuple[int, Task]) -> List[Dict]:
    return write_task(job, indexed[0], indexed[1])


class SparkEngine(Engine):
    """The planned tasks as the partitions of one Spark job on `spark`'s executors (`spark`: a session, or a
    bare SparkContext where only the arrow writer runs: building a session costs ~2 s of start-up)."""

    name = "spark"

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.sc = getattr(spark, "sparkContext", spark)
        self.parallelism = self.sc.defaultParallelism

    def prepare(self, source: bool = True) -> None:
        from kstore_cli.spark import package_zip, register

        if source:
            register(self.spark)
        else:
            # The data source's registration builds the session state (catalog, analyzer): 0.8-2 s of
            # start-up that tasks run as an RDD never use.
            self.sc.addPyFile(package_zip())

    def time_zone(self) -> Optional[str]:
        if self.sc is self.spark:
            return self.sc.getConf().get("spark.sql.session.timeZone", "UTC")
        return self.spark.conf.get("spark.sql.session.timeZone", "UTC")

    def run_tasks(self, job: WriteJob, tasks: IndexedTasks, progress: Optional[Progress] = None) -> List[Dict]:
        """Each task one partition of the job's group; what each wrote (or skipped)."""
        sc = self.sc
        counters = [sc.accumulator(0) for _ in range(3)] if progress is not None else None
        previous = {key: sc.getLocalProperty(key) for key in _JOB_GROUP_PROPERTIES}
        sc.setJobGroup(job.job_id, "kstore spark-export (arrow writer)")
        try:
            rdd = sc.parallelize(tasks, len(tasks))
            with Poller(progress, lambda: tuple(c.value for c in counters) if counters else (0, 0, 0)):
                return rdd.mapPartitions(partial(_counted_partition, job, counters)).collect()
        finally:
            for key, value in previous.items():
                sc.setLocalProperty(key, value)  # None removes it

    def settle(self, job: WriteJob) -> None:
        # Spark fails the job at the first failed task while others are still being killed; they
        # could write into the staging directory after it is removed.
        wait_for_group(self.sc, job.job_id)


def _counted_partition(job: WriteJob, counters: Optional[list], indexed: Iterable[Tuple[int, Task]]) -> Iterator[Dict]:
    """mapPartitions body: write the partition's tasks; count tasks, rows and input bytes (accumulators)."""
    if counters is None:
        yield from write_partition(job, indexed)
        return
    for index, task in indexed:
        entries = write_task(job, index, task)
        counters[0].add(1)
        counters[1].add(sum(e.get("rows", 0) for e in entries))
        counters[2].add(task.size)
        yield from entries


class Poller:
    """While open, calls ``progress(*read())`` every `interval` seconds from a daemon thread (and once at the end)."""

    def __init__(self, progress: Optional[Progress], read: Callable[[], tuple], interval: float = 0.5,
                 final: Optional[Callable[[], tuple]] = None) -> None:
        self.progress = progress
        self.read = read
        self.final = final or read
        self.interval = interval
        self.stop = threading.Event()
        self.thread: Optional[threading.Thread] = None

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self._call()

    def _call(self, read: Optional[Callable[[], tuple]] = None) -> None:
        try:
            self.progress(*(read or self.read)())  # type: ignore[misc]
        except Exception:  # noqa: BLE001 - progress is a courtesy; a session going away must not fail the job
            pass

    def __enter__(self) -> "Poller":
        if self.progress is not None:
            self.thread = threading.Thread(target=self._run, name="kstore-progress", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()
            if exc[0] is None:
                self._call(self.final)


def spark_stage_progress(spark: Any, tasks_total: int, bytes_total: int) -> Callable[[], tuple]:
    """For Spark's own writer (no per-task counts): (tasks done, -1 rows unknown, input bytes estimated
    from the share of tasks done), read from the status tracker's active stages."""
    tracker = spark.sparkContext.statusTracker()
    seen: Dict[int, int] = {}

    def read() -> tuple:
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                seen[sid] = info.numCompletedTasks
        done = min(tasks_total, sum(seen.values()))
        return done, -1, bytes_total * done // max(1, tasks_total)

    return read


#: The thread-local properties SparkContext.setJobGroup sets.
_JOB_GROUP_PROPERTIES = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")


def wait_for_group(sc: Any, group: str, timeout: float = 60.0) -> None:
    """Wait (at most `timeout` s) until no task of the SparkContext's job group is running."""
    try:
        tracker = sc.statusTracker()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stages = [tracker.getStageInfo(sid) for jid in tracker.getJobIdsForGroup(group)
                      for sid in (getattr(tracker.getJobInfo(jid), "stageIds", None) or [])]
            if not any(stage and stage.numActiveTasks for stage in stages):
                return
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - cleanup is best effort: a session that is gone has no tasks
        return


def check_engine(request: Any, engine: str, jobs: Optional[int]) -> Tuple[str, Optional[int]]:
    """(engine, jobs) of an export request, or UsageError: the arrow engine runs the arrow writer on
    this machine only, so Spark's writer, a --master and --spark-conf settings do not apply to it."""
    from kstore_cli.errors import UsageError

    if engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    if engine == "spark":
        if jobs is not None:
            raise UsageError("--jobs is for --engine arrow; Spark's parallelism comes from --master (local[N])")
        return engine, jobs
    if request.master != "local[*]":
        raise UsageError("--master is for --engine spark; --engine arrow runs on this machine (--jobs N)")
    if request.spark_conf:
        raise UsageError("--spark-conf is for --engine spark; --engine arrow starts no Spark")
    if request.requested_writer == "auto":
        request.writer = "arrow"  # the arrow engine's only writer (any output pyarrow can open)
    if request.writer != "arrow":
        why = "--writer spark" if request.requested_writer == "spark" else f"auto picks Spark's writer for {request.output}"
        raise UsageError(f"--engine arrow writes with pyarrow (the arrow writer), but {why}; use --engine spark")
    return engine, jobs


def _spark_type(t: Any) -> Any:
    """The JSON value of the Spark type of Arrow type `t` (as a DDL-parsed Spark schema has it: all nullable)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [{"name": f.name, "type": _spark_type(f.type), "nullable": True,
                                               "metadata": {}} for f in t]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "elementType": _spark_type(t.value_type), "containsNull": True}
    for test, name in ((pa.types.is_binary, "binary"), (pa.types.is_string, "string"), (pa.types.is_int8, "byte"),
                       (pa.types.is_int16, "short"), (pa.types.is_int32, "integer"), (pa.types.is_int64, "long"),
                       (pa.types.is_boolean, "boolean"), (pa.types.is_timestamp, "timestamp"),
                       (pa.types.is_date32, "date"), (pa.types.is_float64, "double"), (pa.types.is_float32, "float")):
        if test(t):
            return name
    raise ValueError(f"no Spark type for {t}")


def spark_schema_json(schema: Any, leave_out: Iterable[str] = ()) -> str:
    """Spark's ``StructType.json()`` of an Arrow schema (without the `leave_out` columns), with no JVM nor
    pyspark: the schema Spark's writer keeps in each Parquet file's metadata (so both engines write it)."""
    import json

    import pyarrow as pa

    kept = pa.struct([f for f in schema if f.name not in set(leave_out)])
    return json.dumps(_spark_type(kept), separators=(",", ":"), sort_keys=True)
