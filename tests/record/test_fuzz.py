"""Mutation fuzzing of every segment-core reader: only KstoreError may escape, nothing hangs, and
memory stays bounded by the input (not by a damaged size or count field).

Seeds are Kafka's corpus files (.log, .index, .timeindex, .txnindex, .snapshot, checkpoints). The
mutators know the formats: they hit size/count/codec/length fields with boundary values, cut files at
every kind of boundary, append garbage, plant over-long varints, and re-compress damaged payloads so
the decoders behind each codec are reached with valid CRCs and frames.

Every CLI_EVERY-th input also goes through the read-only commands (dump-segment, verify-index,
inspect, find, rebuild-index --dry-run) in-process, over a small data dir holding the mutated file
where Kafka keeps it: only the documented exit codes (0/1), only kstore errors, no hang, memory
bounded the same way.

Deterministic (seeded). CI size: a few thousand inputs, under whichever record decoder is active
(CI runs the suite with the native one and with KSTORE_DECODER=python); ``bench/fuzz_long.py``
runs the same mutators for as long as wanted, under both decoders, in child processes so that a
crash in native code names its input.

Memory bound, per input: the traced peak (tracemalloc) while parsing must stay under
``FIXED_ALLOWANCE + PER_BYTE * (len(input) + bytes the codecs legitimately decompressed)``.

* ``PER_BYTE = 64``: the densest input is a run of 7-byte v2 records; each becomes a Record object
  (15 slots) plus its decoded tuple and ints, ~300-400 bytes, i.e. ~50 bytes of Python objects per
  input byte while one batch's records are alive. Decompressed bytes are charged the same rate,
  since their records are decoded the same way.
* ``FIXED_ALLOWANCE = 2 MiB``: the interpreter's own noise plus the zstd reader's fixed 1 MiB read
  chunk (``kstore_cli/codecs/zstd.py``), which does not depend on the input.

A damaged size or count can claim up to 2 GiB (or 4 MiB for an LZ4 block-size id), so anything
driven by such a field shows up far above this bound, while the bound still leaves room for every
real decoding cost.
"""

from __future__ import annotations

import io
import json
import random
import signal
import struct
import time
import tracemalloc
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from kstore_cli.codecs import Codec, get_codec
from kstore_cli.errors import KstoreError
from kstore_cli.record.reader import read_batches
from kstore_cli.log.checkpoint import (
    read_clean_shutdown,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    read_properties,
)
from kstore_cli.record.crc import crc32c
from kstore_cli.record.decode import BACKEND
from kstore_cli.log.index import OffsetIndex, TimeIndex, TransactionIndex
from kstore_cli.log.snapshot import parse_snapshot, read_snapshot

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fixtures" / "kafka-corpus"

FIXED_ALLOWANCE = 2 * 1024 * 1024
PER_BYTE = 64
TIME_BUDGET_S = 5.0  # per input; a typical input takes well under 10 ms

KINDS = ("log", "index", "timeindex", "txnindex", "snapshot", "checkpoint")


# --------------------------------------------------------------------------- seeds


def _seed_files() -> Dict[str, List[Path]]:
    files: Dict[str, List[Path]] = {k: [] for k in KINDS}
    for p in sorted(CORPUS.glob("logs*/**/*")):
        if not p.is_file():
            continue
        name = p.name
        suffix = p.suffix.lstrip(".")
        if suffix in ("log", "index", "timeindex", "txnindex", "snapshot"):
            files[suffix].append(p)
        elif name.endswith("checkpoint") or name in ("partition.metadata", ".kafka_cleanshutdown", "meta.properties"):
            files["checkpoint"].append(p)
    return files


def _generated_seeds(files: Dict[str, List[Path]]) -> None:
    """Checkpoint kinds the corpus lacks (cleaner-offset-checkpoint, meta.properties), written once
    into a temporary dir laid out like a data dir (the CLI stage places files by their parent)."""
    import atexit
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="kstore-fuzz-seeds-"))
    atexit.register(shutil.rmtree, root, True)
    (root / "cleaner-offset-checkpoint").write_text("0\n3\nv2-compact 0 12\n__consumer_offsets 0 0\norders 3 99\n")
    (root / "meta.properties").write_text("#\nversion=1\nbroker.id=1\ncluster.id=AAECAwQFBgcICQoLDA0ODw\n"
                                          "directory.id=AAECAwQFBgcICQoLDA0ODw\nnode.id=1\n")
    files["checkpoint"] += [root / "cleaner-offset-checkpoint", root / "meta.properties"]


SEEDS = _seed_files()
_generated_seeds(SEEDS)


@dataclass
class Entry:
    """A framed entry of a seed segment (positions from the unmutated file)."""

    pos: int
    size: int
    magic: int
    codec: int


_framing_cache: Dict[Path, List[Entry]] = {}


def framing(path: Path, data: bytes) -> List[Entry]:
    if path not in _framing_cache:
        entries = []
        try:
            for b in read_batches(data):
                entries.append(Entry(b.position, b.size, b.magic, b.compression))
        except KstoreError:
            pass
        _framing_cache[path] = entries
    return _framing_cache[path]


# --------------------------------------------------------------------------- mutators

INT32_VALUES = [2**31 - 1, -1, 0, 13, 14, 12, 1, 17, 18, 61, 60, 62, -(2**31), 2**31 - 2, 0x7FFFFFF0, 1 << 20, 255, 256]
INT16_VALUES = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 0x7F, 0xFF, 0x0F, 0x1F, 0x2F, 0x3F, 0x47, -32768, 32767]
INT8_VALUES = [-1, 0, 1, 2, 3, 4, 5, 6, 7, 127, -128]
INT64_VALUES = [-1, 0, 2**63 - 1, -(2**63), 2**31, 1]

# (offset in entry, struct format) of each header field
V2_FIELDS = [(8, ">i"), (12, ">i"), (16, ">b"), (17, ">I"), (21, ">h"), (23, ">i"), (27, ">q"), (35, ">q"),
             (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i")]
LEGACY_FIELDS = [(0, ">q"), (8, ">i"), (12, ">I"), (16, ">b"), (17, ">b")]


@dataclass
class Seed:
    kind: str
    path: Path
    data: bytes
    entries: List[Entry] = field(default_factory=list)


def _value_for(rng: random.Random, fmt: str, old: int = 0) -> int:
    if fmt in (">i", ">I"):
        v = rng.choice(INT32_VALUES + [old + 1, old - 1, rng.randrange(-(2**31), 2**31)])
        return v & 0xFFFFFFFF if fmt == ">I" else ((v + 2**31) % 2**32) - 2**31
    if fmt == ">h":
        v = rng.choice(INT16_VALUES + [old ^ (1 << rng.randrange(16))])
        return ((v + 2**15) % 2**16) - 2**15
    if fmt == ">b":
        v = rng.choice(INT8_VALUES)
        return ((v + 128) % 256) - 128
    v = rng.choice(INT64_VALUES + [old + rng.randrange(-1000, 1000)])
    return ((v + 2**63) % 2**64) - 2**63


def _put(buf: bytearray, pos: int, fmt: str, value: int) -> None:
    if 0 <= pos and pos + struct.calcsize(fmt) <= len(buf):
        struct.pack_into(fmt, buf, pos, value)


def m_bit_flips(rng, seed, buf):
    for _ in range(rng.randint(1, 4)):
        if buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    return "bit-flips"


def m_byte_overwrite(rng, seed, buf):
    if buf:
        i = rng.randrange(len(buf))
        n = rng.randint(1, 8)
        buf[i : i + n] = bytes(rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)]) for _ in range(n))
    return "byte-overwrite"


def m_insert_delete(rng, seed, buf):
    if not buf:
        buf.extend(bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))))
        return "insert"
    i = rng.randrange(len(buf))
    if rng.random() < 0.5:
        del buf[i : i + rng.randint(1, 16)]
        return "delete"
    buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return "insert"


def m_truncate(rng, seed, buf):
    cuts = [0, 1, len(buf) // 2, max(0, len(buf) - 1)]
    for e in seed.entries:
        for d in (0, 1, 8, 11, 12, 16, 17, 18, 21, 23, 26, 30, 57, 60, 61, 62, e.size - 1, e.size + 1, e.size // 2):
            cuts.append(e.pos + d)
    if seed.kind in ("index", "timeindex", "txnindex", "snapshot"):
        unit = {"index": 8, "timeindex": 12, "txnindex": 34, "snapshot": 46}[seed.kind]
        base = 10 if seed.kind == "snapshot" else 0
        cuts += [base + unit * k + d for k in range(0, len(buf) // unit + 1) for d in (-1, 0, 1)]
        cuts += [2, 6, 9, 10]
    cut = min(max(0, rng.choice(cuts)), len(buf))
    del buf[cut:]
    return f"truncate@{cut}"


def m_append_garbage(rng, seed, buf):
    choice = rng.randrange(5)
    if choice == 0:
        buf.extend(bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))
    elif choice == 1:
        buf.extend(b"\x00" * rng.choice([1, 12, 17, 18, 61, 4096]))  # a preallocated zero tail
    elif choice == 2:  # a plausible prefix claiming a huge entry
        buf.extend(struct.pack(">qiib", rng.randrange(2**40), rng.choice([2**31 - 1, 2**30, 1 << 20]), 0, rng.choice([0, 1, 2])))
        buf.extend(b"\x00" * rng.randint(0, 60))
    elif choice == 3 and seed.entries:  # a copy of an entry with a damaged size
        e = rng.choice(seed.entries)
        copy = bytearray(seed.data[e.pos : e.pos + e.size])
        _put(copy, 8, ">i", _value_for(rng, ">i", e.size - 12))
        buf.extend(copy)
    else:
        buf.extend(b"\xff" * rng.randint(1, 80))
    return f"append-garbage/{choice}"


def m_field(rng, seed, buf):
    if not seed.entries:
        return m_byte_overwrite(rng, seed, buf)
    e = rng.choice(seed.entries)
    if e.magic >= 2:
        off, fmt = rng.choice(V2_FIELDS)
    else:
        key_len_at = 18 if e.magic == 0 else 26
        fields = LEGACY_FIELDS + [(key_len_at, ">i")]
        if e.pos + key_len_at + 4 <= len(seed.data):
            (klen,) = struct.unpack_from(">i", seed.data, e.pos + key_len_at)
            fields.append((key_len_at + 4 + max(klen, 0), ">i"))  # the value length
        if e.magic == 1:
            fields.append((18, ">q"))
        off, fmt = rng.choice(fields)
    old = struct.unpack_from(fmt, seed.data, e.pos + off)[0] if e.pos + off + struct.calcsize(fmt) <= len(seed.data) else 0
    _put(buf, e.pos + off, fmt, _value_for(rng, fmt, old))
    if e.magic >= 2 and off >= 21 and rng.random() < 0.5:
        _fix_v2_crc(buf, e.pos, e.size)
    return f"field@{e.pos}+{off}"


def m_codec_id(rng, seed, buf):
    if not seed.entries:
        return m_bit_flips(rng, seed, buf)
    e = rng.choice(seed.entries)
    at = e.pos + (22 if e.magic >= 2 else 17)
    if at < len(buf):
        buf[at] = (buf[at] & 0xF8) | rng.choice([5, 6, 7, 5, 6, 7, 0, 1, 2, 3, 4])
        if e.magic >= 2 and rng.random() < 0.5:
            _fix_v2_crc(buf, e.pos, e.size)
    return f"codec-id@{e.pos}"


def m_varint_garbage(rng, seed, buf):
    """Over-long varints / continuation bits where v2 records begin."""
    v2 = [e for e in seed.entries if e.magic >= 2 and e.size > 61]
    if not v2:
        return m_byte_overwrite(rng, seed, buf)
    e = rng.choice(v2)
    start = e.pos + 61 + (0 if rng.random() < 0.5 else rng.randrange(e.size - 61))
    n = rng.randint(1, 11)
    buf[start : start + n] = bytes(rng.choice([0xFF, 0x80, 0xFE, 0x81]) for _ in range(n))
    if rng.random() < 0.5:
        _fix_v2_crc(buf, e.pos, e.size)
    return f"varint-garbage@{start}"


def _fix_v2_crc(buf: bytearray, pos: int, size: int) -> None:
    if pos + size <= len(buf) and size >= 21:
        struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21 : pos + size])))


def _mutate_plain(rng, data: bytearray, seed) -> None:
    """A payload mutation for the inside of a compressed batch."""
    choice = rng.randrange(5)
    if not data:
        data.extend(b"\xff" * 5)
    elif choice == 0:
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif choice == 1:
        del data[rng.randrange(len(data)) :]
    elif choice == 2:
        i = rng.randrange(len(data))
        data[i : i + 5] = b"\xff\xff\xff\xff\x0f"  # a maximal varint / a huge int32
    elif choice == 3:
        data.extend(bytes(rng.randrange(256) for _ in range(rng.randint(1, 20))))
    else:
        i = rng.randrange(len(data))
        data[i : i + 4] = struct.pack(">i", rng.choice(INT32_VALUES))


def m_recompress(rng, seed, buf):
    """Damage the decompressed payload of a compressed entry, then compress and frame it validly."""
    compressed = [e for e in seed.entries if 1 <= e.codec <= 4]
    if not compressed:
        return m_field(rng, seed, buf)
    e = rng.choice(compressed)
    raw = seed.data[e.pos : e.pos + e.size]
    codec = get_codec(e.codec)
    try:
        if e.magic >= 2:
            plain = bytearray(codec.decompress(raw[61:], 2))
            _mutate_plain(rng, plain, seed)
            if rng.random() < 0.3:  # a count that disagrees with the payload
                count = _value_for(rng, ">i")
            else:
                count = struct.unpack_from(">i", raw, 57)[0]
            body = bytearray(raw[:61]) + codec.compress(bytes(plain), 2)
            struct.pack_into(">i", body, 8, len(body) - 12)
            struct.pack_into(">i", body, 57, count)
            _fix_v2_crc(body, 0, len(body))
        else:
            key_len_at = 18 if e.magic == 0 else 26
            (klen,) = struct.unpack_from(">i", raw, key_len_at)
            vlen_at = key_len_at + 4 + max(klen, 0)
            (vlen,) = struct.unpack_from(">i", raw, vlen_at)
            plain = bytearray(codec.decompress(raw[vlen_at + 4 : vlen_at + 4 + vlen], e.magic))
            _mutate_plain(rng, plain, seed)
            value = codec.compress(bytes(plain), e.magic)
            body = bytearray(raw[: vlen_at]) + struct.pack(">i", len(value)) + value
            struct.pack_into(">i", body, 8, len(body) - 12)
            struct.pack_into(">I", body, 12, zlib.crc32(bytes(body[16:])) & 0xFFFFFFFF)
    except KstoreError:
        return m_bit_flips(rng, seed, buf)
    buf[e.pos : e.pos + e.size] = body
    return f"recompress@{e.pos}"


def m_compressed_bytes(rng, seed, buf):
    """Flip bytes inside a compressed payload (frame headers, block sizes, ...), CRC fixed."""
    compressed = [e for e in seed.entries if 1 <= e.codec <= 4 and e.size > 70]
    if not compressed:
        return m_bit_flips(rng, seed, buf)
    e = rng.choice(compressed)
    start = e.pos + {0: 26, 1: 34}.get(e.magic, 61)  # v2 records / a legacy wrapper's value (null key)
    i = start + min(rng.choice([0, 4, 5, 6, 7, 8, 12, 16, 20, rng.randrange(e.size - (start - e.pos))]), e.size - (start - e.pos) - 1)
    if i >= len(buf):  # an earlier mutation of this input cut the file
        return m_bit_flips(rng, seed, buf)
    buf[i] = rng.choice([buf[i] ^ (1 << rng.randrange(8)), 0xFF, 0x00, 0x7F, 0x80, 0x40, 0x70])
    if e.magic >= 2:
        _fix_v2_crc(buf, e.pos, e.size)
    return f"compressed-bytes@{i}"


TEXT_SNIPPETS = [b"99999999999999999999999999", b"-1", b"-9223372036854775809", b"\x00", b"\xff\xfe", b"\r",
                 b"\n", b" ", b"\t", b"abc", b"1_000", b"\xd9\xa1", b"=", b":", b"\\", b"[" * 5000, b"{", b"9" * 5000]


def m_text(rng, seed, buf):
    """Checkpoint-style damage: numbers, lines, encodings, deep nesting."""
    lines = bytes(buf).split(b"\n")
    choice = rng.randrange(5)
    i = rng.randrange(len(lines))
    if choice == 0:
        lines[i] = rng.choice(TEXT_SNIPPETS)
    elif choice == 1:
        del lines[i]
    elif choice == 2:
        lines.insert(i, rng.choice(lines))
    elif choice == 3:
        parts = lines[i].split(b" ")
        j = rng.randrange(len(parts))
        parts[j] = rng.choice(TEXT_SNIPPETS)
        lines[i] = b" ".join(parts)
    else:
        lines[i] = lines[i] + rng.choice(TEXT_SNIPPETS)
    buf[:] = b"\n".join(lines)
    return f"text/{choice}"


BINARY_MUTATORS: List[Tuple[Callable, int]] = [
    (m_bit_flips, 3), (m_byte_overwrite, 2), (m_insert_delete, 1), (m_truncate, 3), (m_append_garbage, 2),
]
LOG_MUTATORS = BINARY_MUTATORS + [
    (m_field, 6), (m_codec_id, 2), (m_varint_garbage, 3), (m_recompress, 4), (m_compressed_bytes, 3),
]
TEXT_MUTATORS = BINARY_MUTATORS + [(m_text, 8)]


def _pick(rng, weighted):
    total = sum(w for _f, w in weighted)
    r = rng.uniform(0, total)
    for f, w in weighted:
        r -= w
        if r <= 0:
            return f
    return weighted[-1][0]


@dataclass
class FuzzInput:
    kind: str
    seed_path: Path
    data: bytes
    what: str
    index: int


def generate(kind: str, rng_seed: int, n: int) -> Iterator[FuzzInput]:
    """n mutated inputs of one kind, deterministic for (kind, rng_seed)."""
    rng = random.Random(f"{kind}:{rng_seed}")
    paths = SEEDS[kind]
    mutators = LOG_MUTATORS if kind == "log" else TEXT_MUTATORS if kind == "checkpoint" else BINARY_MUTATORS
    for i in range(n):
        path = paths[rng.randrange(len(paths))]
        data = path.read_bytes()
        seed = Seed(kind, path, data, framing(path, data) if kind == "log" else [])
        buf = bytearray(data)
        whats = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            mutator = _pick(rng, mutators)
            whats.append(mutator(rng, seed, buf))
        yield FuzzInput(kind, path, bytes(buf), "+".join(whats), i)


# --------------------------------------------------------------------------- exercising every reader


def _swallow(fn: Callable) -> None:
    try:
        fn()
    except KstoreError:
        pass


def exercise_log(source) -> int:
    """Everything a caller can ask of batches and records; returns the records seen."""
    seen = 0
    try:
        for b in read_batches(source):
            _ = (b.is_valid, b.size, b.magic, b.crc, b.compression, b.compression_name, b.timestamp_type,
                 b.timestamp_type_name, b.last_offset, b.next_offset, b.is_control, b.is_transactional,
                 b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence, b.partition_leader_epoch,
                 b.max_timestamp, b.delete_horizon_ms, b.has_delete_horizon, repr(b), len(b.buffer))
            _swallow(b.ensure_valid)
            _swallow(lambda: b.base_offset)
            try:
                records = b.records()
            except KstoreError:
                continue
            # iter(batch): natively a plain batch's records built one at a time; the same records
            assert [(r.offset, r.key, r.value, r.headers) for r in b] == [(r.offset, r.key, r.value, r.headers)
                                                                         for r in records]
            for r in records:
                _ = (r.offset, r.timestamp, r.sequence, r.key, r.value, r.headers, r.header_keys, r.key_size,
                     r.value_size, r.has_key, r.has_value, r.is_valid, r.is_control, r.size_in_bytes, repr(r),
                     r.key_view, r.value_view)
                if b.is_control:
                    _swallow(lambda: r.control and (r.control.type_name, r.control.is_transaction_marker))
                seen += 1
    except KstoreError:
        pass
    return seen


def exercise_file(kind: str, path: Path) -> None:
    if kind in ("index", "timeindex"):
        idx = _try(lambda: (OffsetIndex if kind == "index" else TimeIndex)(path))
        if idx is None:
            return
        list(idx)
        _ = (idx.entries, len(idx), idx.zero_tail_start())
        if kind == "index":
            idx.last_offset()
        else:
            idx.last_entry()
        _swallow(idx.sanity_check)
        for target in (-1, 0, idx.base_offset, idx.base_offset + 50, 2**63 - 1, -(2**63)):
            idx.lookup(target)
        if idx.entries:
            idx.raw_entry(idx.entries - 1)
    elif kind == "txnindex":
        tx = _try(lambda: TransactionIndex(path))
        if tx is None:
            return
        for t in tx.entries():
            _ = (repr(t), t.pack(), t == t)
        _swallow(tx.sanity_check)
    elif kind == "snapshot":
        snap = _try(lambda: read_snapshot(path))
        if snap is not None:
            for p in snap.producers:
                _ = (p.has_batch_metadata, p.first_sequence, p.first_offset, p.open_transaction_first_offset, p.pack(), repr(p))
        _swallow(lambda: parse_snapshot(path.read_bytes()))
    else:
        for reader in (read_offset_checkpoint, read_leader_epoch_checkpoint, read_partition_metadata,
                       read_clean_shutdown, read_properties):
            _swallow(lambda: reader(path))


def _try(fn):
    try:
        return fn()
    except KstoreError:
        return None


# --------------------------------------------------------------------------- the CLI read paths

#: Every CLI_EVERY-th input of a kind also goes through the read-only commands (they share the
#: readers above, so a sample suffices; each command costs a few ms).
CLI_EVERY = 12
#: What each read-only command may exit with on damaged input (README: 0 nothing wrong, 1 problems
#: in the data; find: 1 nothing at or after the target). 2 (usage) and 3 (unreadable) would mean a
#: readable file was mistaken for a bad argument or an unreadable one.
CLI_EXIT_CODES = {0, 1}
CLI_FIXED_ALLOWANCE = 4 * 1024 * 1024  # Click's context, the formatting of the output lines


def _is_partition_dir(path: Path) -> bool:
    name = path.name
    return "-" in name and name.rsplit("-", 1)[1].isdigit()


def _cli_layout(inp: "FuzzInput", workdir: Path) -> Tuple[Path, Path, Path]:
    """A small data dir holding the mutated file where Kafka keeps it: a segment's files with its
    siblings of the same base offset, a partition's checkpoints beside one segment, a data dir's
    checkpoints beside a small partition. Returns (data dir, partition dir, the mutated file)."""
    import shutil

    data = workdir / "cli-data"
    if data.exists():
        shutil.rmtree(data)
    seed = inp.seed_path
    if _is_partition_dir(seed.parent):
        part = data / seed.parent.name
        part.mkdir(parents=True)
        prefix = seed.name.split(".", 1)[0]
        siblings = sorted(seed.parent.iterdir())
        if not prefix.isdigit():  # a partition checkpoint: keep the first segment with it
            prefix = next((p.name.split(".", 1)[0] for p in siblings if p.suffix == ".log"), "")
        for p in siblings:
            if p.is_file() and (p.name.startswith(prefix + ".") or p.name in ("leader-epoch-checkpoint",
                                                                                "partition.metadata")):
                shutil.copyfile(p, part / p.name)
        target = part / seed.name
    else:  # a data dir's own file
        small = CORPUS / "logs" / "v2-none-0"
        part = data / small.name
        shutil.copytree(small, part)
        target = data / seed.name
    target.write_bytes(inp.data)
    return data, part, target


class _NullRaw(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        return len(b)


def _discard() -> io.TextIOWrapper:
    """A text sink for stdout/stderr: output is formatted (that is exercised) but not kept, so
    the memory bound measures the commands, not the captured output."""
    return io.TextIOWrapper(io.BufferedWriter(_NullRaw()), encoding="utf-8", write_through=True)


def _cli_commands(kind: str, data: Path, part: Path, target: Path, index: int) -> List[List[str]]:
    commands = [["verify-index", str(part)], ["inspect", "--json", str(data)] if index % 2 else ["inspect", str(data)]]
    if kind in ("log", "index", "timeindex", "txnindex", "snapshot"):
        dump = ["dump-segment", "--deep-iteration", "--print-data-log", str(target)]
        if index % 3 == 0:
            dump.insert(1, "--json")
        commands.append(dump)
    if kind in ("log", "index", "timeindex"):
        segs = sorted(p.name.split(".", 1)[0] for p in part.glob("*.log"))
        base = int(segs[0]) if segs else 0
        if index % 2:
            commands.append(["find", str(part), "--offset", str(base + index % 7)])
        else:
            commands.append(["find", str(part), "--timestamp", str(1_700_000_000_000 + index)])
        commands.append(["rebuild-index", "--dry-run", str(part)])
    return commands


def run_cli(inp: "FuzzInput", workdir: Path, report: "Report", *, check_memory: bool = True) -> None:
    """The read-only commands over a data dir holding the mutated file: exit codes as documented,
    only KstoreErrors (which the entry point turns into one line), no hang, bounded memory."""
    from contextlib import redirect_stderr, redirect_stdout

    from kstore_cli.cli import _register_commands, cli

    _register_commands()
    data, part, target = _cli_layout(inp, workdir)
    for argv in _cli_commands(inp.kind, data, part, target, inp.index):
        report.cli_runs += 1
        start = time.perf_counter()
        try:
            with _DecompressedBytes() as decompressed, redirect_stdout(_discard()), redirect_stderr(_discard()):
                if check_memory:
                    tracemalloc.reset_peak()
                    base = tracemalloc.get_traced_memory()[0]
                with time_limit(TIME_BUDGET_S):
                    try:
                        cli.main(argv, prog_name="kstore", standalone_mode=False)
                        code = 0
                    except KstoreError as exc:
                        code = int(exc.exit_status)
                    except SystemExit as exc:
                        code = exc.code if isinstance(exc.code, int) else 1
                    except BrokenPipeError:
                        code = 0
                if check_memory:
                    peak = tracemalloc.get_traced_memory()[1] - base
                    size = sum(p.stat().st_size for p in part.iterdir())
                    bound = CLI_FIXED_ALLOWANCE + PER_BYTE * (size + decompressed.total)
                    report.max_peak_ratio = max(report.max_peak_ratio, peak / bound)
                    if peak > bound:
                        report.failures.append(Failure(inp, f"{argv[0]}: peak allocation {peak} B > bound {bound} B"))
            if isinstance(code, int) and code not in CLI_EXIT_CODES:
                report.failures.append(Failure(inp, f"{' '.join(argv[:-1])}: exit {code}"))
        except FuzzTimeout as exc:
            report.failures.append(Failure(inp, f"{argv[0]}: hang: {exc}"))
        except Exception as exc:  # noqa: BLE001 - a click.UsageError or anything else is a bug here
            import traceback

            tb = traceback.extract_tb(exc.__traceback__)[-1]
            report.failures.append(Failure(inp, f"{argv[0]}: {type(exc).__name__}: {exc} at {tb.filename}:{tb.lineno}"))
        finally:
            report.max_seconds = max(report.max_seconds, time.perf_counter() - start)


def _warm_up_cli(workdir: Path) -> None:
    """Import and run each command once, so first-use imports are not charged to an input."""
    seed = SEEDS["log"][0]
    inp = FuzzInput("log", seed, seed.read_bytes(), "warm-up", 1)
    run_cli(inp, workdir, Report(), check_memory=False)
    inp = FuzzInput("log", seed, seed.read_bytes(), "warm-up", 2)
    run_cli(inp, workdir, Report(), check_memory=False)


# --------------------------------------------------------------------------- the harness


class FuzzTimeout(BaseException):
    """Raised by the alarm when one input takes longer than the budget (a hang)."""


@contextmanager
def time_limit(seconds: float):
    if not hasattr(signal, "setitimer"):  # pragma: no cover - not on Windows
        yield
        return

    def on_alarm(signum, frame):
        raise FuzzTimeout(f"input took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class _DecompressedBytes:
    """Counts what the codecs genuinely decompress (their output), to charge it to the memory bound."""

    def __init__(self) -> None:
        self.total = 0
        self._orig = Codec.decompress

    def __enter__(self):
        counter = self
        orig = self._orig

        def counting(codec, data, magic):
            out = orig(codec, data, magic)
            counter.total += len(out)
            return out

        Codec.decompress = counting
        return self

    def __exit__(self, *exc):
        Codec.decompress = self._orig


@dataclass
class Failure:
    input: FuzzInput
    problem: str

    def __str__(self) -> str:
        seed = self.input.seed_path
        where = seed.relative_to(CORPUS) if CORPUS in seed.parents else seed.name
        return f"{self.input.kind} #{self.input.index} from {where} ({self.input.what}): {self.problem}"


@dataclass
class Report:
    tried: int = 0
    failures: List[Failure] = field(default_factory=list)
    max_seconds: float = 0.0
    max_peak: int = 0
    max_peak_ratio: float = 0.0
    records: int = 0
    cli_runs: int = 0  # read-only command runs (over every CLI_EVERY-th input)


def run_one(inp: FuzzInput, workdir: Path, report: Report, *, check_memory: bool = True) -> None:
    """Parse one input through every reader of its kind; record any non-KstoreError, hang or memory blow-up."""
    report.tried += 1
    name = {
        "log": "00000000000000000100.log",
        "index": "00000000000000000100.index",
        "timeindex": "00000000000000000100.timeindex",
        "txnindex": "00000000000000000100.txnindex",
        "snapshot": "00000000000000000100.snapshot",
        "checkpoint": inp.seed_path.name,
    }[inp.kind]
    path = workdir / name
    via_file = inp.kind != "log" or inp.index % 8 == 0  # logs: mostly from memory, every 8th mmapped
    if via_file:
        path.write_bytes(inp.data)
    data = inp.data
    start = time.perf_counter()
    try:
        with _DecompressedBytes() as decompressed:
            if check_memory:
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
            with time_limit(TIME_BUDGET_S):
                if inp.kind == "log":
                    report.records += exercise_log(path if via_file else data)
                else:
                    exercise_file(inp.kind, path)
            if check_memory:
                peak = tracemalloc.get_traced_memory()[1] - base
                bound = FIXED_ALLOWANCE + PER_BYTE * (len(data) + decompressed.total)
                report.max_peak = max(report.max_peak, peak)
                report.max_peak_ratio = max(report.max_peak_ratio, peak / bound)
                if peak > bound:
                    report.failures.append(Failure(inp, f"peak allocation {peak} B > bound {bound} B "
                                                        f"(input {len(data)} B, decompressed {decompressed.total} B)"))
    except FuzzTimeout as exc:
        report.failures.append(Failure(inp, f"hang: {exc}"))
    except KstoreError:
        pass  # already fine; readers are exercised inside, this is a constructor's error
    except Exception as exc:  # noqa: BLE001 - the point of the harness: anything else is a bug
        import traceback

        tb = traceback.extract_tb(exc.__traceback__)[-1]
        report.failures.append(Failure(inp, f"{type(exc).__name__}: {exc} at {tb.filename}:{tb.lineno}"))
    finally:
        report.max_seconds = max(report.max_seconds, time.perf_counter() - start)
        if via_file:
            try:
                path.unlink()
            except OSError:
                pass


def fuzz(kind: str, rng_seed: int, n: int, workdir: Path, *, check_memory: bool = True,
         cli_every: int = CLI_EVERY, start: int = 0, progress: Optional[Callable[[int], None]] = None,
         report: Optional[Report] = None) -> Report:
    """n inputs of a kind through every reader, and every cli_every-th also through the read-only
    commands (0: none). start skips the first inputs (a restarted long run); progress(i) is called
    before input i; report, when given, is filled in (e.g. one whose failures list prints as it grows)."""
    report = Report() if report is None else report
    if cli_every:
        _warm_up_cli(workdir)
    started = not tracemalloc.is_tracing()
    if check_memory and started:
        tracemalloc.start()
    try:
        for inp in generate(kind, rng_seed, n):
            if inp.index < start:
                continue
            if progress is not None:
                progress(inp.index)
            run_one(inp, workdir, report, check_memory=check_memory)
            if cli_every and inp.index % cli_every == 0:
                run_cli(inp, workdir, report, check_memory=check_memory)
    finally:
        if check_memory and started:
            tracemalloc.stop()
    return report


# --------------------------------------------------------------------------- the tests (CI-sized)

CI_COUNTS = {"log": 2400, "index": 250, "timeindex": 250, "txnindex": 200, "snapshot": 250, "checkpoint": 400}


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_inputs_raise_only_kstore_errors(kind: str, tmp_path: Path, capsys) -> None:
    n = CI_COUNTS[kind]
    report = fuzz(kind, rng_seed=20240601, n=n, workdir=tmp_path)
    with capsys.disabled():
        print(f"\n[fuzz] {kind} ({BACKEND} decoder): tried {report.tried} inputs ({report.cli_runs} command runs), "
              f"{len(report.failures)} failures, "
              f"slowest {report.max_seconds * 1000:.1f} ms, peak {report.max_peak} B "
              f"({report.max_peak_ratio:.0%} of bound)", end="")
    assert report.tried == n
    assert report.cli_runs >= 2 * (n // CLI_EVERY)
    assert not report.failures, "\n".join(str(f) for f in report.failures[:20])


def test_mutators_reach_the_deep_paths(tmp_path: Path) -> None:
    """The log fuzzing is not all shallow: many inputs still decode records (so damage reaches decoders)."""
    report = fuzz("log", rng_seed=7, n=200, workdir=tmp_path, check_memory=False)
    assert not report.failures
    assert report.records > 1000


def test_harness_catches_a_leaking_exception(tmp_path: Path, monkeypatch) -> None:
    """The harness itself can fail: a reader that leaks struct.error is reported, with the input named."""
    import kstore_cli.record.batch as batch_mod

    def broken(self):
        raise struct.error("unpack requires a buffer of 61 bytes")

    monkeypatch.setattr(batch_mod.RecordBatch, "records", broken)
    report = fuzz("log", rng_seed=1, n=20, workdir=tmp_path, check_memory=False)
    assert report.failures and "error: unpack requires" in str(report.failures[0])


def test_harness_catches_memory_driven_by_a_size_field(tmp_path: Path, monkeypatch) -> None:
    """An allocation sized by a damaged field (here: the batch's size) breaks the bound."""
    import kstore_cli.record.batch as batch_mod

    orig = batch_mod.RecordBatch.records

    def greedy(self):
        scratch = bytearray(min(self.size << 14, 64 << 20))  # what a "preallocate by size" bug does
        del scratch
        return orig(self)

    monkeypatch.setattr(batch_mod.RecordBatch, "records", greedy)
    report = fuzz("log", rng_seed=3, n=30, workdir=tmp_path)
    assert any("peak allocation" in f.problem for f in report.failures)


# --------------------------------------------------------------------------- regressions found by fuzzing


def test_lz4_block_size_id_does_not_size_the_buffer() -> None:
    """A v0 LZ4 wrapper (header checksum not verified, as in Kafka) with its block-size id set to 7
    (4 MiB) used to allocate 4 MiB per block; the buffer is now capped by what the block can expand to."""
    path = CORPUS / "logs" / "legacy-v0-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    e = next(e for e in framing(path, bytes(data)) if e.magic == 0 and e.codec == 3)
    bd = e.pos + 26 + 5  # value of a null-key v0 wrapper, then magic(4) FLG(1) BD(1)
    assert data[bd] == 0x40
    data[bd] = 0x70
    struct.pack_into(">I", data, e.pos + 12, zlib.crc32(bytes(data[e.pos + 16 : e.pos + e.size])))
    (batch,) = [b for b in read_batches(bytes(data)) if b.position == e.pos]
    next(b for b in read_batches(path) if b.position == e.pos).records()  # imports lz4 outside the trace
    tracemalloc.start()
    try:
        records = batch.records()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert records
    assert peak < 256 * e.size + 64 * 1024  # LZ4's 255x ceiling on this block; it was 4 MiB + output


def test_deeply_nested_clean_shutdown_marker_is_a_checkpoint_error(tmp_path: Path) -> None:
    from kstore_cli.errors import CorruptCheckpointError

    marker = tmp_path / ".kafka_cleanshutdown"
    marker.write_text("[" * 100_000)
    with pytest.raises(CorruptCheckpointError):
        read_clean_shutdown(marker)


def test_harness_catches_a_command_that_leaks_or_misreports(tmp_path: Path, monkeypatch) -> None:
    """The CLI stage can fail too: a command leaking a non-kstore exception, or exiting 2/3 on a
    readable file, is reported with the input named."""
    from kstore_cli.operations import verify

    def leaky(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(verify, "verify_partition", leaky)
    report = fuzz("index", rng_seed=5, n=2 * CLI_EVERY, workdir=tmp_path, check_memory=False)
    assert any("verify-index: IndexError" in f.problem for f in report.failures), report.failures
    monkeypatch.undo()

    from kstore_cli.errors import FileUnreadableError
    import kstore_cli.commands.inspect as inspect_mod

    def unreadable(*args, **kwargs):
        raise FileUnreadableError("cannot be read")

    monkeypatch.setattr(inspect_mod, "resolve_partitions", unreadable)
    report = fuzz("snapshot", rng_seed=5, n=CLI_EVERY + 1, workdir=tmp_path, check_memory=False)
    assert any("inspect" in f.problem and "exit 3" in f.problem for f in report.failures), report.failures


def test_the_long_run_script_runs_and_names_what_it_tried() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_long.py"), "30", "--decoder", "default",
                           "--kind", "snapshot", "--kind", "txnindex", "--cli-every", "10"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "default: tried 30 inputs" in proc.stdout and "total: 0 failures" in proc.stdout


def test_find_through_an_index_entry_pointing_outside_the_log_scans_instead(tmp_path: Path) -> None:
    """Found by the long run: a damaged .index entry with a negative position made find hand it to
    the reader (ValueError from the native decoder; the Python one read from the end of the
    buffer). An entry outside the .log now makes the index unusable: the segment is scanned."""
    import shutil

    from click.testing import CliRunner

    from kstore_cli.cli import _register_commands, cli

    _register_commands()
    part = tmp_path / "idempotent-0"
    shutil.copytree(CORPUS / "logs" / "idempotent-0", part)
    index = next(p for p in sorted(part.glob("*.index")) if p.stat().st_size >= 16)
    base = int(index.name.split(".")[0])
    target = base + struct.unpack_from(">i", index.read_bytes(), 0)[0]  # the first entry's offset
    good = CliRunner().invoke(cli, ["find", str(part), "--offset", str(target), "--json"])
    assert good.exit_code == 0, good.output
    for position in (-8355840, -1, 1 << 30):
        raw = bytearray(index.read_bytes())
        struct.pack_into(">i", raw, 4, position)  # the first entry's position
        index.write_bytes(bytes(raw))
        result = CliRunner().invoke(cli, ["find", str(part), "--offset", str(target), "--json"])
        assert result.exception is None and result.exit_code == 0, (position, result.output, result.exception)
        assert result.output.splitlines()[0] == good.output.splitlines()[0]  # the same record
        assert base in json.loads(result.output.splitlines()[-1])["scanned_segments"]
