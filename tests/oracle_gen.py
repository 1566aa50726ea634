"""A seeded generator of Kafka partitions for the differential tests against Kafka's own code
(tests/test_oracle_dump.py, tests/test_oracle_mutations.py): what a log can hold, drawn from a
`random.Random` (the JVM cannot be called per hypothesis example, so inputs are drawn up front).

`Gen(rng).partition()` draws segments mixing message formats v0/v1/v2, codecs none/gzip/snappy/lz4/zstd,
1..7-record batches, offset gaps, headers, null keys and values, text that is not UTF-8, idempotent and
transactional producers with commit/abort markers, leader epochs, CreateTime and LogAppendTime, and empty
batches as the cleaner leaves them; `damage_partition` breaks a partition's files on purpose.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from kstore_cli.record.batch import LOG_APPEND_TIME
from kstore_cli.record.builder import RecordSpec, build_control_batch, build_legacy_batch, build_v2_batch
from kstore_cli.log.snapshot import ProducerEntry

T0 = 1_700_000_000_000
NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)



def blob(rng: random.Random, allow_null: bool = True) -> Optional[bytes]:
    kind = rng.random()
    if allow_null and kind < 0.12:
        return None
    if kind < 0.2:
        return b""
    if kind < 0.55:
        return ("k%d-" % rng.randrange(1000)).encode() + b"x" * rng.randrange(0, 40)
    if kind < 0.7:
        return "caf\u00e9 \u65e5\u672c \u2603 %d" % rng.randrange(100)  # type: ignore[return-value]
    if kind < 0.85:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 24)))  # mostly not UTF-8
    return struct.pack(">q", rng.randrange(-2**40, 2**40))


def as_bytes(v) -> Optional[bytes]:
    return v.encode("utf-8") if isinstance(v, str) else v


class Gen:
    """Draws one partition's segments: [(base offset, bytes)], producer entries, next offset."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.offset = rng.choice([0, 0, 0, 17, 1000, 2**33])
        self.ts = T0 + rng.randrange(10**9)
        self.epoch = rng.randrange(0, 5)
        self.producers: Dict[int, ProducerEntry] = {}
        self.open_txn: Dict[int, Tuple[int, int]] = {}  # pid -> (epoch, first offset)

    def records(self, n: int, *, gaps: bool, headers: bool, magic: int) -> List[RecordSpec]:
        rng, out = self.rng, []
        for _ in range(n):
            if gaps and rng.random() < 0.3:
                self.offset += rng.randrange(1, 5)
            self.ts += rng.choice([0, 1, 7, 1000, -3]) if rng.random() < 0.9 else rng.randrange(-10**6, 10**6)
            hs = []
            if headers and rng.random() < 0.4:
                hs = [(rng.choice(["trace", "h\u00e9", "", "k%d" % i]), as_bytes(blob(rng)))
                      for i in range(rng.randrange(1, 4))]
            value = as_bytes(blob(rng))
            key = as_bytes(blob(rng))
            if magic < 2 and value is None and key is None:
                value = b"v"
            out.append(RecordSpec(self.offset, self.ts, key, value, hs))
            self.offset += 1
        return out

    def v2_batch(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.04:  # an empty batch, as the cleaner leaves one to keep a producer's last sequence
            base = self.offset
            self.offset += 1
            return build_v2_batch([], base_offset=base, last_offset_delta=0, producer_id=rng.randrange(1, 50),
                                  producer_epoch=0, base_sequence=rng.randrange(100), max_timestamp=self.ts,
                                  partition_leader_epoch=self.epoch)
        if roll < 0.14 and self.open_txn:  # a transaction marker closes an open transaction
            pid = rng.choice(sorted(self.open_txn))
            pepoch, _first = self.open_txn.pop(pid)
            commit = rng.random() < 0.5
            self.ts += 1
            batch = build_control_batch(self.offset, self.ts, commit=commit, coordinator_epoch=rng.randrange(0, 9),
                                        producer_id=pid, producer_epoch=pepoch, partition_leader_epoch=self.epoch)
            self.offset += 1
            return batch
        if rng.random() < 0.1:
            self.epoch += 1
        codec = rng.choice([NONE, NONE, GZIP, SNAPPY, LZ4, ZSTD])
        kind = rng.random()
        pid = pepoch = seq = -1
        txn = False
        if kind < 0.45:
            pid = rng.randrange(1, 60)
            old = self.producers.get(pid)
            pepoch = old.producer_epoch if old else rng.randrange(0, 4)
            seq = old.last_sequence + 1 if old else 0
            # a producer inside a transaction writes transactionally until its marker (Kafka's producer state
            # rejects anything else when it rebuilds from the log)
            txn = kind < 0.2 or pid in self.open_txn
        n = rng.choice([1, 1, 2, 3, 5, 7])
        recs = self.records(n, gaps=pid < 0 and rng.random() < 0.3, headers=True, magic=2)
        lat = rng.random() < 0.2
        batch = build_v2_batch(
            recs, codec=codec, timestamp_type=LOG_APPEND_TIME if lat else 0,
            log_append_time=self.ts + 5 if lat else None, partition_leader_epoch=self.epoch,
            producer_id=pid, producer_epoch=pepoch, base_sequence=seq, is_transactional=txn,
        )
        if pid >= 0:
            first = recs[0].offset
            if txn and pid not in self.open_txn:
                self.open_txn[pid] = (pepoch, first)
            self.producers[pid] = ProducerEntry(pid, pepoch, seq + n - 1, recs[-1].offset, recs[-1].offset - first,
                                                recs[-1].timestamp, rng.randrange(-1, 5),
                                                self.open_txn.get(pid, (0, -1))[1])
        return batch

    def legacy_batch(self, magic: int) -> bytes:
        rng = self.rng
        codec = rng.choice([NONE, NONE, GZIP, SNAPPY, LZ4])
        recs = self.records(rng.choice([1, 2, 4]), gaps=False, headers=False, magic=magic)
        if magic == 0:
            recs = [RecordSpec(r.offset, -1, r.key, r.value) for r in recs]
        lat = magic == 1 and rng.random() < 0.25
        return build_legacy_batch(recs, magic=magic, codec=codec, timestamp_type=LOG_APPEND_TIME if lat else 0,
                                  log_append_time=self.ts + 3 if lat else None)

    def partition(self) -> Tuple[List[Tuple[int, bytes]], int]:
        rng = self.rng
        style = rng.choice(["v2", "v2", "v2", "v2", "v1", "v0", "mixed"])
        segments = []
        for _s in range(rng.choice([1, 1, 2, 3])):
            base, data = self.offset, bytearray()
            for _b in range(rng.randrange(1, 14)):
                if style == "v2" or (style == "mixed" and rng.random() < 0.5):
                    data += self.v2_batch()
                else:
                    data += self.legacy_batch(0 if style == "v0" else 1)
            segments.append((base, bytes(data)))
        return segments, self.offset


def damage_partition(rng: random.Random, part: Path, kinds: List[str]) -> str:
    """Damage a generated partition in place; returns what was done."""
    logs = sorted(part.glob("*.log"))
    log = rng.choice(logs)
    data = bytearray(log.read_bytes())
    kind = rng.choice(kinds)
    if kind == "truncate" and len(data) > 20:
        cut = rng.randrange(1, len(data) - 1)
        log.write_bytes(bytes(data[:cut]))
        return f"{log.name} cut at {cut}"
    if kind == "flip" and data:
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
        log.write_bytes(bytes(data))
        return f"{log.name} bit flipped at byte {pos}"
    if kind == "size" and len(data) > 12:
        size = rng.choice([0, 5, 13, 2**31 - 1, -7 & 0xFFFFFFFF, len(data)])
        struct.pack_into(">I", data, 8, size)
        log.write_bytes(bytes(data))
        return f"{log.name} first batch size set to {size}"
    idx = sorted(part.glob("*.index")) + sorted(part.glob("*.timeindex"))
    idx = [f for f in idx if f.stat().st_size]
    if kind in ("index-flip", "index-ragged") and idx:
        f = rng.choice(idx)
        raw = bytearray(f.read_bytes())
        if kind == "index-flip":
            pos = rng.randrange(len(raw))
            raw[pos] ^= 0xFF
            f.write_bytes(bytes(raw))
            return f"{f.name} byte {pos} flipped"
        f.write_bytes(bytes(raw[:-rng.randrange(1, 4)]))
        return f"{f.name} ragged end"
    return "none"
