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
from kstore_cli.cluster.metadata_image import MetadataImage, is_torn_tail
from kstore_cli.cluster.metadata_log import FileBatch, LogCut, MetadataRecord, read_file_batches
from kstore_cli.errors import FileUnreadableError, UsageError
from kstore_cli.log.names import METADATA_PARTITION_DIR
from kstore_cli.parsers.metadata import KAFKA_COMMIT, METADATA_RECORD_TYPES
from kstore_cli.parsers.metadata_versions import LATEST_PRODUCTION_LEVEL, METADATA_VERSIONS

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
    #: the problems that are a metadata.version or records newer than kstore's schemas (also in `problems`)
    newer: List[str] = field(default_factory=list)
    #: records not in the image because kstore cannot read them (a newer type, or a newer version that does
    #: not read with the fields kstore knows); 0 when every record was applied as far as its schema allows
    skipped_records: int = 0


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
        if rec.values is None:
            return  # not read (newer than kstore): counted and named by load_image
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
    newer = _NewerRecords()
    seen = newer.seen
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
    batches, log_records, last_offset = _replay_log(loader, segments, start, as_of_offset, last_offset, seen, cuts)
    warnings = _cut_warnings(cuts, last_offset, problems)
    if snapshot is None and log_records == 0 and src.checkpoint is None and src.bootstrap is not None:
        records_read += _load_snapshot(loader, src.bootstrap, seen)  # BootstrapMetadata
        notes.append(f"no snapshot and no log records: the image is {src.bootstrap}'s")
        source["bootstrap"] = src.bootstrap
    newer_texts = _newer_level(loader.image.features.metadata_version_level) + newer.problems()
    problems.extend(newer_texts)
    _check_end_state(loader, problems, notes)
    source.update({"snapshot_records": records_read, "log_batches": batches, "log_records": log_records,
                   "as_of_offset": as_of_offset, "as_of_time": as_of_time, "end_offset": last_offset + 1,
                   "open_transaction_start": loader.txn_start, "cut": _cut_json(cuts),
                   "newer": newer_texts, "skipped_records": newer.skipped})
    return LoadResult(image, source, problems, notes, warnings, newer_texts, newer.skipped)


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
    """What the end of the replay leaves to report: an open or aborted transaction."""
    if loader.txn is not None:
        notes.append(f"a metadata transaction begun at offset {loader.txn_start} is not finished: its "
                     f"{len(loader.txn)} record(s) are not in the image (as in Kafka)")
    if loader.aborted:
        notes.append(f"{loader.aborted} aborted metadata transaction(s) left out")


def _newest_known() -> str:
    return f"{METADATA_VERSIONS[LATEST_PRODUCTION_LEVEL]} = level {LATEST_PRODUCTION_LEVEL}"


def _newer_level(level: int) -> List[str]:
    """The image's metadata.version named when it is past the newest production level of the Kafka whose
    schemas kstore has (a level that Kafka still called unstable may have changed since)."""
    if level <= LATEST_PRODUCTION_LEVEL:
        return []
    name = f" ({METADATA_VERSIONS[level]}, not yet production in that Kafka)" if level in METADATA_VERSIONS else ""
    return [f"metadata.version level {level}{name} is newer than kstore knows (newest: {_newest_known()}, "
            f"Kafka commit {KAFKA_COMMIT[:12]}): a newer Kafka wrote this log; kstore reads it with the schemas "
            "it has and names each record they do not describe"]


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
    number of records read. `seen` is told of each record."""
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
                ) -> Tuple[int, int, int]:
    """The log's records from `start` up to the end offset (MetadataLoader's log replay): batches and records
    read, and the last offset applied. Where Kafka's recovery cuts the log is appended to `cuts`."""
    log_records = 0
    batches = 0
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
    return batches, log_records, last_offset


class _NewerRecords:
    """The records newer than kstore's schemas met in a replay, by (where, type, version): first offset, count."""

    def __init__(self) -> None:
        self.hits: Dict[Tuple[str, int, int], List[Any]] = {}
        self.skipped = 0

    def seen(self, rec: MetadataRecord, where: str) -> None:
        t = METADATA_RECORD_TYPES.get(rec.api_key)
        if t is not None and t.message.valid.lo <= rec.version <= t.message.valid.hi:
            return
        if rec.values is None:
            self.skipped += 1
        hit = self.hits.setdefault((where, rec.api_key, rec.version), [rec.offset, 0, rec.skipped])
        hit[1] += 1

    def problems(self) -> List[str]:
        return [_newer_text(where, api_key, version, first, count, skipped)
                for (where, api_key, version), (first, count, skipped) in sorted(self.hits.items())]


def _newer_text(where: str, api_key: int, version: int, first: int, count: int, skipped: Optional[str]) -> str:
    t = METADATA_RECORD_TYPES.get(api_key)
    at = f"in {where} (first at offset {first})"
    if t is None:
        newest = max(METADATA_RECORD_TYPES)
        return (f"{count} record(s) of type {api_key} (version {version}) {at} skipped: a record type newer than "
                f"kstore knows (newest: {METADATA_RECORD_TYPES[newest].message.name} = type {newest}); what they "
                "change is not in the image")
    what = f"{count} {t.message.name} record(s) of version {version} {at}"
    if skipped is not None:
        return f"{what} skipped: newer than kstore knows (up to {t.message.valid.hi}) and {skipped}"
    if version >= 0:
        return (f"{what} are newer than kstore knows (up to {t.message.valid.hi}): read with the fields it knows "
                "(tagged fields it does not know skipped), as Kafka's older readers read them; what the newer "
                "version adds is not in the image")
    return (f"{what} (an unsigned varint over 0x7FFFFFFF, which Kafka reads as a negative int): read as the lowest "
            "version, as Kafka's generated reader reads them")
