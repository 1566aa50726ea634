"""Per-batch message format conversion: source batches into batches of another magic and/or codec,
keeping every offset and timestamp (:class:`BatchConverter`).

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
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, List, Optional, Sequence, Tuple

from kstore_cli import codecs
from kstore_cli.codecs import GZIP, NONE, ZSTD, get_codec
from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.record import decode, encode
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
from kstore_cli.operations.convert_options import LOSS_DESCRIPTIONS, ConvertOptions, ConvertStats, LossyConversionError

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
