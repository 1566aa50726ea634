"""Message format conversion: rewrite a partition's batches into another magic and/or codec,
keeping every offset and timestamp.

A partition is converted into new ``.cleaned`` segments (:class:`~.writer.PartitionWriter`),
swapped in with Kafka's protocol (:mod:`.swap`) in place, or installed in a mirror directory.
Segment boundaries and names follow the source unless ``segment_bytes`` re-rolls; the first
segment keeps the source's first base offset, and when dropped control batches would pull the
log end offset back, an empty segment at the old log end offset keeps it (as after a roll).

The per-batch rules are :mod:`.convert_batches`'s; the options and counts :mod:`.convert_options`'s.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Deque, Iterable, Iterator, List, Optional, Sequence, Tuple

from kstore_cli.codecs import CODEC_NAMES
from kstore_cli.errors import CorruptRecordError, KstoreError, UsageError
from kstore_cli.log import fileops, names, scope, swap
from kstore_cli.record.batch import Batch
from kstore_cli.log.logdir import Partition, Segment, Target, group_by_data_dir, is_partition_dir
from kstore_cli.record.reader import RELEASE_EVERY, iterate_source, open_source, read_batches, release_pages
from kstore_cli.log.snapshot import build_snapshot, read_snapshot
from kstore_cli.log.writer import PartitionWriter
from kstore_cli.operations.recovery import state_at_segment
from kstore_cli.operations.runner import PartitionRunner
from kstore_cli.operations.convert_batches import PENDING, BatchConverter, Output, convert_batches
from kstore_cli.operations.convert_options import LOSS_DESCRIPTIONS, ConvertOptions, ConvertStats, LossyConversionError

__all__ = [
    "LOSS_DESCRIPTIONS", "BatchConverter", "ConvertOptions", "ConvertRun", "ConvertStats", "LossyConversionError",
    "PartitionResult", "check_destination", "check_output_dir", "convert_batches", "convert_partition",
    "convert_targets", "copy_data_dir_files", "needs_conversion", "output_guard",
]


# --------------------------------------------------------------------------- partitions


def needs_conversion(segments: Sequence[Segment], opts: ConvertOptions) -> bool:
    """Whether any batch differs from the target (headers only; regrouping always counts)."""
    if opts.regroup or opts.segment_bytes is not None:
        return True
    for seg in segments:
        for batch in read_batches(seg.log):
            if batch.magic != opts.to_magic:
                return True
            if opts.codec is not None and batch.compression != opts.codec:
                if batch.magic >= 2 and (batch.is_control or batch.count <= 0):
                    continue
                return True
    return False


class PartitionResult:
    """What converting one partition (or one segment of it) did."""

    def __init__(self, partition: Partition, destination: Optional[str]) -> None:
        self.partition = partition
        self.destination = destination
        self.stats = ConvertStats()
        #: "converted", "unchanged" (already in the target format), "would convert" (dry run).
        self.status = "converted"
        self.leftovers = None  # swap.LeftoverReport when leftovers were resolved first
        self.new_segments: List[int] = []
        self.empty_tail_segment: Optional[int] = None

    def to_dict(self) -> dict:
        out = {"type": "partition", "partition": self.partition.path, "destination": self.destination,
               "status": self.status, "new_segments": self.new_segments}
        out.update(self.stats.to_dict())
        if self.empty_tail_segment is not None:
            out["empty_segment_at_log_end"] = self.empty_tail_segment
        if self.leftovers is not None and self.leftovers.outcome is not None:
            out["leftovers"] = self.leftovers.to_dict()
        return out


def _empty_snapshots(snapshots: Sequence[str], stats: ConvertStats) -> List[Tuple[str, bytes]]:
    """Snapshots that hold producers (which legacy data cannot have): replaced by empty ones."""
    out = []
    empty = build_snapshot([])
    for path in snapshots:
        try:
            has = bool(read_snapshot(path).producers)
        except KstoreError:
            has = True
        if has:
            out.append((path, empty))
    if out:
        stats.losses["producer_snapshots"] += len(out)
    return out


def convert_partition(
    target: Target,
    opts: ConvertOptions,
    *,
    output_root: Optional[str] = None,
    dry_run: bool = False,
    progress: Optional[Callable[[int], None]] = None,
) -> PartitionResult:
    """Convert one partition (or the one segment a ``.log`` PATH named).

    In place (`output_root` None): leftovers of an interrupted run are resolved first (LogLoader's
    rules), new segments are written as ``.cleaned`` and swapped in. With `output_root`: the
    partition is written to ``<output_root>/<partition name>/`` (which must hold no segments), with
    its snapshots, leader-epoch checkpoint and partition.metadata. `dry_run` writes nothing.
    """
    in_place = output_root is None
    target, report = _resolve_leftovers(target, in_place, dry_run)
    partition = target.partition
    segments = target.segments
    dest = partition.path if in_place else os.path.join(os.path.abspath(output_root), partition.name)
    result = PartitionResult(partition, dest)
    result.leftovers = report
    result.stats.segments_in = len(segments)
    is_whole = target.only is None
    if opts.strict and opts.to_magic < 2 and is_whole:
        _refuse_lossy_snapshots(partition, opts)
    if in_place and not dry_run and not needs_conversion(segments, opts):
        _count_unchanged(result, segments, opts, is_whole, progress)
        return result
    created = False
    if not in_place and not dry_run:
        created = not os.path.isdir(dest)
        _prepare_output_dir(dest)
    try:
        new, old_next, writer = _write_segments(result, target, opts, None if dry_run else dest, progress)
    except KstoreError:
        if created:
            _remove_if_empty(dest)  # a refused conversion leaves no empty partition directory behind
        raise
    if dry_run:
        result.status = "would convert"
        return result
    snapshots = sorted(partition.snapshots.values()) if is_whole else []
    if in_place:
        if not new:
            result.status = "unchanged"
            return result
        last_of_partition = bool(segments) and segments[-1] is partition.segments[-1]
        _install_in_place(result, writer, new, segments, snapshots, opts, old_next if last_of_partition else None)
    else:
        _install_in_mirror(result, new, snapshots, opts)
    return result


def _resolve_leftovers(target: Target, in_place: bool, dry_run: bool) -> tuple:
    """(target, leftover report): in place, an interrupted run's leftovers are resolved first (a
    changed partition is read again); a mirror's source must not hold .swap files."""
    partition = target.partition
    if not in_place:
        if any(p.endswith(names.SWAP_SUFFIX) for p in partition.leftovers):
            raise UsageError("the partition holds .swap files of an interrupted replacement; let a broker (or "
                             "kstore convert-format --in-place) resolve them first", path=partition.path)
        return target, None
    report = swap.resolve_leftovers(partition.path, dry_run=dry_run)
    if report.changed and not dry_run:
        target = Target(Partition(partition.path), target.only)
    return target, report


def _refuse_lossy_snapshots(partition: Partition, opts: ConvertOptions) -> None:
    """--strict down to v0/v1: a snapshot holding producers would be emptied."""
    for path in sorted(partition.snapshots.values()):
        try:
            has = bool(read_snapshot(path).producers)
        except KstoreError:
            has = True
        if has:
            raise LossyConversionError(
                f"--strict: converting to magic {opts.to_magic} would lose information: "
                f"{LOSS_DESCRIPTIONS['producer_snapshots']}", path=path)


def _count_unchanged(result: PartitionResult, segments: Sequence[Segment], opts: ConvertOptions, is_whole: bool,
                     progress: Optional[Callable[[int], None]]) -> None:
    """Already in the target format: count every batch as unchanged (snapshots still emptied for v0/v1)."""
    result.status = "unchanged"
    stats = result.stats
    for seg in segments:
        for batch in read_batches(seg.log):
            stats.batches_in += 1
            stats.batches_out += 1
            stats.unchanged_batches += 1
            stats.bytes_in += batch.size
            n = batch.record_count()
            stats.records_in += n
            stats.records_out += n
    stats.bytes_out = stats.bytes_in
    stats.segments_out = len(segments)
    if opts.to_magic < 2 and is_whole:
        for path, data in _empty_snapshots(sorted(result.partition.snapshots.values()), stats):
            fileops.atomic_write(path, data)
    if progress is not None:
        progress(sum(os.path.getsize(s.log) for s in segments))


def _remove_if_empty(directory: str) -> None:
    """Remove a directory this run created, if nothing is in it; quietly (the caller is raising its own error)."""
    try:
        if not os.listdir(directory):
            fileops.remove_empty_dir(directory)
    except (OSError, KstoreError):
        pass


def _prepare_output_dir(dest: str) -> None:
    fileops.make_dirs(dest)
    swap.resolve_leftovers(dest)  # our own .cleaned files of an earlier, interrupted run
    if Partition(dest).segments:
        raise UsageError("the output partition directory already holds segments; remove it first", path=dest)


def _write_segments(result: PartitionResult, target: Target, opts: ConvertOptions, dest: Optional[str],
                    progress: Optional[Callable[[int], None]]) -> tuple:
    """Convert the target's segments into new ones (none written when dest is None): (new segments,
    the old log end offset, the closed writer). The writer's files are removed on any error."""
    partition, segments = target.partition, target.segments
    writer = PartitionWriter(
        dest,
        segment_bytes=opts.segment_bytes,
        index_interval_bytes=opts.index_interval_bytes,
        txn_state=(lambda: state_at_segment(partition, segments[0])) if segments else None,
    )
    # The converting thread is one of the jobs (it inflates legacy wrappers and encodes records): a worker
    # per job besides it put three busy threads on two cores, 13% more CPU for 25% more wall time at 100 B.
    executor = ThreadPoolExecutor(opts.jobs - 1, thread_name_prefix="kstore-convert") if opts.jobs > 1 else None
    try:
        converter = BatchConverter(opts, result.stats, executor)
        old_next = _SegmentCopier(writer, converter, opts, progress).run(segments)
        if segments and segments[-1] is partition.segments[-1] and old_next is not None:
            nxt = writer.next_offset
            if nxt is None or nxt < old_next:
                if writer.current_base_offset is None or writer.current_base_offset < old_next:
                    writer.start_segment(old_next, mtime=os.path.getmtime(segments[-1].log))
                    result.empty_tail_segment = old_next
        new = writer.close()
    except BaseException:
        if dest is not None:
            writer.abort()
        raise
    finally:
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
    result.stats.segments_out = len(new)
    result.stats.bytes_out = writer.bytes_written
    result.new_segments = [s.base_offset for s in new]
    return new, old_next, writer


class _SegmentCopier:
    """Feeds each source segment's batches through the converter into the writer, segment by segment.

    Converting to magic 2, runs of plain legacy entries go through the converter's fast path
    (:meth:`BatchConverter.legacy_run`); the regular path, batch by batch, takes over where it stops
    and hands back at the next entry it could take. With the converter's executor, a bounded
    pipeline: the record tables of the next few source batches are decompressed on the pool while
    this thread converts, and output batches are compressed there while earlier ones are written. Everything
    is consumed in file order (a batch's error surfaces where it would without the pool, and the writer sees
    the same sequence). In flight at most: ``16 * jobs`` source batches of up to ``jobs`` MiB in all (beyond
    the next one), and ``32 * jobs`` output batches. The queues are that deep because a pool thread waits up
    to the interpreter's switch interval (5 ms) for the GIL to hand its result back.
    """

    def __init__(self, writer: PartitionWriter, converter: BatchConverter, opts: ConvertOptions,
                 progress: Optional[Callable[[int], None]]) -> None:
        self.writer = writer
        self.converter = converter
        self.opts = opts
        self.progress = progress
        self.pending_start: Optional[int] = None
        self.mtime: Optional[float] = None
        pooled = converter.executor is not None
        self.read_ahead = 16 * opts.jobs if pooled else 0
        self.read_ahead_bytes = opts.jobs << 20
        self.write_behind = 32 * opts.jobs if pooled else 0
        self.outputs: Deque[Output] = deque()
        self.reported = 0  # the current segment's bytes reported to `progress`
        self.released = 0  # and its pages released

    def run(self, segments: Sequence[Segment]) -> Optional[int]:
        """Returns the source's next offset after its last segment (None without segments)."""
        writer, progress = self.writer, self.progress
        # The first new segment keeps the first old base offset (an interrupted swap resolves only then).
        self.pending_start = segments[0].base_offset if segments else None
        old_next = None
        for i, seg in enumerate(segments):
            self.mtime = os.path.getmtime(seg.log)
            if self.opts.segment_bytes is None and writer.current_base_offset is not None:
                self.pending_start = seg.base_offset
            seg_next = seg.base_offset
            writer.set_mtime(self.mtime)
            buf, path = open_source(seg.log)
            end = len(buf)
            self.reported = self.released = 0
            pos = 0
            framed = 0  # where the last complete batch ends
            fast = self.converter.runs_legacy
            while True:
                if fast:
                    pos, last_offset = self._legacy_run(buf, pos, end)
                    if last_offset is not None:
                        seg_next = last_offset + 1
                    framed = pos
                    if pos >= end:
                        break
                pos, seg_next, framed = self._regular(buf, pos, end, path, seg_next, framed, fast)
                if pos is None:
                    break
            if framed < end:
                # The framing stops silently at a partial trailing batch (a write cut short): converting
                # would drop those bytes, so they are refused, as recovery would truncate them.
                raise CorruptRecordError(
                    f"{end - framed} bytes at the end do not frame a complete batch (a write cut short?); "
                    "converting would drop them: run `kstore recover` (it quarantines them) first",
                    path=path, position=framed)
            self.emit(self.converter.flush())
            self.drain(0)  # this segment's outputs all written before the next segment starts
            if self.pending_start is not None and i == len(segments) - 1:
                writer.start_segment(self.pending_start, mtime=self.mtime)  # keep an empty last segment
                self.pending_start = None
            old_next = seg_next
            if progress is not None:
                progress(os.path.getsize(seg.log) - self.reported)
        return old_next

    def _advance(self, buf: memoryview, pos: int) -> None:
        """Progress and page release up to `pos` (converted: its pages are not needed again). Pages are
        released here, behind the batch being converted, not by the framing: with read-ahead that would
        drop pages of batches still queued, and the pool threads would fault them back in for good."""
        if pos - self.released >= RELEASE_EVERY:
            release_pages(buf, self.released, pos)
            self.released = pos
        if self.progress is not None and pos - self.reported >= (4 << 20):
            self.progress(pos - self.reported)
            self.reported = pos

    def _legacy_run(self, buf: memoryview, pos: int, end: int) -> Tuple[int, Optional[int]]:
        """The converter's fast path from `pos`: (where it stopped, the last offset it took or None)."""
        converter = self.converter
        converter.run_pos = pos
        for out in converter.legacy_run(buf, pos, end):
            self._queue(out)
            self._advance(buf, converter.run_pos)
        self._advance(buf, converter.run_pos)
        return converter.run_pos, converter.run_last_offset

    def _regular(self, buf: memoryview, pos: int, end: int, path: Optional[str], seg_next: int, framed: int,
                 fast: bool) -> Tuple[Optional[int], int, int]:
        """Batch by batch from `pos`; with `fast`, up to the next batch the fast path takes (beyond the
        first). Returns (where the fast path goes on, or None at the end; the next offset; where the
        last complete batch ends)."""
        converter = self.converter
        source = iterate_source(buf, pos, end, path, check_crc=True, release=False)
        for batch, table in self._read_ahead(source, converter.takes_run if fast else None):
            if fast and batch.position > pos and converter.takes_run(batch):
                return batch.position, seg_next, framed
            self._advance(buf, batch.position)
            # A batch whose CRC fails is refused, as Kafka's LogValidator refuses it: rewriting it would
            # give damaged bytes a fresh, valid CRC (or copy the bad one into the output).
            batch.ensure_valid()
            batch.ensure_valid_offsets()  # nor are offsets Kafka rejects copied into the output's names
            seg_next = batch.last_offset + 1
            framed = batch.position + batch.size
            self.emit(converter.feed(batch, table))
        return None, seg_next, framed

    def _read_ahead(self, batches: Iterable[Batch],
                    stop: Optional[Callable[[Batch], bool]] = None) -> Iterator[Tuple[Batch, Optional[Future]]]:
        """(batch, its record table started on the pool or None), up to `read_ahead` batches ahead; no
        further than a batch `stop` holds (beyond the first), where the consumer hands over to the fast
        path: nothing is started for batches it would not convert."""
        if not self.read_ahead:
            for batch in batches:
                yield batch, None
            return
        converter = self.converter
        ahead: Deque[Tuple[Batch, Optional[Future]]] = deque()
        size = 0  # source bytes in `ahead`
        first = True
        for batch in batches:
            if stop is not None and not first and stop(batch):
                ahead.append((batch, None))
                break
            first = False
            pool = converter.pool_for(batch.size) if converter.wants_table(batch) else None
            ahead.append((batch, None if pool is None else pool.submit(batch.record_table)))
            size += batch.size
            while len(ahead) > self.read_ahead or (size > self.read_ahead_bytes and len(ahead) > 1):
                size -= ahead[0][0].size
                yield ahead.popleft()
        while ahead:
            yield ahead.popleft()

    def emit(self, outputs: Iterator[Output]) -> None:
        for out in outputs:
            self._queue(out)

    def _queue(self, out: Output) -> None:
        queue = self.outputs
        queue.append(out)
        if len(queue) > self.write_behind:
            self.drain(self.write_behind)
        elif isinstance(out[2], Batch):
            self.drain(0)  # a source batch copied is written now: its pages are released behind it

    def drain(self, keep: int) -> None:
        """Write queued outputs, oldest first, until `keep` remain (waiting for their compression)."""
        writer, queue = self.writer, self.outputs
        while len(queue) > keep:
            data, first, batch = queue.popleft()
            if self.pending_start is not None:
                writer.start_segment(self.pending_start, mtime=self.mtime)
                self.pending_start = None
            if batch is not None:
                writer.append(batch.result() if isinstance(batch, PENDING) else batch, first)
            else:
                writer.append_bytes(data.result() if isinstance(data, PENDING) else data, first)


def _install_in_place(result: PartitionResult, writer: PartitionWriter, new: list, segments: Sequence[Segment], snapshots: List[str],
                      opts: ConvertOptions, old_next: Optional[int]) -> None:
    """Swap the new segments in (Kafka's protocol), the snapshots inside their range with them.
    `old_next`: the old log end offset when the last segment was converted, else None."""
    partition, dest, stats = result.partition, result.destination, result.stats
    emptied = dict(_empty_snapshots(snapshots, stats)) if opts.to_magic < 2 else {}
    # Snapshots inside the swapped range go through the swap with the segments: a broker (or a
    # rerun) completing an interrupted swap deletes every other file in that range.
    low, high = new[0].base_offset, max(s.next_offset for s in new)
    in_range = [p for o, p in sorted(partition.snapshots.items()) if low <= o < high]
    extra: List[str] = []
    try:
        for path in in_range:
            swap.stage_extra(path, extra, emptied.get(path))
        swap.replace_segments(dest, result.new_segments, segments, old_next_offset=old_next,
                              new_next_offset=None if old_next is None else new[-1].next_offset, extra=extra)
    except KstoreError:
        # Failed before the swap began (a full disk, a permission error): remove every new file,
        # leaving the partition as it was. Once a .swap exists, the state is the one a crash at
        # that step leaves, which the next run (or a broker) resolves; deleting .cleaned files
        # then would turn a rollback into a partial completion.
        cleaned = extra + [p for s in new for p in s.files]
        if not any(os.path.exists(p[: -len(names.CLEANED_SUFFIX)] + names.SWAP_SUFFIX) for p in cleaned):
            for path in extra:
                fileops.unlink(path)
            writer.abort()
        raise
    for path, data in emptied.items():
        if path not in in_range:
            fileops.atomic_write(path, data)


def _install_in_mirror(result: PartitionResult, new: list, snapshots: List[str], opts: ConvertOptions) -> None:
    """Rename the new segments into the mirror and copy the partition's other files beside them."""
    dest = result.destination
    if new:
        swap.replace_segments(dest, result.new_segments, [])
    emptied = dict(_empty_snapshots(snapshots, result.stats)) if opts.to_magic < 2 else {}
    for path in snapshots:
        dst = os.path.join(dest, os.path.basename(path))
        if path in emptied:
            fileops.atomic_write(dst, emptied[path])
        else:
            fileops.copy_file(path, dst)
    for path in result.partition.other_files:
        fileops.copy_file(path, os.path.join(dest, os.path.basename(path)))


def copy_data_dir_files(data_dir: str, output_root: str) -> List[str]:
    """The data dir's own files (checkpoints, meta.properties, clean-shutdown marker), not its lock."""
    copied = []
    fileops.make_dirs(output_root)
    for name in sorted(os.listdir(data_dir)):
        src = os.path.join(data_dir, name)
        if name == fileops.LOCK_FILE or not os.path.isfile(src):
            continue
        dst = os.path.join(output_root, name)
        fileops.copy_file(src, dst)
        copied.append(dst)
    return copied


# --------------------------------------------------------------------------- a run over many partitions


def check_destination(in_place: bool, output_dir: Optional[str], dry_run: bool) -> None:
    """Exactly one place for the result (--in-place or an output dir), unless a dry run."""
    if in_place and output_dir:
        raise UsageError("choose one of --in-place and --output-dir")
    if not in_place and not output_dir and not dry_run:
        raise UsageError("say where the result goes: --output-dir DIR or --in-place (or use --dry-run)")


def check_output_dir(output_dir: str, paths: Sequence[str], targets: Sequence[Target]) -> None:
    """Two inputs must not share a partition name (they would go to the same output directory); where the
    output dir may lie is :func:`scope.check_output_dir`'s rule, applied by :func:`output_guard`."""
    names_seen: dict = {}
    for t in targets:
        other = names_seen.setdefault(t.partition.name, t.partition.path)
        if other != t.partition.path:
            raise UsageError(f"two inputs named {t.partition.name} would go to the same output directory")


def output_guard(output_dir: str, paths: Sequence[str], targets: Sequence[Target], *, force: bool = False,
                 dry_run: bool = False):
    """The output dir checked (:func:`scope.output_dir_guard`): not in an input or its data dir, nor in any
    Kafka data dir unless the run only adds new partition dirs to it (its inputs are partition dirs, so no
    data dir's own files are copied), under that data dir's lock."""
    copies_data_dir_files = any(os.path.isdir(p) and not is_partition_dir(os.path.abspath(p)) for p in paths)
    return scope.output_dir_guard(
        output_dir, inputs=[*paths, *(t.partition.data_dir for t in targets)],
        new_partitions=None if copies_data_dir_files else sorted({t.partition.name for t in targets}),
        force=force, lock=not dry_run)


class ConvertRun:
    """What one convert-format run did: each partition's result and their total."""

    def __init__(self, opts: ConvertOptions, dry_run: bool) -> None:
        self.opts = opts
        self.dry_run = dry_run
        self.results: List[PartitionResult] = []
        self.total = ConvertStats()

    def add(self, result: PartitionResult) -> None:
        self.results.append(result)
        self.total.add(result.stats)

    def to_dict(self) -> dict:
        """The summary (one JSON line after the partitions' own)."""
        out = {"type": "summary", "partitions": len(self.results), "dry_run": self.dry_run,
               "to_magic": self.opts.to_magic, "compression": None if self.opts.codec is None else CODEC_NAMES[self.opts.codec]}
        out.update(self.total.to_dict())
        return out


def convert_targets(
    paths: Sequence[str],
    targets: Sequence[Target],
    opts: ConvertOptions,
    *,
    output_dir: Optional[str] = None,
    dry_run: bool = False,
    force: bool = False,
    progress: Optional[Callable[[int], None]] = None,
    on_result: Optional[Callable[[PartitionResult], None]] = None,
) -> ConvertRun:
    """Convert every target: into `output_dir` (the data dirs' own files copied there too), else in place
    under the data dirs' locks (`force`: even when a running process holds one). `on_result` is told each
    partition's result as it is done."""
    run = ConvertRun(opts, dry_run)
    in_place = output_dir is None
    if output_dir and not dry_run:
        for raw in paths:
            path = os.path.abspath(raw)
            if os.path.isdir(path) and not is_partition_dir(path):
                copy_data_dir_files(path, output_dir)
    groups = group_by_data_dir(targets)

    def done(result: PartitionResult) -> None:
        run.add(result)
        if on_result is not None:
            on_result(result)

    runner = PartitionRunner.for_targets(groups, force=force, lock=in_place and not dry_run)
    runner.each_target(groups, lambda target, _data_dir: convert_partition(
        target, opts, output_root=output_dir, dry_run=dry_run, progress=progress), on_result=done)
    return run
