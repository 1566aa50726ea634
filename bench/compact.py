"""Benchmark of ``kstore compact`` on ``__consumer_offsets``-style data.

Generates a ``__consumer_offsets-0`` partition of N offset commits (default 1M) over 10k keys
(100 groups x 10 topics x 10 partitions) with the real OffsetCommitKey (v1) / OffsetCommitValue
(v3) bytes, uncompressed batches of 50 commits in 64 MiB segments plus an empty active segment;
compacts it with ``kstore compact`` in a child process (again while a pass ends early because the
key map filled the dedupe buffer); checks that exactly the latest commit of
every key remains (same offset, same value), and prints throughput and the child's peak RSS next
to the dedupe buffer.

    python3 bench/compact.py [--records 1000000] [--dedupe-buffer-bytes 134217728] [--workdir DIR]

``run(size_records, workdir) -> dict`` is what bench/run.py calls.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kstore_cli.segment.builder import RecordSpec, build_v2_batch  # noqa: E402
from kstore_cli.segment.names import filename_prefix  # noqa: E402
from kstore_cli.segment.reader import read_batches  # noqa: E402

T0 = 1_700_000_000_000
GROUPS, TOPICS, PARTITIONS = 100, 10, 10  # 10k keys
BATCH = 50
SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_DEDUPE = 128 * 1024 * 1024


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1: version int16, group string, topic string, partition int32."""
    return struct.pack(">h", 1) + _string(group) + _string(topic) + struct.pack(">i", partition)


def offset_commit_value(offset: int, timestamp: int) -> bytes:
    """OffsetCommitValue v3: version, offset int64, leader epoch int32, metadata string, commit timestamp."""
    return struct.pack(">hqi", 3, offset, 7) + _string("") + struct.pack(">q", timestamp)


def generate(part: Path, records: int) -> Dict[bytes, Tuple[int, bytes]]:
    """Write the partition; returns key -> (offset, value) of each key's latest commit."""
    part.mkdir(parents=True)
    keys = [offset_commit_key(f"group-{g}", f"topic-{t}", p)
            for g in range(GROUPS) for t in range(TOPICS) for p in range(PARTITIONS)]
    latest: Dict[bytes, Tuple[int, bytes]] = {}
    offset = 0
    base = 0
    out = open(part / f"{filename_prefix(base)}.log", "wb")
    size = 0
    step = 7919  # a prime: every key is committed in turn, in a shuffled order
    while offset < records:
        specs = []
        for _ in range(min(BATCH, records - offset)):
            key = keys[(offset * step) % len(keys)]
            value = offset_commit_value(offset * 3, T0 + offset)
            specs.append(RecordSpec(offset, T0 + offset, key, value))
            latest[key] = (offset, value)
            offset += 1
        data = build_v2_batch(specs, partition_leader_epoch=0)
        if size and size + len(data) > SEGMENT_BYTES:
            out.close()
            base = specs[0].offset
            out = open(part / f"{filename_prefix(base)}.log", "wb")
            size = 0
        out.write(data)
        size += len(data)
    out.close()
    (part / f"{filename_prefix(offset)}.log").write_bytes(b"")  # the active segment
    return latest


def _child_peak(cmd, env) -> Tuple[int, float, float, str]:
    """Run cmd; (exit status, wall seconds, peak RSS MiB of the child, stdout)."""
    start = time.perf_counter()
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    rss_kib = usage.ru_maxrss  # Linux: KiB
    return proc.returncode, wall, rss_kib / 1024.0, out.read().decode()


def run(size_records: int, workdir, dedupe_buffer_bytes: int = DEFAULT_DEDUPE, max_passes: int = 100) -> dict:
    """Generate, compact in a child, verify; the figures as a dict (for bench/run.py)."""
    work = Path(workdir)
    data = work / "data"
    if data.exists():
        shutil.rmtree(data)
    part = data / "__consumer_offsets-0"
    t0 = time.perf_counter()
    latest = generate(part, size_records)
    gen_s = time.perf_counter() - t0
    bytes_in = sum(p.stat().st_size for p in part.glob("*.log"))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "kstore_cli", "compact", "--json", "--now", str(T0 + size_records + 1),
           "--dedupe-buffer-bytes", str(dedupe_buffer_bytes), str(part)]
    wall = rss_mb = 0.0
    passes = 0
    map_full = True
    while map_full and passes < max_passes:
        # A full map ends a pass early; the next invocation continues from the checkpoint.
        code, seconds, rss, stdout = _child_peak(cmd + ["--force-clean"] if passes else cmd, env)
        if code != 0:
            raise RuntimeError(f"kstore compact exited {code}")
        wall += seconds
        rss_mb = max(rss_mb, rss)
        passes += 1
        map_full = json.loads(stdout)["partitions"][0]["stats"]["mapFull"]
    # Exactly the latest commit per key remains (an independent read of the result).
    seen: Dict[bytes, Tuple[int, bytes]] = {}
    kept = 0
    for log in sorted(part.glob("*.log")):
        for batch in read_batches(str(log)):
            for r in batch.records():
                kept += 1
                if r.key in seen:
                    raise AssertionError(f"key kept twice: offsets {seen[r.key][0]} and {r.offset}")
                seen[r.key] = (r.offset, r.value)
    if seen != latest:
        raise AssertionError("the records kept are not exactly the latest commit of every key")
    bytes_out = sum(p.stat().st_size for p in part.glob("*.log"))
    return {
        "records": size_records,
        "keys": len(latest),
        "records_kept": kept,
        "seconds": wall,
        "records_per_s": size_records / wall,
        "mb_per_s": bytes_in / wall / 1e6,
        "bytes_in": bytes_in,
        "bytes_out": bytes_out,
        "peak_rss_mb": rss_mb,
        "dedupe_buffer_mb": dedupe_buffer_bytes / (1 << 20),
        "generate_seconds": gen_s,
        "passes": passes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dedupe-buffer-bytes", type=int, default=DEFAULT_DEDUPE)
    parser.add_argument("--workdir")
    args = parser.parse_args()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kstore-compact-bench-"))
    try:
        r = run(args.records, work, args.dedupe_buffer_bytes)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"compacted {r['records']:,} offset commits over {r['keys']:,} keys in {r['seconds']:.1f} s: "
          f"{r['records_per_s']:,.0f} records/s, {r['mb_per_s']:.1f} MB/s; "
          f"{r['bytes_in']:,} -> {r['bytes_out']:,} bytes; kept {r['records_kept']:,} (the latest per key)")
    print(f"peak RSS {r['peak_rss_mb']:.0f} MiB with a {r['dedupe_buffer_mb']:g} MiB dedupe buffer"
          f"; {r['passes']} pass(es)")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
