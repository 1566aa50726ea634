"""Message format conversion: rewrite a partition's batches into another magic and/or codec,
keeping every offset and timestamp.

Per source batch, with ``t`` the target magic and ``c'`` the target codec (the batch's own codec
unless one is given):

* **unchanged** -- same magic and codec (and no regrouping asked): the batch's bytes are copied
  byte for byte. v2 control batches and empty batches are always copied to a v2 target (Kafka
  never compresses markers; an empty batch has no records to compress).
* **v2 -> v2, new codec** -- re-encoded with every header field kept: base offset, last offset
  delta, max timestamp, timestamp type, partition leader epoch, producer id/epoch, base sequence,
  transactional flag, delete horizon.
* **v0/v1 -> v2** (``LogValidator``'s up-conversion) -- records of consecutive legacy entries are
  grouped into v2 batches of up to ``batch_bytes`` (16 KiB by default) of records; the timestamp
  type is carried (v0 -> CreateTime with timestamps -1); a LogAppendTime group only holds records
  of one append time; offsets are kept as deltas, so gaps survive. Leader epoch and producer
  fields are unknown for legacy data: -1. Plain entries (a good CRC, uncompressed or one gzip
  member, sound inner messages) take a fast path, :meth:`BatchConverter.legacy_run`: a native call
  per output batch, no object per entry; anything else takes the regular path, entry by entry,
  with the same result.
* **v2 -> v0/v1** (``RecordsUtil.downConvert``) -- control batches and empty batches are dropped,
  headers, producer id/epoch/sequence, transactional flag, leader epoch and delete horizon are
  dropped; v0 loses timestamps; uncompressed batches become one entry per record, compressed ones
  one wrapper (offset = last record, inner offsets relative for v1 and absolute for v0). zstd
  cannot be written as v0/v1.
* **v0 <-> v1** -- v1 -> v0 loses timestamps; v0 -> v1 gets CreateTime with timestamp -1.

Every loss is counted in :class:`ConvertStats.losses`; ``strict`` raises
:class:`LossyConversionError` at the first one. With ``batch_bytes`` given, batches are regrouped
up to that size: legacy records freely, v2 batches only whole and only "plain" ones (no producer
id, not transactional, not control, no delete horizon), so sequences and ranges survive.

A partition is converted into new ``.cleaned`` segments (:class:`~.writer.PartitionWriter`),
swapped in with Kafka's protocol (:mod:`.swap`) in place, or installed in a mirror directory.
Segment boundaries and names follow the source unless ``segment_bytes`` re-rolls; the first
segment keeps the source's first base offset, and when dropped control batches would pull the
log end offset back, an empty segment at the old log end offset keeps it (as after a roll).
"""

from __future__ import annotations

import os
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Deque, Iterable, Iterator, List, Optional, Sequence, Tuple

from kstore_cli import codecs
from kstore_cli.codecs import CODEC_NAMES, GZIP, LZ4, NONE, ZSTD, get_codec
from kstore_cli.errors import CorruptRecordError, ExitStatus, KstoreError, UsageError
from kstore_cli.record import decode, encode
from kstore_cli.log import fileops, names
from kstore_cli.log import scope, swap
from kstore_cli.record.batch import (
    CREATE_TIME,
    DELETE_HORIZON_FLAG,
    LOG_APPEND_TIME,
    MAX_INT32,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    Batch,
    LegacyBatch,
    RecordBatch,
)
from kstore_cli.record.builder import build_legacy_entry
from kstore_cli.log.logdir import Partition, Segment, Target, group_by_data_dir, is_partition_dir
from kstore_cli.record.reader import RELEASE_EVERY, iterate_source, open_source, read_batches, release_pages
from kstore_cli.log.snapshot import build_snapshot, read_snapshot
from kstore_cli.log.writer import PartitionWriter
from kstore_cli.operations.recovery import state_at_segment
from kstore_cli.operations.runner import PartitionRunner

DEFAULT_BATCH_BYTES = 16 * 1024
#: A source batch goes to the pool to be decompressed only when it has at least this many (compressed) bytes,
#: and so does a legacy output wrapper to be compressed; smaller ones are done inline. Handing a job to a thread
#: and its result back (the GIL passed both ways) cost about as much CPU as the job itself at ~16 KiB: with
#: every batch pooled, 100 B values took 2.2-2.4x the CPU of the codec work alone, for no gain in wall time.
#: v2 output batches go to the pool in chunks instead (COMPRESS_CHUNK_BYTES).
POOL_MIN_BYTES = 16 * 1024
#: Output bodies are compressed on the pool in chunks of about this many bytes, one task and (zstd) one
#: library call per chunk: a pool thread then takes the GIL twice per chunk, not after every batch.
COMPRESS_CHUNK_BYTES = 256 * 1024
_V2_OVERHEAD = RECORD_BATCH_OVERHEAD  # a group's size estimate starts at the batch header

#: Loss counters, with what each one counts.
LOSS_DESCRIPTIONS = {
    "control_batches": "control batches dropped (transaction markers and other control records)",
    "abort_markers": "ABORT markers among them (aborted data becomes ordinary messages)",
    "empty_batches": "empty batches dropped (legacy formats cannot hold them)",
    "headers": "records whose headers were dropped",
    "producer_fields": "batches whose producer id/epoch/sequence were dropped",
    "transactional": "batches whose transactional flag was dropped",
    "leader_epochs": "batches whose partition leader epoch was dropped",
    "delete_horizons": "batches whose delete horizon was dropped",
    "timestamps": "records whose timestamp was dropped (magic 0 has none)",
    "timestamp_types": "batches whose timestamp type was dropped (magic 0 has none)",
    "offset_ranges": "batches whose offset range was wider than their records (compacted v2 batches)",
    "producer_snapshots": "producer-state snapshots emptied (legacy data has no producer state)",
}

_CODEC_LEVELS = {GZIP: (1, 9, (-1,)), LZ4: (1, 17, ()), ZSTD: (-131072, 22, ())}


def default_jobs() -> int:
    """Codec threads by default (the converting thread included): one per core this process may run on, at
    most 2 (past that the Python half of the work is the bound)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(2, cores))


class LossyConversionError(KstoreError):
    """``--strict`` and the conversion would drop information."""

    exit_status = ExitStatus.PROBLEMS


class ConvertOptions:
    """What to convert to. `codec` None keeps each batch's codec."""

    __slots__ = ("to_magic", "codec", "level", "batch_bytes", "strict", "segment_bytes", "index_interval_bytes",
                 "jobs")

    def __init__(self, to_magic: int, codec: Optional[int] = None, level: Optional[int] = None,
                 batch_bytes: Optional[int] = None, strict: bool = False, segment_bytes: Optional[int] = None,
                 index_interval_bytes: int = 4096, jobs: Optional[int] = None) -> None:
        if to_magic not in (0, 1, 2):
            raise UsageError(f"the target magic must be 0, 1 or 2, not {to_magic}")
        if codec is not None and codec not in CODEC_NAMES:
            raise UsageError(f"unknown codec id {codec}")
        if codec == ZSTD and to_magic < 2:
            raise UsageError("zstd needs message format v2 (magic 2); v0/v1 cannot hold it")
        if level is not None:
            if codec is None:
                raise UsageError("--compression-level needs --compression")
            if codec not in _CODEC_LEVELS:
                raise UsageError(f"{CODEC_NAMES[codec]} has no compression level")
            lo, hi, extra = _CODEC_LEVELS[codec]
            if not (lo <= level <= hi or level in extra):
                raise UsageError(f"{CODEC_NAMES[codec]} compression level must be in {lo}..{hi}, not {level}")
        if batch_bytes is not None and batch_bytes < 1:
            raise UsageError(f"batch bytes must be positive, not {batch_bytes}")
        if segment_bytes is not None and segment_bytes < 1:
            raise UsageError(f"segment bytes must be positive, not {segment_bytes}")
        if jobs is not None and jobs < 1:
            raise UsageError(f"jobs must be positive, not {jobs}")
        self.to_magic = to_magic
        self.codec = codec
        self.level = level
        self.batch_bytes = batch_bytes
        self.strict = strict
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        #: Threads doing codec work, the converting one included: 1 converts in this thread alone; more
        #: runs the codec work of neighbouring batches on a pool of jobs - 1 threads (zlib, zstandard and
        #: lz4 release the GIL).
        self.jobs = default_jobs() if jobs is None else jobs

    @property
    def regroup(self) -> bool:
        return self.batch_bytes is not None

    @property
    def group_bytes(self) -> int:
        return DEFAULT_BATCH_BYTES if self.batch_bytes is None else self.batch_bytes


class ConvertStats:
    """Counts of one conversion (addable across partitions)."""

    _FIELDS = ("segments_in", "segments_out", "batches_in", "batches_out", "records_in", "records_out",
               "bytes_in", "bytes_out", "unchanged_batches")

    def __init__(self) -> None:
        for f in self._FIELDS:
            setattr(self, f, 0)
        self.losses: Counter = Counter()

    def add(self, other: "ConvertStats") -> None:
        for f in self._FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.losses.update(other.losses)

    @property
    def ratio(self) -> Optional[float]:
        """bytes out / bytes in."""
        return None if not self.bytes_in else self.bytes_out / self.bytes_in

    @property
    def lossy(self) -> bool:
        return any(self.losses.values())

    def to_dict(self) -> dict:
        out = {
            "segments_in": self.segments_in, "segments_out": self.segments_out,
            "batches_in": self.batches_in, "batches_out": self.batches_out,
            "records_in": self.records_in, "records_out": self.records_out,
            "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "unchanged_batches": self.unchanged_batches,
            "losses": {k: v for k, v in sorted(self.losses.items()) if v},
        }
        return out


# --------------------------------------------------------------------------- batch conversion

#: An output: (bytes of one or more batches or a source batch, first offset if known, source batch to copy).
#: With an executor, the bytes or the batch may still be pending (:data:`PENDING`: compression under way).
Output = Tuple[Optional[bytes], Optional[int], Optional[Batch]]


class _Group:
    """Records waiting to become one output batch, already encoded into its body (v2 records, or legacy
    entries: inner entries of a wrapper when compressed)."""

    __slots__ = ("key", "fields", "body", "count", "size", "base", "base_ts", "last", "max_ts", "records_max_ts",
                 "loose_max_ts", "offset_base", "ts_attr", "legacy_ts")

    def __init__(self, key: tuple, fields: dict, base: int, base_ts: int, size: int) -> None:
        self.key = key
        self.fields = fields
        self.body = bytearray()
        self.count = 0
        self.size = size
        self.base = base
        #: v2: the batch's base timestamp (its delete horizon when it has one, as MemoryRecordsBuilder).
        self.base_ts = base_ts
        self.last = base
        #: A batch's own max timestamp (kept when whole batches are regrouped), else None.
        self.max_ts: Optional[int] = None
        self.records_max_ts: Optional[int] = None
        #: The largest timestamp of the records added one by one (legacy sources), None without any.
        self.loose_max_ts: Optional[int] = None
        #: Legacy: what entry offsets are relative to (a v1 wrapper's first offset, else 0), the
        #: entries' timestamp-type attribute, and the timestamp every v1 entry carries under
        #: LogAppendTime (None: each record's own).
        self.offset_base = 0
        self.ts_attr = 0
        self.legacy_ts: Optional[int] = None


def _legacy_v2_group(out_codec: int, ts_type: int, lat: Optional[int]) -> Tuple[tuple, dict]:
    """The group key and batch fields of legacy records converted to magic 2 (no leader epoch or producer)."""
    fields = dict(timestamp_type=ts_type, log_append_time=lat, partition_leader_epoch=-1)
    return (2, out_codec, ts_type, lat, -1), fields


def _is_plain_v2(batch: Batch) -> bool:
    return (batch.producer_id < 0 and batch.producer_epoch < 0 and batch.base_sequence < 0 and not batch.is_transactional
            and not batch.is_control and not batch.has_delete_horizon and batch.count > 0)


class BatchConverter:
    """Turns source batches into target batches (a builder: ``feed`` each batch, then ``flush``).

    Records go from each source batch's record table (:mod:`.encode`) straight into the pending
    output batch's body; yields outputs for :meth:`PartitionWriter.append`/``append_bytes``; counts
    into `stats`.
    """

    def __init__(self, opts: ConvertOptions, stats: ConvertStats, executor: Optional[ThreadPoolExecutor] = None) -> None:
        self.opts = opts
        self.stats = stats
        self._group: Optional[_Group] = None
        #: Where output batches are compressed (None: here, at once).
        self.executor = executor
        self._table_future: Optional[Future] = None
        self._chunk: Optional[_CompressChunk] = None  # output bodies gathering for the pool
        #: Where the last :meth:`legacy_run` stopped, and the offset of the last wrapper it took (None: none).
        self.run_pos = 0
        self.run_last_offset: Optional[int] = None

    @property
    def runs_legacy(self) -> bool:
        """Whether legacy entries go through :meth:`legacy_run` (conversions to magic 2)."""
        return self.opts.to_magic == 2

    @staticmethod
    def takes_run(batch: Batch) -> bool:
        """Whether `batch` is the kind :meth:`legacy_run` converts (a legacy entry, uncompressed or gzip)."""
        return type(batch) is LegacyBatch and batch.compression in (NONE, GZIP)

    def wants_table(self, batch: Batch) -> bool:
        """Whether feeding `batch` decompresses it into a record table (worth starting ahead, on a thread)."""
        codec = batch.compression
        if codec == NONE:
            return False
        if batch.magic < 2:
            return True
        out_codec = codec if self.opts.codec is None else self.opts.codec
        if batch.is_control or batch.count <= 0:
            return False
        if self.opts.to_magic < 2:
            return out_codec != ZSTD
        return out_codec != codec or (self.opts.regroup and _is_plain_v2(batch))

    def _table(self, batch: Batch) -> tuple:
        """The batch's record table: the one started ahead when there is one (its error, if any, raised
        here, in file order)."""
        fut, self._table_future = self._table_future, None
        return batch.record_table() if fut is None else fut.result()

    # ---------------------------------------------------------------- losses
    def _lose(self, kind: str, n: int = 1, where: Optional[Batch] = None) -> None:
        if n <= 0:
            return
        self.stats.losses[kind] += n
        if self.opts.strict:
            raise LossyConversionError(
                f"--strict: converting to magic {self.opts.to_magic} would lose information: "
                f"{LOSS_DESCRIPTIONS[kind]}",
                path=None if where is None else where.path, position=None if where is None else where.position,
            )

    # ---------------------------------------------------------------- feeding
    def feed(self, batch: Batch, table: Optional[Future] = None) -> Iterator[Output]:
        """Convert one batch; `table`: its record table, started ahead (see :meth:`wants_table`)."""
        self._table_future = table
        opts = self.opts
        stats = self.stats
        stats.batches_in += 1
        stats.bytes_in += batch.size
        codec = batch.compression
        out_codec = codec if opts.codec is None else opts.codec
        if batch.magic >= 2:
            yield from self._feed_v2(batch, codec, out_codec)
            return
        # legacy source
        if opts.to_magic == batch.magic and out_codec == codec and not opts.regroup:
            records = 1 if codec == NONE else self._table(batch)[0]
            stats.records_in += records
            yield from self._copy(batch, records)
            return
        table = self._table(batch)
        stats.records_in += table[0]
        yield from self._legacy_to(batch, table, out_codec)

    def _feed_v2(self, batch: Batch, codec: int, out_codec: int) -> Iterator[Output]:
        count = batch.count
        self.stats.records_in += max(count, 0)
        if self.opts.to_magic == 2:
            if batch.is_control or count <= 0 or (
                    out_codec == codec and not (self.opts.regroup and _is_plain_v2(batch))):
                yield from self._copy(batch, count)
                return
            yield from self._v2_to_v2(batch, out_codec)
            return
        # down-conversion (RecordsUtil.downConvert)
        if batch.is_control:
            self._lose("control_batches", 1, batch)
            try:
                if any(r.control is not None and r.control.type_id == 0 for r in batch.records()):
                    self._lose("abort_markers", 1, batch)
            except KstoreError:
                pass
            return
        if count <= 0:
            self._lose("empty_batches", 1, batch)
            return
        if out_codec == ZSTD:
            raise UsageError(
                "zstd-compressed batches cannot be written as magic v0/v1; choose a codec with --compression",
                path=batch.path, position=batch.position)
        yield from self._v2_to_legacy(batch, out_codec)

    def _copy(self, batch: Batch, records: int) -> Iterator[Output]:
        yield from self.flush()
        self.stats.batches_out += 1
        self.stats.unchanged_batches += 1
        self.stats.records_out += max(records, 0)
        yield None, None, batch

    def _v2_to_v2(self, batch: Batch, out_codec: int) -> Iterator[Output]:
        table = self._table(batch)
        fields = dict(
            timestamp_type=batch.timestamp_type,
            log_append_time=batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None,
            partition_leader_epoch=batch.partition_leader_epoch,
            producer_id=batch.producer_id, producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional, delete_horizon_ms=batch.delete_horizon_ms,
        )
        if self.opts.regroup and _is_plain_v2(batch):
            key = (2, out_codec, batch.timestamp_type, fields["log_append_time"], batch.partition_leader_epoch)
            yield from self._add_whole(key, fields, table, batch.base_offset, batch.last_offset, batch.max_timestamp)
            return
        yield from self.flush()
        g = self._new_group((2, out_codec), fields, table, 0, batch.base_offset)
        self._encode(g, table, 0, table[0])
        g.last = batch.last_offset
        g.max_ts = batch.max_timestamp
        yield self._emit(g)

    def _v2_to_legacy(self, batch: Batch, out_codec: int) -> Iterator[Output]:
        t = self.opts.to_magic
        table = self._table(batch)
        self._lose("headers", encode.records_with_headers(table), batch)
        if batch.producer_id >= 0 or batch.producer_epoch >= 0 or batch.base_sequence >= 0:
            self._lose("producer_fields", 1, batch)
        if batch.is_transactional:
            self._lose("transactional", 1, batch)
        if batch.partition_leader_epoch >= 0:
            self._lose("leader_epochs", 1, batch)
        if batch.has_delete_horizon:
            self._lose("delete_horizons", 1, batch)
        first, last = encode.table_offset(table, 0), encode.table_offset(table, table[0] - 1)
        if first != batch.base_offset or last != batch.last_offset:
            self._lose("offset_ranges", 1, batch)
        if t == 0:
            self._lose("timestamps", encode.timestamps_set(table), batch)
            if batch.timestamp_type == LOG_APPEND_TIME:
                self._lose("timestamp_types", 1, batch)
        ts_type = batch.timestamp_type
        lat = batch.max_timestamp if ts_type == LOG_APPEND_TIME else None
        if out_codec != NONE and self.opts.regroup:
            key = (t, out_codec, ts_type if t else None, lat if t else None)
            yield from self._add_whole(key, dict(timestamp_type=ts_type, log_append_time=lat), table, first, last, None)
            return
        yield from self.flush()
        yield from self._emit_legacy_table(table, out_codec, ts_type, lat)

    def _legacy_to(self, batch: Batch, table: tuple, out_codec: int) -> Iterator[Output]:
        t = self.opts.to_magic
        if batch.magic == 0:
            ts_type, lat = CREATE_TIME, None
        else:
            ts_type = batch.timestamp_type
            lat = batch.max_timestamp if ts_type == LOG_APPEND_TIME else None
            if t == 0:
                self._lose("timestamps", encode.timestamps_set(table), batch)
                if ts_type == LOG_APPEND_TIME:
                    self._lose("timestamp_types", 1, batch)
        if t == 2:
            yield from self._add_records(*_legacy_v2_group(out_codec, ts_type, lat), table)
            return
        if out_codec != NONE and self.opts.regroup:
            key = (t, out_codec, ts_type if t else None, lat if t else None)
            yield from self._add_records(key, dict(timestamp_type=ts_type, log_append_time=lat), table)
            return
        yield from self.flush()
        yield from self._emit_legacy_table(table, out_codec, ts_type, lat)

    def _emit_legacy_table(self, table: tuple, codec: int, ts_type: int, lat: Optional[int]) -> Iterator[Output]:
        """One source batch's records as legacy entries (one wrapper when compressed)."""
        g = self._new_group((self.opts.to_magic, codec), dict(timestamp_type=ts_type, log_append_time=lat), table, 0,
                            encode.table_offset(table, 0))
        self._encode(g, table, 0, table[0])
        yield self._emit(g)

    def legacy_run(self, buf: memoryview, pos: int, end: int) -> Iterator[Output]:
        """The fast path to magic 2: legacy entries from `pos` into the pending group, one native call
        per output batch (:func:`.encode.legacy_to_v2`), until an entry it does not take (anything
        but a plain, valid, uncompressed or gzip entry: the regular path reads that one) or the end.
        Same groups, bytes and counts as feeding each entry; :attr:`run_pos` and
        :attr:`run_last_offset` say where it stopped."""
        opts, stats = self.opts, self.stats
        by_codec = opts.codec is None  # the output keeps each entry's codec: none and gzip group apart
        g = self._group
        if g is not None and not (len(g.key) == 5 and g.key[0] == 2 and g.key[4] == -1):
            yield from self.flush()  # a group legacy records cannot join (another batch's leader epoch)
            g = None
        self.run_last_offset = None
        carry = None
        while True:
            if g is None:
                body, group = bytearray(), None
            else:
                body, group = g.body, (g.key[1], g.key[2], g.key[3], g.base, g.base_ts, g.size)
            (reason, pos, wrappers, nbytes, records, last_wrapper, group, added, max_ts, last,
             carry) = encode.legacy_to_v2(buf, pos, end, codecs.max_record_bytes, body, group, opts.group_bytes,
                                          _V2_OVERHEAD, carry, by_codec)
            stats.batches_in += wrappers
            stats.bytes_in += nbytes
            stats.records_in += records
            if last_wrapper is not None:
                self.run_last_offset = last_wrapper
            self.run_pos = pos
            if added:
                if g is None:
                    codec, ts_type, lat, base, base_ts, _ = group
                    g = self._group = _Group(*_legacy_v2_group(codec if by_codec else opts.codec, ts_type, lat),
                                             base, base_ts, 0)
                g.body = body
                g.size = group[5]
                g.count += added
                g.records_max_ts = max_ts if g.records_max_ts is None else max(g.records_max_ts, max_ts)
                g.loose_max_ts = max_ts if g.loose_max_ts is None else max(g.loose_max_ts, max_ts)
                g.last = last
            if reason == encode.RUN_STOP:
                return
            yield from self.flush()
            g = None

    # ---------------------------------------------------------------- grouping
    def _new_group(self, key: tuple, fields: dict, table: tuple, start: int, base: int) -> _Group:
        """A group (key[1]: its codec) at base offset `base` whose first record is the table's `start`."""
        t = self.opts.to_magic
        dh = fields.get("delete_horizon_ms")
        base_ts = dh if dh is not None else encode.table_timestamp(table, start)
        g = _Group(key, fields, base, base_ts, _V2_OVERHEAD if t == 2 else 0)
        if t < 2:
            # MemoryRecordsBuilder: v1 inner offsets relative to the wrapper's first, v0 absolute.
            g.offset_base = base if (t == 1 and key[1] != NONE) else 0
            if t == 1 and fields["timestamp_type"] == LOG_APPEND_TIME:
                g.ts_attr = TIMESTAMP_TYPE_MASK
                g.legacy_ts = fields["log_append_time"]
        return g

    def _encode(self, g: _Group, table: tuple, start: int, stop: int) -> None:
        t = self.opts.to_magic
        if t == 2:
            m = encode.encode_v2(g.body, table, start, stop, g.base, g.base_ts)
        else:
            m = encode.encode_legacy(g.body, table, start, stop, t, g.ts_attr, g.offset_base, g.legacy_ts)
        g.records_max_ts = m if g.records_max_ts is None else max(g.records_max_ts, m)
        g.count += stop - start
        g.last = encode.table_offset(table, stop - 1)

    def _add_records(self, key: tuple, fields: dict, table: tuple) -> Iterator[Output]:
        """Add records one by one (legacy sources: no batch range to keep), each joining the pending
        group while it stays under the group bytes and within an int32 offset delta."""
        limit = self.opts.group_bytes
        t = self.opts.to_magic
        n = table[0]
        i = 0
        while i < n:
            g = self._group
            if g is not None and g.key != key:
                yield from self.flush()
                g = None
            fresh = g is None
            if fresh:
                g = self._group = self._new_group(key, fields, table, i, encode.table_offset(table, i))
            if t == 2:
                stop, g.size, max_ts, last = encode.add_v2(g.body, table, i, g.base, g.base_ts, g.size, limit, fresh)
            else:
                stop, g.size, max_ts, last = encode.add_legacy(g.body, table, i, t, g.ts_attr, g.offset_base,
                                                               g.legacy_ts, g.base, g.size, limit, fresh)
            if stop == i:
                yield from self.flush()
                continue
            g.records_max_ts = max_ts if g.records_max_ts is None else max(g.records_max_ts, max_ts)
            g.loose_max_ts = max_ts if g.loose_max_ts is None else max(g.loose_max_ts, max_ts)
            g.count += stop - i
            g.last = last
            i = stop

    def _add_whole(self, key: tuple, fields: dict, table: tuple, base: int, last: int,
                   max_ts: Optional[int]) -> Iterator[Output]:
        """Add a whole batch's records, keeping its offset range and max timestamp."""
        size = encode.table_size(table, self.opts.to_magic)
        g = self._group
        if g is not None and (g.key != key or g.size + size > self.opts.group_bytes or last - g.base > MAX_INT32):
            yield from self.flush()
            g = None
        if g is None:
            g = self._group = self._new_group(key, fields, table, 0, base)
        self._encode(g, table, 0, table[0])
        g.size += size
        g.last = last
        if max_ts is not None:
            g.max_ts = max_ts if g.max_ts is None else max(g.max_ts, max_ts)

    def flush(self) -> Iterator[Output]:
        """Emit the pending group (call at the end of every source segment)."""
        g = self._group
        if g is None:
            return
        self._group = None
        yield self._emit(g)

    # ---------------------------------------------------------------- building
    def pool_for(self, nbytes: int) -> Optional[ThreadPoolExecutor]:
        """The pool a codec job of `nbytes` goes to, or None: run it inline (no pool, or below POOL_MIN_BYTES)."""
        return self.executor if nbytes >= POOL_MIN_BYTES else None

    def _emit(self, g: _Group) -> Output:
        return self._emit_v2(g) if self.opts.to_magic == 2 else self._emit_legacy(g)

    def _emit_v2(self, g: _Group) -> Output:
        """MemoryRecordsBuilder's batch: the body compressed once, the header and its CRC-32C."""
        f = g.fields
        codec = g.key[1]
        lat = f.get("log_append_time")
        ts_type = f.get("timestamp_type", CREATE_TIME)
        if g.max_ts is not None:
            # Whole batches keep their own max timestamp; legacy records that joined them count too.
            max_ts = g.max_ts if g.loose_max_ts is None else max(g.max_ts, g.loose_max_ts)
        elif ts_type == LOG_APPEND_TIME and lat is not None:
            max_ts = lat
        else:
            max_ts = g.records_max_ts
        attributes = (codec & 0x07) | (TIMESTAMP_TYPE_MASK if ts_type == LOG_APPEND_TIME else 0)
        attributes |= (TRANSACTIONAL_FLAG if f.get("is_transactional") else 0)
        attributes |= (DELETE_HORIZON_FLAG if f.get("delete_horizon_ms") is not None else 0)
        # (base_offset, last_offset_delta, attributes, base_timestamp, max_timestamp, partition_leader_epoch,
        #  producer_id, producer_epoch, base_sequence, count): what encode.v2_frames writes
        header = (g.base, g.last - g.base, attributes, g.base_ts, max_ts, f.get("partition_leader_epoch", -1),
                  f.get("producer_id", -1), f.get("producer_epoch", -1), f.get("base_sequence", -1), g.count)
        self.stats.batches_out += 1
        self.stats.records_out += g.count
        if codec and self.executor is not None:
            chunk = self._chunk
            if chunk is None or chunk.codec != codec or chunk.future is not None:
                if chunk is not None:
                    chunk.submit()  # another codec's chunk (a no-op when it went when one of its batches was wanted)
                chunk = self._chunk = _CompressChunk(self.executor, codec, self.opts.level)
            part = chunk.add(g.body, header)  # the group's body handed over: the group is done
            if chunk.nbytes >= COMPRESS_CHUNK_BYTES:
                chunk.submit()
                self._chunk = None
            return None, g.base, part
        return None, g.base, _finish_v2(g.body, codec, self.opts.level, header)

    def _emit_legacy(self, g: _Group) -> Output:
        """Plain entries, or one wrapper of them (offset: its last record; timestamp: the largest, or
        the append time)."""
        t = self.opts.to_magic
        codec = g.key[1]
        self.stats.batches_out += g.count if codec == NONE else 1
        self.stats.records_out += g.count
        if codec == NONE:
            return bytes(g.body), g.base, None
        ts_attr = g.ts_attr
        if t == 0:
            wrapper_ts = -1
        elif g.legacy_ts is not None:
            wrapper_ts = g.legacy_ts
        else:
            wrapper_ts = g.records_max_ts
        args = (bytes(g.body), codec, self.opts.level, g.last, t, (codec & 0x07) | ts_attr, wrapper_ts)
        pool = self.pool_for(len(g.body))
        if pool is not None:
            return pool.submit(_finish_legacy, *args), g.base, None
        return _finish_legacy(*args), g.base, None


def _finish_v2(body: "bytes | bytearray", codec: int, level: Optional[int], header: tuple) -> Batch:
    """The body compressed once, the header and its CRC-32C around it, framed (on the pool, a whole chunk
    goes through :func:`_finish_v2_chunk` instead)."""
    if codec:
        body = get_codec(codec).compress(bytes(body), 2, level)
    return _framed_v2([body], [header])[0]


def _framed_v2(bodies: Sequence["bytes | bytearray"], headers: Sequence[tuple]) -> List[Batch]:
    """The (compressed) bodies with their headers and CRC-32C, one buffer for all, handed to the writer
    framed (two native calls), not as bytes it would frame again."""
    data = encode.v2_frames(bodies, headers)
    return decode.frame_batches(RecordBatch, data, 0, len(data), len(headers), False, None)[0]


class _CompressChunk:
    """Output batches compressed together on the pool (:data:`COMPRESS_CHUNK_BYTES`): a task for the whole
    chunk, submitted once it is full or once one of its batches is wanted."""

    __slots__ = ("pool", "codec", "level", "bodies", "headers", "nbytes", "future")

    def __init__(self, pool: ThreadPoolExecutor, codec: int, level: Optional[int]) -> None:
        self.pool = pool
        self.codec = codec
        self.level = level
        self.bodies: List["bytes | bytearray"] = []
        self.headers: List[tuple] = []
        self.nbytes = 0
        self.future: Optional[Future] = None

    def add(self, body: "bytes | bytearray", header: tuple) -> "_ChunkPart":
        assert self.future is None, "a submitted chunk takes no more batches"
        self.bodies.append(body)
        self.headers.append(header)
        self.nbytes += len(body)
        return _ChunkPart(self, len(self.bodies) - 1)

    def submit(self) -> None:
        if self.future is None:
            self.future = self.pool.submit(_finish_v2_chunk, self.bodies, self.headers, self.codec, self.level)
            self.bodies = []  # the task holds them until they are compressed


class _ChunkPart:
    """One output batch of a :class:`_CompressChunk`: ``result()`` as a Future's."""

    __slots__ = ("chunk", "index")

    def __init__(self, chunk: _CompressChunk, index: int) -> None:
        self.chunk = chunk
        self.index = index

    def result(self) -> Batch:
        self.chunk.submit()
        return self.chunk.future.result()[self.index]  # type: ignore[union-attr]


def _finish_v2_chunk(bodies: List["bytes | bytearray"], headers: List[tuple], codec: int,
                     level: Optional[int]) -> List[Batch]:
    """_finish_v2 of each body, compressed in one codec call and framed in one buffer (a pool thread runs
    this: a few calls per chunk, none per batch, as it takes the GIL for each)."""
    return _framed_v2(get_codec(codec).compress_many(bodies, 2, level), headers)


#: What an output's bytes or batch may be while the pool works on it.
PENDING = (Future, _ChunkPart)


def _finish_legacy(body: bytes, codec: int, level: Optional[int], offset: int, magic: int, attributes: int,
                   timestamp: Optional[int]) -> bytes:
    """A legacy wrapper around the compressed entries (a pool thread may run this)."""
    return build_legacy_entry(offset, magic, attributes, timestamp, None, get_codec(codec).compress(body, magic, level))

def convert_batches(batches, opts: ConvertOptions, stats: Optional[ConvertStats] = None) -> Iterator[Output]:
    """Convert an iterable of batches (one segment's worth: the pending group is flushed at the end)."""
    conv = BatchConverter(opts, stats if stats is not None else ConvertStats())
    for batch in batches:
        yield from conv.feed(batch)
    yield from conv.flush()


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
            n = batch.count if batch.magic >= 2 else (1 if not batch.compression else len(batch.records()))
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
