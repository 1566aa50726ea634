"""Generated Kafka data dirs for the Spark tests and bench/spark_export.py.

Segments are written with kstore's batch builder; ``.index``/``.timeindex`` follow Kafka's
append rule (SegmentIndexBuilder.appended, one batch per append), so byte ranges and
offset lookups meet real index entries. Deterministic for a given seed.
"""

from __future__ import annotations

import os
import random
from typing import Dict, List, Optional, Sequence, Tuple

from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.log.index import SegmentIndexBuilder
from kstore_cli.log.names import filename_prefix

CODECS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd


def _write_segment(directory: str, base: int, batches: List[bytes], positions_meta: List[Tuple[int, int, int]],
                   index_interval: int) -> None:
    prefix = os.path.join(directory, filename_prefix(base))
    builder = SegmentIndexBuilder(base, index_interval)
    position = 0
    with open(prefix + ".log", "wb") as f:
        for data, (last_offset, max_ts, offset_of_max) in zip(batches, positions_meta):
            f.write(data)
            builder.appended(position, len(data), last_offset, max_ts, offset_of_max)
            position += len(data)
    builder.finish()
    with open(prefix + ".index", "wb") as f:
        f.write(builder.offset_index_bytes())
    with open(prefix + ".timeindex", "wb") as f:
        f.write(builder.time_index_bytes())


def write_partition(directory: str, records: int, *, seed: int = 0, batch_records: int = 50,
                    segment_bytes: int = 256 * 1024, index_interval: int = 4096, value_size: int = 100,
                    codecs: Sequence[int] = CODECS, headers: bool = True, start_ts: int = 1_700_000_000_000,
                    leader_epoch: int = 3) -> Dict[str, int]:
    """A partition directory of v2 batches; returns counts (records, segments, batches, log bytes)."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed)
    payload = bytes(rng.getrandbits(8) for _ in range(max(value_size, 1) * 4))
    offset = 0
    ts = start_ts
    seg_base = 0
    seg_batches: List[bytes] = []
    seg_meta: List[Tuple[int, int, int]] = []
    seg_size = 0
    stats = {"records": 0, "segments": 0, "batches": 0, "log_bytes": 0}
    while offset < records:
        n = min(batch_records, records - offset)
        specs = []
        for i in range(n):
            ts += rng.randint(0, 3)
            key = None if rng.random() < 0.1 else b"key-%d" % rng.randint(0, 10_000)
            start = rng.randint(0, len(payload) - value_size)
            value = None if rng.random() < 0.02 else payload[start:start + rng.randint(value_size // 2, value_size)]
            hdrs = []
            if headers and rng.random() < 0.3:
                hdrs = [("h%d" % j, None if rng.random() < 0.2 else b"v%d" % j) for j in range(rng.randint(1, 3))]
            # A timestamp that jumps back now and then (CreateTime is not ordered).
            rts = ts - rng.randint(0, 5000) if rng.random() < 0.05 else ts
            specs.append(RecordSpec(offset + i, rts, key, value, hdrs))
        data = build_v2_batch(specs, codec=codecs[(offset // batch_records) % len(codecs)],
                              partition_leader_epoch=leader_epoch)
        max_ts = max(s.timestamp for s in specs)
        offset_of_max = next(s.offset for s in specs if s.timestamp == max_ts)
        if seg_batches and seg_size + len(data) > segment_bytes:
            _write_segment(directory, seg_base, seg_batches, seg_meta, index_interval)
            stats["segments"] += 1
            seg_base, seg_batches, seg_meta, seg_size = offset, [], [], 0
        seg_batches.append(data)
        seg_meta.append((offset + n - 1, max_ts, offset_of_max))
        seg_size += len(data)
        stats["batches"] += 1
        stats["log_bytes"] += len(data)
        offset += n
    if seg_batches:
        _write_segment(directory, seg_base, seg_batches, seg_meta, index_interval)
        stats["segments"] += 1
    stats["records"] = offset
    return stats


def write_data_dir(root: str, topics: Dict[str, Tuple[int, int]], *, seed: int = 0, **kwargs) -> Dict[str, int]:
    """``topics``: name -> (partitions, records per partition). Returns summed counts."""
    total: Dict[str, int] = {}
    for t_i, (topic, (partitions, records)) in enumerate(sorted(topics.items())):
        for p in range(partitions):
            got = write_partition(os.path.join(root, f"{topic}-{p}"), records, seed=seed * 1000 + t_i * 100 + p,
                                  **kwargs)
            for k, v in got.items():
                total[k] = total.get(k, 0) + v
    return total


def main(argv: Optional[List[str]] = None) -> None:  # pragma: no cover - a helper for humans
    import argparse

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root")
    ap.add_argument("--records", type=int, default=10_000)
    args = ap.parse_args(argv)
    print(write_data_dir(args.root, {"gen": (2, args.records // 2)}))


if __name__ == "__main__":  # pragma: no cover
    main()
