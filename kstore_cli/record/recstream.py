"""A compressed v2 batch's records streamed out of the decompression stream, one at a time.

Kafka reads a compressed batch the same way (DefaultRecordBatch's streaming iterator): records come
out of the decompressing input stream one by one, and the batch is never inflated whole. Here a
record is held only once its declared size is known to be within the bound
(:data:`kstore_cli.codecs.max_record_bytes`), so a 30 KB batch whose one value inflates to 1 GiB
costs the bound at most, and a batch of many small records costs one record at a time.
"""

from __future__ import annotations

from typing import Iterator, Optional

from kstore_cli import codecs
from kstore_cli.codecs import CHUNK, DecompressStream
from kstore_cli.errors import InvalidRecordError
from kstore_cli.record import decode
from kstore_cli.record.decode import Underflow

#: Compressed batches that inflate to at most this many bytes are decompressed whole and decoded in one
#: call (the fast path); larger ones are streamed record by record.
WHOLE_BATCH_BYTES = 8 << 20
# The most bytes a record's length, attributes, timestamp delta and offset delta take (5 + 1 + 10 + 5).
_RECORD_PREFIX = 21


class _Window:
    """The decompressed bytes not yet decoded: ``buf[pos:]``, refilled from the stream on demand."""

    __slots__ = ("stream", "buf", "pos", "eof")

    def __init__(self, stream: DecompressStream, head: bytes) -> None:
        self.stream = stream
        self.buf = bytearray(head)
        self.pos = 0
        self.eof = False

    def fill(self, n: int) -> int:
        """Make at least n bytes available unless the stream ends first; how many are available."""
        buf = self.buf
        avail = len(buf) - self.pos
        if avail >= n or self.eof:
            return avail
        if self.pos:
            # A fresh buffer for the rest: deleting a bytearray's front keeps its allocation.
            self.buf = buf = buf[self.pos :]
            self.pos = 0
        read = self.stream.read
        while len(buf) < n:
            chunk = read(CHUNK)
            if not chunk:
                self.eof = True
                break
            buf += chunk
        return len(buf)


def _record_offset(buf: bytearray, pos: int, end: int, base_offset: int) -> Optional[int]:
    """The offset of the record whose attributes byte is at pos, when its prefix is readable."""
    try:
        _ts, p = decode.read_varlong(buf, pos + 1, end)
        delta, _p = decode.read_varint(buf, p, end)
    except (Underflow, InvalidRecordError):
        return None
    return base_offset + delta


def stream_v2_records(record_cls: type, header_cls: type, batch, stream: DecompressStream, head: bytes,
                      bound: int) -> Iterator:
    """The batch's records, decoded as they come out of `stream` (whose first bytes, already read, are
    `head`), each one checked against `bound` before it is held. Kafka's errors for a short or long
    batch; RecordTooLargeError for a record over the bound (raised before any of it is kept)."""
    count = batch.count
    base_offset = batch.base_offset
    base_timestamp = batch.base_timestamp
    log_append = batch.max_timestamp if batch.attributes & 0x08 else None
    base_sequence = batch.base_sequence
    build = decode.build_v2_records
    read_varint = decode.read_varint
    w = _Window(stream, head)
    for _ in range(count):
        avail = w.fill(_RECORD_PREFIX)
        pos = w.pos
        if avail == 0:
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
        try:
            length, body = read_varint(w.buf, pos, pos + min(avail, 5))
        except Underflow:
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached") from None
        prefix = body - pos
        have = avail - prefix
        if length < 0 or length > bound:
            offset = _record_offset(w.buf, body, pos + avail, base_offset)
            # Count what the stream still holds, without keeping it: Kafka's message when the record
            # cannot be there, ours when it is there but over the bound.
            if length < 0:
                remaining = have + stream.skip(-1)
            else:
                remaining = have + stream.skip(length - have) if have < length else have
            if length < 0 or remaining < length:
                raise InvalidRecordError(
                    f"Invalid record size: expected {length} bytes in record payload, "
                    f"but instead the buffer has only {remaining} remaining bytes."
                )
            what = f"the record at offset {offset}" if offset is not None else "a record"
            raise codecs.too_large(what, length, bound)
        size = prefix + length
        if have < length:
            avail = w.fill(size)
            pos = w.pos
            if avail < size:
                raise InvalidRecordError(
                    f"Invalid record size: expected {length} bytes in record payload, "
                    f"but instead the buffer has only {avail - prefix} remaining bytes."
                )
        with memoryview(w.buf) as mv:
            data = bytes(mv[pos : pos + size])
        w.pos = pos = pos + size
        if pos > CHUNK:  # let go of a large record's bytes before the caller gets it
            w.buf = w.buf[pos:]
            w.pos = 0
        records = build(record_cls, header_cls, batch, data, 0, size, 1, base_offset, base_timestamp, log_append,
                        base_sequence)
        yield records[0]
    if w.fill(1):
        raise InvalidRecordError("Incorrect declared batch size, records still remaining in file")
