"""The metadata log replayed into a metadata image: Kafka's ``MetadataLoader``, offline.

The newest snapshot (``<offset>-<epoch>.checkpoint``) at or before the requested end offset is replayed into an
empty image, then the log batches after it, with metadata transactions handled as ``MetadataBatchLoader`` does
(records between BeginTransaction and EndTransaction are applied at the End, dropped at an Abort, and left out
while the transaction is still open at the end of the log). ``bootstrap.checkpoint`` is used when there is
neither a snapshot nor a log record.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from kstore_cli.cluster.metadata_delta import MetadataDelta, ReplayFault, config_resource
from kstore_cli.cluster.metadata_image import METADATA_VERSIONS, MetadataImage, is_torn_tail
from kstore_cli.cluster.metadata_log import FileBatch, LogCut, MetadataRecord, NewerRecordError, read_file_batches
from kstore_cli.errors import FileUnreadableError, UsageError
from kstore_cli.log.names import METADATA_PARTITION_DIR
from kstore_cli.parsers.metadata import METADATA_RECORD_TYPES

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")

_BEGIN, _END, _ABORT = 23, 24, 25
_CONFIG_RECORD = 4


@dataclass
class MetadataSource:
    """Where the image came from: the metadata dir, its snapshot and segments."""

    metadata_dir: Optional[str]
    checkpoint: Optional[str] = None  # a snapshot file given on its own
    meta_properties: Dict[str, str] = field(default_factory=dict)
    #: ``bootstrap.checkpoint`` (BootstrapDirectory keeps it in the metadata log dir, next to
    #: ``__cluster_metadata-0``; one inside that dir is taken too)
    bootstrap: Optional[str] = None


def _read_properties(path: str) -> Dict[str, str]:
    props: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith(("#", "!")) and "=" in line:
                    k, v = line.split("=", 1)
                    props[k.strip()] = v.strip()
    except OSError as e:
        raise FileUnreadableError(f"could not read: {e.strerror}", path=path) from None
    return props


def find_metadata(paths: List[str]) -> MetadataSource:
    """The metadata log among ``paths`` (data dirs, the ``__cluster_metadata-0`` dir, or a ``.checkpoint``)."""
    found: List[str] = []
    checkpoint = None
    bootstrap = None
    props: Dict[str, str] = {}
    for p in paths:
        if os.path.isfile(p) and p.endswith(".checkpoint"):
            checkpoint = p
            continue
        if not os.path.exists(p):
            raise FileUnreadableError("no such file or directory", path=p)
        if not os.path.isdir(p):
            raise UsageError(f"expected a data dir, a {METADATA_PARTITION_DIR} dir or a .checkpoint file", path=p)
        if os.path.basename(os.path.normpath(p)) == METADATA_PARTITION_DIR:
            found.append(p)
            data_dir = os.path.dirname(os.path.abspath(p))
        else:
            data_dir = p
            if os.path.isdir(os.path.join(p, METADATA_PARTITION_DIR)):
                found.append(os.path.join(p, METADATA_PARTITION_DIR))
        for where in (data_dir, os.path.join(data_dir, METADATA_PARTITION_DIR)):
            if bootstrap is None and os.path.isfile(os.path.join(where, BOOTSTRAP_CHECKPOINT)):
                bootstrap = os.path.join(where, BOOTSTRAP_CHECKPOINT)
        meta = os.path.join(data_dir, "meta.properties")
        if os.path.isfile(meta):
            props = props or _read_properties(meta)
    if len(found) > 1:
        raise UsageError(f"more than one {METADATA_PARTITION_DIR} ({', '.join(found)}): name one")
    if not found and checkpoint is None and bootstrap is None:
        raise UsageError(f"no {METADATA_PARTITION_DIR} in {', '.join(paths)} (a KRaft node's metadata log dir holds it)")
    if found and checkpoint is not None:
        raise UsageError("give either a metadata dir or a .checkpoint file, not both")
    return MetadataSource(found[0] if found else None, checkpoint, props, bootstrap)


@dataclass
class LoadResult:
    """The image and how it was made."""

    image: MetadataImage
    source: Dict[str, Any]
    #: things that did not apply or were not read: each also makes the exit status 1
    problems: List[str]
    #: facts worth a line (an open transaction left out, bootstrap used...)
    notes: List[str]
    #: what Kafka's loader gets past on its own but the reader should know (a torn tail cut)
    warnings: List[str] = field(default_factory=list)


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError as e:
        raise FileUnreadableError(f"could not list: {e.strerror}", path=path) from None


def _snapshots(metadata_dir: str) -> List[Tuple[int, int, str]]:
    out = []
    for name in _listdir(metadata_dir):
        m = _SNAPSHOT_NAME.match(name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), os.path.join(metadata_dir, name)))
    return sorted(out)


def _segments(metadata_dir: str) -> List[Tuple[int, str]]:
    return sorted((int(m.group(1)), os.path.join(metadata_dir, n))
                  for n in _listdir(metadata_dir) if (m := _SEGMENT_NAME.match(n)))


def _log_batches(segments: List[Tuple[int, str]], skip_below: int = -1,
                 cuts: Optional[List[LogCut]] = None) -> Iterator[FileBatch]:
    """The log's batches as Kafka's recovery leaves them: up to the first batch that is incomplete or fails
    its checks (its :class:`LogCut` appended to `cuts`); the later segments are not read (Kafka deletes them)."""
    cuts = [] if cuts is None else cuts
    last = segments[0][0] - 1 if segments else -1
    for i, (_base, path) in enumerate(segments):
        for b in read_file_batches(path, skip_below, cuts):
            last = b.last_offset
            yield b
        if cuts:
            cut = cuts[-1]
            cut.later = [p for _b, p in segments[i + 1:]]
            cut.torn = is_torn_tail(path, cut.position, last, last_segment=not cut.later)
            return


class _Loader:
    """MetadataBatchLoader: applies records, buffering those of an open metadata transaction."""

    def __init__(self, image: MetadataImage, problems: List[str]) -> None:
        self.delta = MetadataDelta(image)
        self.image = image
        self.problems = problems
        self.txn: Optional[List[MetadataRecord]] = None
        self.txn_start: Optional[int] = None
        self.aborted = 0
        #: The snapshot file being replayed (its records' offsets are not the log's), or None.
        self.snapshot: Optional[str] = None

    def _apply(self, rec: MetadataRecord) -> None:
        try:
            self.delta.replay(rec.api_key, rec.values)
        except ReplayFault as e:
            self.problems.append(f"record at offset {rec.offset} does not apply: {e.message}")
            return
        if rec.api_key == _CONFIG_RECORD:
            resource = config_resource(rec.values)
            where = self.image.configs.set_at.setdefault(resource, {})
            if rec.values["Value"] is None:
                where.pop(rec.values["Name"], None)
            else:
                where[rec.values["Name"]] = (f"snapshot {self.snapshot}" if self.snapshot is not None
                                             else f"offset {rec.offset}")
            if not where:
                del self.image.configs.set_at[resource]

    def load(self, rec: MetadataRecord) -> None:
        if rec.api_key == _BEGIN:
            if self.txn is not None:
                self.problems.append(f"BeginTransaction at offset {rec.offset} inside the transaction begun at "
                                     f"{self.txn_start}")
            self.txn, self.txn_start = [], rec.offset
        elif rec.api_key == _END:
            if self.txn is None:
                self.problems.append(f"EndTransaction at offset {rec.offset} without a transaction")
            else:
                for r in self.txn:
                    self._apply(r)
            self.txn = self.txn_start = None
        elif rec.api_key == _ABORT:
            if self.txn is None:
                self.problems.append(f"AbortTransaction at offset {rec.offset} without a transaction")
            else:
                self.aborted += 1
            self.txn = self.txn_start = None
        elif self.txn is not None:
            self.txn.append(rec)
        else:
            self._apply(rec)


def load_image(src: MetadataSource, *, as_of_offset: Optional[int] = None,
               as_of_time: Optional[int] = None) -> LoadResult:
    """Replay the metadata log into an image, as of the end or of an end offset / a time (ms)."""
    problems: List[str] = []
    notes: List[str] = []
    # the cluster id lives in meta.properties, not in the metadata log
    source: Dict[str, Any] = {"metadata_dir": src.metadata_dir, "cluster_id": src.meta_properties.get("cluster.id"),
                              "meta_properties": src.meta_properties}
    image = MetadataImage()
    loader = _Loader(image, problems)
    newer: Dict[Tuple[str, int], List[int]] = {}  # (record, version) -> [first offset, count]

    def seen(rec: MetadataRecord, where: str) -> None:
        msg = METADATA_RECORD_TYPES[rec.api_key].message
        if rec.version > msg.valid.hi or rec.version < msg.valid.lo:
            hit = newer.setdefault((f"{msg.name} in {where}", rec.version), [rec.offset, 0])
            hit[1] += 1
    snapshots, segments = _snapshots_and_segments(src)
    source["snapshots"] = [os.path.basename(s[2]) for s in snapshots]
    source["segments"] = [os.path.basename(s[1]) for s in segments]
    if as_of_time is not None:
        as_of_offset = _end_offset_at_time(segments, as_of_time)
    chosen = [s for s in snapshots if src.checkpoint is not None or as_of_offset is None or s[0] <= as_of_offset]
    snapshot = chosen[-1] if chosen else None
    start = 0
    last_offset = -1
    records_read = 0
    if snapshot is not None:
        records_read = _load_snapshot(loader, snapshot[2], seen)
        start = snapshot[0]
        last_offset = snapshot[0] - 1
        source["snapshot"] = os.path.basename(snapshot[2])
    else:
        source["snapshot"] = None
        if segments and segments[0][0] > 0:
            problems.append(f"no snapshot at or before the end offset, and the log starts at {segments[0][0]}: "
                            f"the records before it are missing from the image")
    cuts: List[LogCut] = []
    batches, log_records, last_offset, stopped = _replay_log(loader, segments, start, as_of_offset, last_offset,
                                                             seen, cuts)
    if stopped is not None:
        problems.append(f"read stopped: {stopped} (the image is as of offset {last_offset + 1})")
    warnings = _cut_warnings(cuts, last_offset, problems)
    if snapshot is None and log_records == 0 and src.checkpoint is None and src.bootstrap is not None:
        records_read += _load_snapshot(loader, src.bootstrap)  # BootstrapMetadata
        notes.append(f"no snapshot and no log records: the image is {src.bootstrap}'s")
        source["bootstrap"] = src.bootstrap
    problems.extend(_newer_version_problems(newer))
    _check_end_state(loader, problems, notes)
    source.update({"snapshot_records": records_read, "log_batches": batches, "log_records": log_records,
                   "as_of_offset": as_of_offset, "as_of_time": as_of_time, "end_offset": last_offset + 1,
                   "open_transaction_start": loader.txn_start, "stopped": stopped, "cut": _cut_json(cuts)})
    return LoadResult(image, source, problems, notes, warnings)


def _cut_warnings(cuts: List[LogCut], last_offset: int, problems: List[str]) -> List[str]:
    """The warnings of the cuts: a torn tail is how a crash leaves the log (the broker starts fine); damage
    followed by intact batches costs committed records, so it goes to `problems`."""
    warnings: List[str] = []
    for cut in cuts:
        if cut.torn:
            warnings.append(cut.describe())
        else:
            problems.append(f"{cut.describe()} (the image is as of offset {last_offset + 1})")
    return warnings


def _check_end_state(loader: "_Loader", problems: List[str], notes: List[str]) -> None:
    """What the end of the replay leaves to report: an open or aborted transaction, an unknown metadata.version."""
    if loader.txn is not None:
        notes.append(f"a metadata transaction begun at offset {loader.txn_start} is not finished: its "
                     f"{len(loader.txn)} record(s) are not in the image (as in Kafka)")
    if loader.aborted:
        notes.append(f"{loader.aborted} aborted metadata transaction(s) left out")
    level = loader.image.features.metadata_version_level
    if level not in METADATA_VERSIONS:
        problems.append(f"metadata.version feature level {level} is newer than this "
                        f"kstore knows (up to {max(METADATA_VERSIONS)})")


def _cut_json(cuts: List[LogCut]) -> Optional[Dict[str, Any]]:
    """The first cut as the JSON summary shows it."""
    if not cuts:
        return None
    cut = cuts[0]
    return {"file": cut.path, "position": cut.position, "bytes": cut.size, "torn": cut.torn,
            "later_segments": cut.later, "what": cut.what}


def _snapshots_and_segments(src: MetadataSource) -> Tuple[List[Tuple[int, int, str]], List[Tuple[int, str]]]:
    """The snapshots (end offset, epoch, path) and log segments (base offset, path) to load from: a
    checkpoint file given alone, else the metadata dir's."""
    if src.checkpoint is not None:
        snapshots = [(0, 0, src.checkpoint)]
        m = _SNAPSHOT_NAME.match(os.path.basename(src.checkpoint))
        if m:
            snapshots = [(int(m.group(1)), int(m.group(2)), src.checkpoint)]
        return snapshots, []
    if src.metadata_dir is not None:
        return _snapshots(src.metadata_dir), _segments(src.metadata_dir)
    return [], []


def _end_offset_at_time(segments: List[Tuple[int, str]], as_of_time: int) -> Optional[int]:
    """The end offset as of a time: the first log batch with a later timestamp (None: the log's end)."""
    for b in _log_batches(segments, 1 << 62):  # timestamps only
        if b.max_timestamp > as_of_time:
            return b.base_offset
    return None


def _load_snapshot(loader: "_Loader", path: str, seen: Optional[Callable[[MetadataRecord, str], None]] = None
                   ) -> int:
    """Every record of a snapshot (MetadataLoader's snapshot load), or of ``bootstrap.checkpoint``; the
    number of records read. `seen` is told of each record (not for the bootstrap file)."""
    loader.snapshot = os.path.basename(path)
    records_read = 0
    for b in read_file_batches(path):
        for rec in b.records:
            if seen is not None:
                seen(rec, os.path.basename(path))
            loader._apply(rec)  # a snapshot holds no transactions: every record applies
            records_read += 1
    loader.snapshot = None
    return records_read


def _replay_log(loader: "_Loader", segments: List[Tuple[int, str]], start: int, as_of_offset: Optional[int],
                last_offset: int, seen: Callable[[MetadataRecord, str], None], cuts: List[LogCut]
                ) -> Tuple[int, int, int, Optional[str]]:
    """The log's records from `start` up to the end offset (MetadataLoader's log replay): batches and records
    read, the last offset applied, and why the read stopped early (a record newer than kstore knows). Where
    Kafka's recovery cuts the log is appended to `cuts`."""
    log_records = 0
    batches = 0
    try:
        for b in _log_batches(segments, start, cuts):
            if as_of_offset is not None and b.last_offset >= as_of_offset:
                break
            if b.last_offset < start:
                continue
            batches += 1
            for rec in b.records:
                if rec.offset < start:
                    continue
                seen(rec, "the log")
                loader.load(rec)
                log_records += 1
            last_offset = b.last_offset
    except NewerRecordError as e:
        return batches, log_records, last_offset, str(e)
    return batches, log_records, last_offset, None


def _newer_version_problems(newer: Dict[Tuple[str, int], List[int]]) -> List[str]:
    return [f"{count} {what.split(' in ')[0]} record(s) of version {version} in "
            f"{what.split(' in ', 1)[1]} (first at offset {first}) "
            + ("are newer than this kstore knows: read with the fields it knows, as Kafka 4.0 reads them; what the "
               "newer version adds is not in the image" if version >= 0 else
               "(an unsigned varint over 0x7FFFFFFF, which Kafka reads as a negative int): read as the lowest "
               "version, as Kafka 4.0's generated reader reads them")
            for (what, version), (first, count) in sorted(newer.items())]

