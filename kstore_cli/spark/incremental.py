"""``spark-export --incremental STATE_DIR``: each run exports exactly the records appended since the last
successful run, for cron.

The state (``STATE_DIR/kstore-incremental.json``) holds, per Kafka partition, the next offset to export and
the id of the last committed run. A run:

1. recovers: a run that was killed after it began (``kstore-incremental.pending.json`` names its job id) and
   did not commit its state has its files removed from the output (every file name carries the job id) and
   its staging directory dropped, so its records are exported again, once;
2. plans from each partition's next offset (a new partition: its earliest offset) to its log end offset at
   plan time (a live broker's half-written tail is not in it); retention that removed offsets not yet
   exported, a log that now ends before the next offset (truncated, replaced) and a partition that vanished
   are gaps: reported in the summary and the exit code, never silent;
3. writes the pending file (its job id and the end offsets), runs the planned tasks on the chosen engine
   (the arrow writer: files under ``_temporary/<job id>/``), moves each file into place, touches
   ``_SUCCESS``, then commits the state (temp file, fsync, rename, dir fsync) and removes the pending file.

A kill at any point leaves either the previous state with no file of the killed run visible after the next
run's recovery, or the new state with all of the run's files: each (topic, partition, offset) is in the
output once. Readers must ignore ``_temporary`` and hidden (``.``) files, as Spark and pyarrow do.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from kstore_cli.errors import CorruptDataError, UsageError
from kstore_cli.log import fileops
from kstore_cli.log.log_segment import read_next_offset
from kstore_cli.spark.options import by_topic, partition_json

STATE_FILE = "kstore-incremental.json"
PENDING_FILE = "kstore-incremental.pending.json"
STATE_VERSION = 1

#: A test hook: called with each step's name before the step (tests raise there to stop the run).
CRASH_HOOK: Optional[Callable[[str], None]] = None

Key = Tuple[str, int]


def _step(name: str) -> None:
    if CRASH_HOOK is not None:
        CRASH_HOOK(name)


class Gap:
    """Offsets that were not exported and never will be: removed by retention between runs, or a log that
    ends before the offset the last run stopped at, or a partition no longer there."""

    __slots__ = ("topic", "partition", "kind", "first", "last")

    def __init__(self, topic: str, partition: int, kind: str, first: int, last: Optional[int]) -> None:
        self.topic, self.partition, self.kind, self.first, self.last = topic, partition, kind, first, last

    @property
    def count(self) -> Optional[int]:
        """Records lost: known for retention only (a truncated log's offsets may come back)."""
        return self.last - self.first + 1 if self.kind == "retention" and self.last is not None else None

    def to_dict(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "kind": self.kind, "first_offset": self.first,
                "last_offset": self.last, "records": self.count}

    def text(self) -> str:
        where = f"{self.topic}-{self.partition}"
        if self.kind == "retention":
            return (f"{where}: offsets {self.first}..{self.last} ({self.count}) were removed (retention) before "
                    f"this run could export them")
        if self.kind == "truncated":
            return (f"{where}: the log now ends at offset {self.last + 1}, before offset {self.first} where the last "
                    f"run stopped (truncated or replaced): nothing is exported until it passes {self.first}")
        return f"{where}: the partition is gone (exported up to offset {self.first - 1})"


class State:
    """What the state dir remembers: each partition's next offset, the last committed job, runs so far."""

    def __init__(self, state_dir: str) -> None:
        self.dir = state_dir
        self.next: Dict[Key, int] = {}
        self.committed_job: Optional[str] = None
        self.output: Optional[str] = None
        self.runs = 0

    @classmethod
    def load(cls, state_dir: str) -> "State":
        state = cls(state_dir)
        path = os.path.join(state_dir, STATE_FILE)
        if not os.path.exists(path):
            return state
        data = _read_json(path)
        try:
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {STATE_VERSION}")
            state.committed_job, state.output, state.runs = data["committed_job"], data["output"], int(data["runs"])
            for topic, parts in data["next_offsets"].items():
                for p, offset in parts.items():
                    if not isinstance(offset, int) or offset < 0:
                        raise ValueError(f"next offset {offset!r} of {topic}-{p}")
                    state.next[(topic, int(p))] = offset
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptDataError(f"not kstore's incremental state: {exc}", path=path) from None
        return state

    def save(self) -> None:
        data = {"version": STATE_VERSION, "output": self.output, "committed_job": self.committed_job,
                "runs": self.runs, "next_offsets": by_topic(self.next)}
        fileops.atomic_write(os.path.join(self.dir, STATE_FILE), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptDataError(f"not kstore's incremental state: {exc}", path=path) from None


def recover(fs: Any, root: str, state: State) -> Optional[str]:
    """Undo a run that began but did not commit (its files out of the output, its staging dir dropped);
    the job id undone, if any (None too when the run committed its state but was stopped before it removed
    its pending file)."""
    import pyarrow.fs as pafs

    pending_path = os.path.join(state.dir, PENDING_FILE)
    if not os.path.exists(pending_path):
        return None
    pending = _read_json(pending_path)
    job = pending.get("job_id") if isinstance(pending, dict) else None
    if not isinstance(job, str) or len(job) != 32 or not all(c in "0123456789abcdef" for c in job):
        raise CorruptDataError(f"not kstore's pending run: job id {job!r}", path=pending_path)
    if job != state.committed_job:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        for info in infos:
            if info.type == pafs.FileType.File and f"-{job}." in info.base_name and "/_temporary/" not in info.path:
                fs.delete_file(info.path)
        try:
            fs.delete_dir(f"{root}/_temporary/{job}")
        except (FileNotFoundError, OSError):
            pass
    fileops.unlink(pending_path)
    fileops.fsync_dir(state.dir)
    return job if job != state.committed_job else None  # a committed run's pending file: only removed


def plan_offsets(targets: List[Any], state: State) -> Tuple[Dict[Key, Tuple[int, int]], List[Gap]]:
    """Per partition (start, end) of this run, and the gaps: `targets` are the selected partitions."""
    ranges: Dict[Key, Tuple[int, int]] = {}
    gaps: List[Gap] = []
    for target in targets:
        part = target.partition
        key = (part.topic, part.partition)
        if part.segments:
            earliest = part.segments[0].base_offset
            last = part.segments[-1]
            end = read_next_offset(last.log, last.base_offset)
        else:
            earliest = end = 0
        start = state.next.get(key, earliest)
        if start < earliest:
            gaps.append(Gap(part.topic, part.partition, "retention", start, earliest - 1))
            start = earliest
        if start > end:
            # Offsets at or past `end` may come back with other records: none is exported twice.
            gaps.append(Gap(part.topic, part.partition, "truncated", start, end - 1))
            end = start
        ranges[key] = (start, end)
    for key in sorted(set(state.next) - set(ranges)):
        gaps.append(Gap(key[0], key[1], "vanished", state.next[key], None))
    return ranges, gaps


def run_incremental(engine: Any, request: Any, state_dir: str, progress: Optional[Callable[..., None]] = None, *,
                    summary_of: Callable[[Any], Any], spark_metadata: Optional[str] = None) -> Any:
    """One incremental run of `request` on `engine` (spark/engines.py); the export's summary (`summary_of(plan)`:
    as every export starts it) with its gaps. `spark_metadata`: the Spark schema the files carry."""
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.plan import plan_read, select_partitions
    from kstore_cli.spark.write import filesystem

    if request.writer != "arrow":
        raise UsageError("--incremental commits through the arrow writer; drop --writer spark")
    if request.starting_offsets or request.ending_offsets or request.starting_timestamp or request.ending_timestamp:
        raise UsageError("--incremental takes its offsets from STATE_DIR; drop --starting-*/--ending-*")
    fileops.make_dirs(state_dir)
    state = State.load(state_dir)
    if state.output is not None and state.output != request.output:
        raise UsageError(f"{state_dir} holds the state of --output {state.output}, not of {request.output}")
    fs, root = filesystem(request.output)
    undone = recover(fs, root, state)
    targets = select_partitions(ReadOptions(request.reader_options()))
    ranges, gaps = plan_offsets(targets, state)
    request.starting_offsets, request.ending_offsets = (partition_json({k: pair[which] for k, pair in ranges.items()})
                                                        for which in (0, 1))
    try:
        plan = plan_read(ReadOptions(request.reader_options(min_partitions=engine.parallelism)))
    finally:
        request.starting_offsets = request.ending_offsets = None
    summary = summary_of(plan)
    summary.gaps = gaps
    if progress is not None:
        report, tasks_total, bytes_total = progress, len(plan.tasks), plan.bytes_in
        progress = lambda done, rows, size: report(done, tasks_total, rows, size, bytes_total)  # noqa: E731
        progress(0, 0, 0)
    job_id = uuid.uuid4().hex
    _step("pending")
    fileops.atomic_write(os.path.join(state_dir, PENDING_FILE),
                         json.dumps({"job_id": job_id, "output": request.output}).encode())
    written = run_and_move(engine, request, plan, job_id, fs, root, summary, progress, spark_metadata)
    state.next.update({key: end for key, (_start, end) in ranges.items()})
    state.committed_job, state.output, state.runs = job_id, request.output, state.runs + 1
    _step("state")
    state.save()
    _step("unpending")
    fileops.unlink(os.path.join(state_dir, PENDING_FILE))
    fileops.fsync_dir(state_dir)
    summary.incremental = {"state_dir": state_dir, "run": state.runs, "job_id": job_id, "recovered_job": undone,
                           "partitions": len(ranges), "files": len(written)}
    return summary


def run_and_move(engine: Any, request: Any, plan: Any, job_id: str, fs: Any, root: str, summary: Any,
                 progress: Optional[Callable[..., None]], spark_metadata: Optional[str], success: bool = True,
                 keep_partition_columns: bool = False) -> List[Dict]:
    """The planned tasks run on the engine into the job's staging dir, then each file moved into place (and
    ``_SUCCESS`` touched with `success`); the files' entries (write_task's), the summary's counts set."""
    from kstore_cli.spark.read import skipped_of
    from kstore_cli.spark.write import WriteJob, abort_job

    decoding = getattr(request, "decoding", None)
    job = WriteJob(request.output, job_id, request.include_headers, request.include_metadata, request.partition_by,
                   request.parquet_compression, spark_metadata if decoding is None else None,
                   request.on_corruption, decoding)
    job.keep_partition_columns = keep_partition_columns
    tasks = list(enumerate(plan.tasks))
    _step("tasks")
    try:
        written = engine.run_tasks(job, tasks, progress) if tasks else []
    except BaseException:
        engine.settle(job)
        abort_job(fs, root, job)
        raise
    summary.skipped = skipped_of(written)
    written = [w for w in written if "path" in w]
    staging = f"{root}/_temporary/{job_id}"
    for entry in written:
        _step("move")
        final = f"{root}/{entry['path']}"
        fs.create_dir(os.path.dirname(final), recursive=True)
        fs.move(f"{staging}/{entry['path']}", final)
    _step("success")
    fs.create_dir(root, recursive=True)
    if success:
        with fs.open_output_stream(f"{root}/_SUCCESS"):
            pass
    abort_job(fs, root, job)  # the emptied staging dir
    summary.parquet_files = len(written)
    summary.parquet_bytes = sum(w["bytes"] for w in written)
    summary.records = sum(w["rows"] for w in written)
    from kstore_cli.spark.decoded import dead_letter_count

    summary.dead_letters = dead_letter_count(written)
    return written
