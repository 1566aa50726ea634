"""Generated inputs for bench/run.py: single segments for record decoding and partitions (with indexes).

Every batch is built once by kstore's own builder (``kstore_cli.record.builder``) into a small
pool of templates; the file is then filled with copies that only get a new base offset and new
timestamps (v2: base/max timestamp patched and the CRC-32C recomputed; legacy: the wrapper
offset, which the message CRC does not cover). So a 1 GiB file takes seconds, the data is still
valid Kafka data (every CRC right, offsets contiguous from 0), and the generator knows exactly
what a decoder must find (:class:`Digest`). Partitions are written through kstore's
``PartitionWriter`` so their ``.index``/``.timeindex`` follow Kafka's append rule.

Values (``Kind.values``): "text" are words with a random hex tail, so codecs compress about 2:1, as
log lines and JSON usually do; "binary" are random bytes (what Avro/Protobuf/encrypted topics hold:
hardly ever valid UTF-8); "mixed" is a realistic topic mix: JSON with non-ASCII text, Avro-like binary
records, null keys and tombstones. One record in five carries a header.
"""

from __future__ import annotations

import os
import random
import struct
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

from crc32c import crc32c

from kstore_cli.codecs import GZIP, LZ4, NONE, ZSTD
from kstore_cli.record.builder import RecordSpec, build_legacy_batch, build_v2_batch

TS0 = 1_700_000_000_000
CODECS = {"none": NONE, "gzip": GZIP, "lz4": LZ4, "zstd": ZSTD}
_WORDS = [bytes(random.Random(i).choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(2 + i % 9)) for i in range(2000)]


class Kind(NamedTuple):
    """One input shape: message format, codec, value size, records per batch, what the values hold."""

    magic: int
    codec: str
    value_size: int
    batch_records: int
    values: str = "text"  # "text", "binary" or "mixed" (see the module's docstring)

    @property
    def name(self) -> str:
        size = "1K" if self.value_size >= 1000 else f"{self.value_size}B"
        tail = "" if self.values == "text" else f"-{self.values}"
        return f"v{self.magic}-{self.codec}-{size}-x{self.batch_records}{tail}"

    @property
    def description(self) -> str:
        """What a row's input is, in words."""
        what = {"text": "ASCII text values", "binary": "random binary values (not UTF-8)",
                "mixed": "mixed values (JSON with non-ASCII text, Avro-like binary, null keys, tombstones)"}
        return (f"magic v{self.magic}, {self.codec}, {self.batch_records}-record batches, ~{self.value_size} B "
                f"{what[self.values]}")


#: The record-decoding inputs, side by side with the peers (issue 8: v2 none/lz4/zstd/gzip, ~100 B
#: and ~1 KiB values, 1- and 100-record batches, legacy v1 gzip).
DECODE_KINDS: List[Kind] = [
    Kind(2, "none", 100, 100),
    Kind(2, "none", 1024, 100),
    Kind(2, "none", 100, 1),
    Kind(2, "lz4", 100, 100),
    Kind(2, "zstd", 100, 100),
    Kind(2, "gzip", 100, 100),
    Kind(2, "lz4", 1024, 100),
    Kind(2, "zstd", 1024, 100),
    Kind(2, "gzip", 1024, 100),
    Kind(2, "zstd", 100, 1),
    Kind(1, "gzip", 100, 100),
    Kind(1, "gzip", 1024, 100),
    Kind(2, "none", 100, 100, "binary"),
    Kind(2, "zstd", 100, 100, "mixed"),
]

_NAMES = ["Zoë", "Jürgen", "François", "Łukasz", "Søren", "Ana", "Bob", "山田太郎", "Иван", "José"]


class Digest(NamedTuple):
    """What a full decode must find: record count, sum of offsets, key+value bytes, headers."""

    records: int
    offset_sum: int
    kv_bytes: int
    headers: int


def value(rng: random.Random, size: int) -> bytes:
    """About `size` bytes (+-20%): words, then a random hex tail of a quarter of it."""
    n = rng.randint(size * 4 // 5, size * 6 // 5)
    tail = n // 4
    out = bytearray()
    while len(out) < n - tail:
        out += rng.choice(_WORDS) + b" "
    return bytes(out[: n - tail]) + rng.randbytes(tail // 2 + 1).hex().encode()[:tail]


def _zigzag(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _mixed(rng: random.Random, size: int) -> Tuple[Optional[bytes], Optional[bytes]]:
    """(key, value) of a realistic topic: JSON events, Avro-like binary records, tombstones, null keys."""
    kind = rng.random()
    key: Optional[bytes] = b"user-%06d" % rng.randrange(10**6)
    if kind < 0.45:  # JSON, some of it non-ASCII
        pad = "x" * max(0, size - 70)
        val: Optional[bytes] = ('{"id":%d,"name":"%s","amount":%.2f,"note":"%s"}' % (
            rng.randrange(10**9), rng.choice(_NAMES), rng.random() * 1000, pad[: rng.randrange(len(pad) + 1)])).encode()
    elif kind < 0.85:  # Avro-like: zigzag longs, length-prefixed strings, a random fixed/bytes field
        name = rng.choice(_NAMES).encode()
        val = (_zigzag(rng.randrange(-2**40, 2**40)) + _zigzag(len(name)) + name + _zigzag(rng.randrange(10**6))
               + rng.randbytes(max(1, size // 2 + rng.randrange(-size // 4, size // 4 + 1))))
    elif kind < 0.95:
        key, val = None, rng.randbytes(rng.randint(size * 4 // 5, size * 6 // 5))  # keyless binary
    else:
        val = None  # a tombstone
    return key, val


def records(rng: random.Random, n: int, value_size: int, values: str = "text") -> List[RecordSpec]:
    """n records at offsets 0..n-1 (timestamps TS0 + i), one in five with a header."""
    out = []
    for i in range(n):
        key: Optional[bytes] = b"key-%08d" % rng.randrange(10**8)
        if values == "binary":
            val: Optional[bytes] = rng.randbytes(rng.randint(value_size * 4 // 5, value_size * 6 // 5))
        elif values == "mixed":
            key, val = _mixed(rng, value_size)
        else:
            val = value(rng, value_size)
        out.append(RecordSpec(i, TS0 + i, key, val,
                              [("trace-id", rng.randbytes(8).hex().encode())] if rng.random() < 0.2 else []))
    return out


class _Template(NamedTuple):
    data: bytes
    records: int
    kv_bytes: int
    headers: int


def _templates(kind: Kind, seed: int, pool: int) -> List[_Template]:
    rng = random.Random(seed)
    out = []
    for _ in range(pool):
        specs = records(rng, kind.batch_records, kind.value_size, kind.values)
        if kind.magic >= 2:
            data = build_v2_batch(specs, codec=CODECS[kind.codec])
            headers = sum(len(s.headers) for s in specs)
        else:
            data = build_legacy_batch(specs, magic=kind.magic, codec=CODECS[kind.codec])
            headers = 0  # legacy messages have no headers
        kv = sum(len(s.key or b"") + len(s.value or b"") for s in specs)
        out.append(_Template(data, len(specs), kv, headers))
    return out


def batches(kind: Kind, total_records: Optional[int] = None, total_bytes: Optional[int] = None,
            seed: int = 1) -> Iterator[Tuple[bytes, int, int, int]]:
    """Batches of `kind` from offset 0 until `total_records` records or `total_bytes` bytes are reached.

    Yields (batch bytes, records, key+value bytes, headers).
    """
    pool = _templates(kind, seed, 16 if kind.batch_records > 1 else 64)
    offset = 0
    written = 0
    i = 0
    while (total_records is None or offset < total_records) and (total_bytes is None or written < total_bytes):
        t = pool[i % len(pool)]
        buf = bytearray(t.data)
        if kind.magic >= 2:
            struct.pack_into(">q", buf, 0, offset)  # baseOffset: not covered by the CRC
            ts = TS0 + offset
            struct.pack_into(">qq", buf, 27, ts, ts + t.records - 1)  # base/max timestamp (deltas 0..n-1)
            struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
        elif CODECS[kind.codec]:
            struct.pack_into(">q", buf, 0, offset + t.records - 1)  # a wrapper carries its last offset
        else:  # pragma: no cover - plain legacy entries are not among the kinds
            raise ValueError("plain legacy entries are not generated")
        yield bytes(buf), t.records, t.kv_bytes, t.headers
        offset += t.records
        written += len(buf)
        i += 1


def write_segment(path: str, kind: Kind, *, total_records: Optional[int] = None, total_bytes: Optional[int] = None,
                  seed: int = 1) -> Dict[str, int]:
    """One .log file (no indexes) for the decode benchmarks; returns counts and the digest."""
    n = kv = hs = count = size = 0
    with open(path, "wb", buffering=8 << 20) as f:
        for data, r, k, h in batches(kind, total_records, total_bytes, seed):
            f.write(data)
            n += r
            kv += k
            hs += h
            count += 1
            size += len(data)
    return {"bytes": size, "batches": count, "records": n,
            "digest": list(Digest(n, n * (n - 1) // 2, kv, hs))}


def write_partition(directory: str, kind: Kind, *, total_records: Optional[int] = None,
                    total_bytes: Optional[int] = None, segment_bytes: Optional[int] = None,
                    index_interval_bytes: int = 4096, seed: int = 1) -> Dict[str, int]:
    """A partition directory (.log, .index, .timeindex) written by kstore's PartitionWriter."""
    from kstore_cli.log.writer import PartitionWriter

    os.makedirs(directory, exist_ok=True)
    n = count = size = 0
    writer = PartitionWriter(directory, suffix="", segment_bytes=segment_bytes,
                             index_interval_bytes=index_interval_bytes)
    with writer:
        chunk: List[bytes] = []
        chunk_size = 0
        first = 0
        for data, r, _k, _h in batches(kind, total_records, total_bytes, seed):
            chunk.append(data)
            chunk_size += len(data)
            n += r
            count += 1
            if chunk_size >= 4 << 20:
                writer.append_bytes(b"".join(chunk), first_offset=first)
                chunk, chunk_size, first = [], 0, n
            size += len(data)
        if chunk:
            writer.append_bytes(b"".join(chunk), first_offset=first)
    return {"bytes": size, "batches": count, "records": n, "segments": len(writer.segments)}


def check_with_kafka_python(path: str, max_batches: int = 200) -> Optional[str]:
    """Read the first batches of a file with kafka-python: None when they decode with contiguous offsets
    from 0 and valid CRCs, else what went wrong (or that kafka-python is missing)."""
    try:
        from kafka.record import MemoryRecords
    except ImportError:
        return "kafka-python not installed: inputs not cross-checked"
    with open(path, "rb") as f:
        head = f.read(8 << 20)
    mr = MemoryRecords(head)
    expected = 0
    for _ in range(max_batches):
        batch = mr.next_batch()
        if batch is None:
            break
        if hasattr(batch, "validate_crc") and not batch.validate_crc():
            return f"kafka-python: CRC check failed at offset {expected}"
        for rec in batch:
            if rec.offset != expected:
                return f"kafka-python: offset {rec.offset} where {expected} was expected"
            expected += 1
    if expected == 0:
        return "kafka-python read no record"
    return None
