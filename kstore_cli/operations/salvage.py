"""Salvage: keep every intact batch of a damaged partition, not only those before the first damage.

Kafka's recovery (``LogSegment.recover``) stops at the first batch that fails its checks and deletes
everything after it. Salvage goes on: past a damaged region it looks, byte by byte, for the next batch
that is whole, passes its CRC and continues the log (its base offset above the last kept offset, within
the segment's offset range), and keeps going. Every batch kept is copied byte for byte; a record inside a
damaged (e.g. compressed) batch is never guessed at: the whole batch goes with the damage.

The CRC of a v2 batch does not cover its base offset, length, leader epoch or magic (Kafka's neither): a
batch whose base offset was changed still passes. Such a batch is refused when the log contradicts it
(the next kept batch starts at or below its last offset, or it reaches the next segment's base offset);
one that nothing contradicts cannot be told from a gap a compaction left, for kstore as for Kafka.

Each damaged range is reported: file, byte range, and the offsets it can have held (after the last kept
batch, before the next). A zero-filled range that runs to the end of a segment is a preallocated tail
(an unclean shutdown), not damage.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional, Tuple

from kstore_cli.errors import ExitStatus, KstoreError, UsageError
from kstore_cli.log import fileops, scope
from kstore_cli.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    format_leader_epoch_checkpoint,
    read_leader_epoch_checkpoint,
)
from kstore_cli.log.logdir import Partition, Segment, Target, is_partition_dir
from kstore_cli.log.producer_state import ProducerStateManager
from kstore_cli.record.reader import map_file
from kstore_cli.record.resync import BatchFinder
from kstore_cli.operations.quarantine import (
    MANIFEST,
    default_quarantine_root,
    file_record,
    load_manifest,
    new_quarantine_dir,
    quarantine_dirs_of,
    same_bytes,
    tidy_quarantine,
    write_manifest,
)
from kstore_cli.operations.recovery import apply_plan, checkpoint_changes, is_zero, plan_partition
from kstore_cli.operations.runner import Outcome, PartitionRunner
from kstore_cli.operations.tally import RepairCost, Tally


DAMAGE = "damaged"
ZERO_TAIL = "zero-filled tail"


@dataclass
class DamagedRange:
    """Bytes of a .log that hold no batch salvage keeps."""

    log: str
    start: int
    end: int
    kind: str
    #: The offsets the range can have held: after the last batch kept before it, before the next one kept
    #: (None: the partition's end; the range then may also have held the log's last offsets).
    first_offset: int
    next_offset: Optional[int]

    def to_dict(self) -> dict:
        """salvage --json's line for the range."""
        return {"type": "gap", "file": self.log, "start": self.start, "end": self.end, "bytes": self.end - self.start,
                "kind": self.kind, "first_offset": self.first_offset,
                "last_offset": None if self.next_offset is None else self.next_offset - 1,
                "records_at_most": self.records_at_most}

    @property
    def records_at_most(self) -> Optional[int]:
        """The most records the range can have held: one per offset it can have held (None: up to the log end)."""
        return None if self.next_offset is None else self.next_offset - self.first_offset

    def manifest_dict(self) -> dict:
        """The range as the quarantine manifest spells it (a file format: its keys do not change)."""
        out = self.to_dict()
        del out["records_at_most"]
        out["firstOffset"], out["lastOffset"] = out.pop("first_offset"), out.pop("last_offset")
        return out


@dataclass
class SegmentSalvage:
    """One segment: the (position, size) of each batch kept, and the ranges left out."""

    segment: Segment
    size: int
    kept: List[tuple] = field(default_factory=list)  # (position, size, base offset, last offset, records)
    damaged: List[DamagedRange] = field(default_factory=list)
    #: A whole segment's batches as another scan counted them, for figures only (:func:`salvage_past`): a
    #: segment whose recovery found every batch valid is not scanned again.
    known: Optional[Tally] = None

    @property
    def kept_bytes(self) -> int:
        return sum(k[1] for k in self.kept)

    @property
    def changed(self) -> bool:
        return self.kept_bytes != self.size


@dataclass
class SalvagePlan:
    """What salvage keeps of a partition (nothing written yet)."""

    partition: Partition
    segments: List[SegmentSalvage]

    @property
    def damaged(self) -> List[DamagedRange]:
        return [d for s in self.segments for d in s.damaged if d.kind == DAMAGE]

    @property
    def zero_tails(self) -> List[DamagedRange]:
        return [d for s in self.segments for d in s.damaged if d.kind == ZERO_TAIL]

    @property
    def batches_kept(self) -> int:
        return sum(len(s.kept) for s in self.segments)

    @property
    def log_end_offset(self) -> int:
        for s in reversed(self.segments):
            if s.kept:
                return s.kept[-1][3] + 1
        return self.segments[0].segment.base_offset if self.segments else 0

    def cost(self) -> RepairCost:
        """What salvage keeps (every batch kept) and loses (the damaged ranges), in offsets and records."""
        return RepairCost("salvage", self.kept_tally(), Tally(), [(d.first_offset, d.next_offset) for d in self.damaged])

    def kept_tally(self) -> Tally:
        """The batches kept: how many, their records, the first and last offset."""
        tally = Tally()
        for s in self.segments:
            if s.known is not None:
                tally = tally.merge(s.known)
            for _pos, _size, base, last, records in s.kept:
                tally.add(base, last, records)
        return tally


class _Scan:
    """The walk over one segment."""

    def __init__(self, segment: Segment, after: int, below: Optional[int]) -> None:
        self.segment = segment
        self.path = segment.log
        self.buf = map_file(segment.log)
        self.end = len(self.buf)
        self.finder = BatchFinder(self.buf, self.path)
        self.after = after  # the last offset kept so far (the log's, across segments)
        self.below = below  # the next segment's base offset: this segment's offsets stay under it
        self.out = SegmentSalvage(segment, self.end)

    def _acceptable(self, batch) -> bool:
        if batch.base_offset <= self.after or (self.below is not None and batch.last_offset >= self.below):
            return False
        if batch.base_offset < self.segment.base_offset:
            return False
        nxt = batch.position + batch.size
        if batch.base_offset > self.after + 1 and nxt < self.end:
            # A gap before it: its base offset may be a changed one (not covered by the CRC). The next
            # valid batch that continues the log from before it must start above its last offset.
            for p in self.finder.candidates(nxt, self.after, self.below):
                follower = self.finder.batch_at(p)
                if follower is not None:
                    return follower.base_offset > batch.last_offset
        return True

    def _resync(self, start: int) -> int:
        for p in self.finder.candidates(start, self.after, self.below):
            batch = self.finder.batch_at(p)
            if batch is not None and self._acceptable(batch):
                return p
        return self.end

    def run(self, pos: int = 0) -> SegmentSalvage:
        """Walk from byte `pos` (0: the whole segment) to its end."""
        while pos < self.end:
            batch = self.finder.batch_at(pos)
            if batch is not None and self._acceptable(batch):
                self.out.kept.append((pos, batch.size, batch.base_offset, batch.last_offset, _records(batch)))
                self.after = batch.last_offset
                pos += batch.size
                continue
            nxt = self._resync(pos + 1)
            kind = ZERO_TAIL if nxt == self.end and is_zero(self.buf, pos, self.end) else DAMAGE
            self.out.damaged.append(DamagedRange(self.path, pos, nxt, kind, self.after + 1, None))
            pos = nxt
        return self.out


def _records(batch) -> Optional[int]:
    """The batch's records (None where a legacy wrapper's inner messages cannot be read: salvage keeps the
    wrapper byte for byte, as Kafka's recovery does, which never decompresses it)."""
    try:
        return batch.record_count()
    except KstoreError:
        return None


def plan_salvage(partition: Partition) -> SalvagePlan:
    """Walk every segment of the partition and decide what is kept (read-only)."""
    segments = partition.segments
    after = (segments[0].base_offset - 1) if segments else -1
    return SalvagePlan(partition, _walk(segments, 0, 0, after))


#: known(segment, after, below): a later segment's batches as another scan counted them, when salvage would
#: keep every one of them (their offsets above `after`, below `below`), else None (the segment is scanned).
Known = Callable[[Segment, int, Optional[int]], Optional[Tally]]


def salvage_past(partition: Partition, segment: int, position: int, after: int,
                 known: Optional[Known] = None) -> SalvagePlan:
    """What salvage keeps of the partition from byte `position` of the segment at base offset `segment` on,
    the last offset kept before it being `after` (where Kafka's recovery stops: doctor and rebuild-index
    know everything before it from their own scan). Its first segment holds only what lies past `position`.
    For figures only: a later segment `known` counts is not scanned again."""
    segments = partition.segments
    first = next(i for i, s in enumerate(segments) if s.base_offset == segment)
    return SalvagePlan(partition, _walk(segments, first, position, after, known))


def _walk(segments: List[Segment], first: int, position: int, after: int,
          known: Optional[Known] = None) -> List[SegmentSalvage]:
    """The scan of segments[first:], the first from byte `position`, past the offset `after`."""
    out: List[SegmentSalvage] = []
    for i in range(first, len(segments)):
        below = segments[i + 1].base_offset if i + 1 < len(segments) else None
        counted = known(segments[i], after, below) if known is not None and i > first else None
        if counted is not None:
            out.append(SegmentSalvage(segments[i], os.path.getsize(segments[i].log), known=counted))
            after = counted.last_offset
            continue
        scan = _Scan(segments[i], after, below)
        out.append(scan.run(position if i == first else 0))
        after = scan.after
    # Each range's offsets end where the next kept batch (in this or a later segment) begins.
    waiting: List[DamagedRange] = []
    for seg in out:
        starts = [(k[0], k[2]) for k in seg.kept] + ([(0, seg.known.first_offset)] if seg.known is not None else [])
        events = sorted(starts + [(d.start, d) for d in seg.damaged], key=lambda e: e[0])
        for _pos, item in events:
            if isinstance(item, DamagedRange):
                waiting.append(item)
            else:
                for rng in waiting:
                    rng.next_offset = item
                waiting = []
    return out


def kept_log_bytes(seg: SegmentSalvage) -> Iterator[memoryview]:
    """The bytes of the batches kept in a segment, in order (views of the mapped file)."""
    buf = map_file(seg.segment.log)
    for position, size, *_offsets in seg.kept:
        yield buf[position:position + size]


def damaged_bytes(rng: DamagedRange) -> memoryview:
    return map_file(rng.log)[rng.start:rng.end]


def describe(plan: SalvagePlan) -> str:
    """One line: what is kept and left out, in offsets, records and bytes."""
    total = sum(s.size for s in plan.segments)
    kept = sum(s.kept_bytes for s in plan.segments)
    return (f"{os.path.basename(plan.partition.path)}: {plan.cost().text()}; {kept} of {total} bytes kept; "
            f"{len(plan.damaged)} damaged range(s), {len(plan.zero_tails)} zero-filled tail(s)")


# --------------------------------------------------------------------------- writing


@dataclass
class SalvageReport:
    """What apply_salvage wrote."""

    destination: str
    segments_written: List[str] = field(default_factory=list)
    quarantine_dir: Optional[str] = None
    quarantined: List[str] = field(default_factory=list)
    snapshot: Optional[str] = None


def _write_log(path: str, seg: SegmentSalvage) -> None:
    def fill(out) -> None:
        for view in kept_log_bytes(seg):
            out.write(view)
    fileops.atomic_write(path, fill)


def _finish(destination: str, end_offset: int, report: SalvageReport) -> None:
    """Indexes as Kafka's recovery writes them, the leader epochs trimmed to the new log end, a producer
    snapshot at the log end (so a broker's load finds producer state without a replay from the start)."""
    part = Partition(destination)
    apply_plan(plan_partition(part))
    epochs = os.path.join(destination, LEADER_EPOCH_CHECKPOINT)
    if os.path.exists(epochs):
        entries = read_leader_epoch_checkpoint(epochs)
        kept = [(e, s) for e, s in entries if s < end_offset]
        if kept != entries:
            fileops.atomic_write(epochs, format_leader_epoch_checkpoint(kept).encode())
    part = Partition(destination)
    for offset, path in sorted(part.snapshots.items()):
        if offset > end_offset:
            fileops.unlink(path)  # state past the log end (Kafka deletes these at load); its log is gone
    report.snapshot = ProducerStateManager.replay(Partition(destination)).write_snapshot(destination, end_offset)


def salvage_to(plan: SalvagePlan, output_root: str) -> SalvageReport:
    """Write the salvaged partition as ``<output_root>/<partition name>/`` (which must not exist yet)."""
    src = plan.partition
    destination = os.path.join(os.path.abspath(output_root), src.name)
    if os.path.lexists(destination):
        raise UsageError("already exists: salvage writes a new partition directory", path=destination)
    fileops.make_dirs(destination)
    report = SalvageReport(destination)
    last = plan.segments[-1] if plan.segments else None
    for seg in plan.segments:
        if not seg.kept and seg is not last:
            continue  # an emptied segment in the middle: its offsets are a gap, as after compaction
        path = os.path.join(destination, os.path.basename(seg.segment.log))
        _write_log(path, seg)
        report.segments_written.append(path)
    for name in (PARTITION_METADATA, LEADER_EPOCH_CHECKPOINT):
        if os.path.isfile(os.path.join(src.path, name)):
            fileops.copy_file(os.path.join(src.path, name), os.path.join(destination, name))
    _finish(destination, plan.log_end_offset, report)
    return report


def _unfinished(partition_root: str, partition: Partition) -> List[str]:
    """Salvage quarantine dirs of the partition whose run was killed before its last step, oldest first."""
    out = []
    for qdir in quarantine_dirs_of(partition_root, partition):
        if qdir.endswith("-salvage") and os.path.lexists(os.path.join(qdir, MANIFEST)):
            # checked as every reader checks a manifest: one that names anything else is refused
            if not load_manifest(qdir, partition=partition.path).data.get("finished"):
                out.append(qdir)
    return out


def _range_name(rng: DamagedRange) -> str:
    return f"{os.path.basename(rng.log)}.{rng.start}-{rng.end}.{rng.kind.replace(' ', '-')}"


def _resumable(pending: List[str], ranges: List[DamagedRange], partition: str) -> Optional[Tuple[str, dict]]:
    """The newest unfinished salvage dir, to finish there, when what it already holds of these ranges is
    still their bytes (the killed run's segments not yet rewritten): each range is quarantined once."""
    if not pending:
        return None
    qdir = pending[-1]
    manifest = load_manifest(qdir, partition=partition).data  # checked as every reader checks one
    for rng in ranges:
        saved = os.path.join(qdir, _range_name(rng))
        if os.path.lexists(saved) and not same_bytes(rng.log, saved, rng.start, rng.end):
            return None
    return qdir, manifest


def _mark_finished(qdir: str, partition: str) -> None:
    manifest = load_manifest(qdir, partition=partition).data
    manifest["finished"] = True
    write_manifest(qdir, manifest)


def _quarantine(src: Partition, partition_root: str, pending: List[str], changed: List[SegmentSalvage],
                report: SalvageReport) -> None:
    """Copy the damaged ranges of the changed segments to a salvage quarantine dir (the unfinished one of a
    killed run when it can be finished, else a new one, then added to `pending`) and move out the producer
    snapshots past the first damage."""
    ranges = [rng for seg in changed for rng in seg.damaged]
    resumed = _resumable(pending, ranges, src.path)
    if resumed is not None:
        qdir, manifest = resumed
    else:
        qdir = new_quarantine_dir(partition_root, src, "salvage")
        fileops.make_dirs(qdir, like=src.data_dir)
        pending.append(qdir)
        manifest = {"partition": src.path, "kind": "salvage", "finished": False, "ranges": []}
    report.quarantine_dir = qdir
    listed = {r.get("savedAs") for r in manifest["ranges"]}
    added = [{**rng.manifest_dict(), "savedAs": _range_name(rng), **file_record(rng.log, rng.start, rng.end)}
             for rng in ranges if _range_name(rng) not in listed]
    if added or resumed is None:
        # The manifest first: a dir left by a killed run says what it is for, and the rerun finishes it
        # there instead of quarantining the same bytes again.
        manifest["ranges"] += added
        write_manifest(qdir, manifest)
    for rng in ranges:
        saved = os.path.join(qdir, _range_name(rng))
        if not os.path.lexists(saved):
            fileops.copy_range(rng.log, saved + fileops.TMP_SUFFIX, rng.start, rng.end)
            fileops.rename(saved + fileops.TMP_SUFFIX, saved)
        report.quarantined.append(saved)
    # Producer snapshots past the first damage describe batches that are gone: moved out (the new one
    # at the log end is written last), so no load starts from them.
    first_damage = min(r.first_offset for r in ranges)
    for offset, path in sorted(src.snapshots.items()):
        if offset > first_damage:
            dst = os.path.join(qdir, os.path.basename(path))
            if os.path.lexists(dst) and same_bytes(path, dst):
                fileops.unlink(path)  # a move across file systems killed between its copy and its delete
            else:
                fileops.move_file(path, dst)
            report.quarantined.append(dst)


def salvage_in_place(plan: SalvagePlan, quarantine_root: Optional[str] = None) -> SalvageReport:
    """Rewrite the damaged segments of the partition in place, each damaged range's bytes first copied to
    ``<quarantine root>/<partition>/<UTC time>-salvage/`` (with a manifest, written first). Crash-safe:
    every .log is replaced atomically after its damaged bytes are in the quarantine dir; the indexes,
    checkpoints and the producer snapshot follow, and the manifest is marked finished last. A rerun finds
    what is left: a segment already rewritten holds no damage, and the unfinished dir of a killed run is
    finished there (a range it already holds is not copied again), so each range is quarantined once."""
    src = plan.partition
    report = SalvageReport(src.path)
    partition_root = os.path.join(os.path.abspath(quarantine_root or default_quarantine_root(src)), src.name)
    tidy_quarantine(partition_root, src)  # a killed run's half-written files
    pending = _unfinished(partition_root, src)
    changed = [s for s in plan.segments if s.changed]
    if changed:
        _quarantine(src, partition_root, pending, changed, report)
    last = plan.segments[-1] if plan.segments else None
    for seg in changed:
        if not seg.kept and seg is not last:
            for path in (seg.segment.index, seg.segment.timeindex, seg.segment.txnindex):
                if path is not None:
                    fileops.unlink(path)
            fileops.unlink(seg.segment.log)  # its bytes are all in the quarantine dir
            continue
        _write_log(seg.segment.log, seg)
        report.segments_written.append(seg.segment.log)
    if pending:
        for change in checkpoint_changes(src, plan.log_end_offset):
            fileops.atomic_write(change["file"], change["_data"])
        _finish(src.path, plan.log_end_offset, report)
        for qdir in pending:
            _mark_finished(qdir, src.path)
    return report


@dataclass
class SalvageRun(Outcome):
    """A salvage run: the plan (again under the lock in place), what was written, and the mode. In place,
    damage left out and quarantined is salvage done (a rerun finds nothing): 0, as rebuild-index
    --truncate; a dry run or a copy leaves the damaged input as it was: 1."""

    plan: SalvagePlan
    report: Optional[SalvageReport] = None
    dry_run: bool = False
    in_place: bool = False

    def gaps(self) -> List[DamagedRange]:
        """The damaged ranges and zero-filled tails, by file and byte."""
        return sorted(self.plan.damaged + self.plan.zero_tails, key=lambda g: (g.log, g.start))

    def problems_status(self) -> int:
        return int(ExitStatus.PROBLEMS) if self.plan.damaged and not self.in_place else 0

    def summary(self) -> dict:
        """The JSON line after the gaps'."""
        plan, report = self.plan, self.report
        cost = plan.cost().to_dict()
        return {"type": "summary", "partition": plan.partition.path, "batches_kept": plan.batches_kept,
                "keeps": cost["keeps"], "loses": cost["loses"],
                "damaged_ranges": len(plan.damaged), "zero_tails": len(plan.zero_tails),
                "log_end_offset": plan.log_end_offset, "dry_run": self.dry_run,
                "destination": report.destination if report else None,
                "quarantine_dir": report.quarantine_dir if report else None}


def salvage(partition_dir: str, *, output_dir: Optional[str] = None, in_place: bool = False,
            quarantine_dir: Optional[str] = None, dry_run: bool = False, force: bool = False) -> SalvageRun:
    """``kstore salvage``: exactly one of `output_dir` (the input only read), `in_place` (under the data
    dir's lock; damaged bytes into `quarantine_dir`) and `dry_run`."""
    if not is_partition_dir(partition_dir):
        raise UsageError("expected a partition directory (<topic>-<partition>)", path=partition_dir)
    if sum(bool(x) for x in (output_dir, in_place, dry_run)) != 1:
        raise UsageError("give exactly one of --output-dir DIR, --in-place and --dry-run")
    partition = Partition(os.path.abspath(partition_dir))
    if not dry_run:
        scope.refuse_named([partition_dir], [Target(partition)], "salvage", scope.refusal(in_place))
    if in_place:
        scope.check_quarantine_dir(quarantine_dir, [partition_dir], [Target(partition)])
    run = SalvageRun(plan_salvage(partition), dry_run=dry_run, in_place=in_place)
    if output_dir:
        with scope.output_dir_guard(output_dir, inputs=[partition_dir], new_partitions=[partition.name], force=force):
            run.report = salvage_to(run.plan, output_dir)
    elif in_place:
        with PartitionRunner({partition.data_dir: [partition.path]}, force=force).locked():
            run.plan = plan_salvage(partition)  # again under the lock
            run.report = salvage_in_place(run.plan, quarantine_dir)
    return run
