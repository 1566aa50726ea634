"""Benchmark of ``kstore compact`` on ``__consumer_offsets``-style data, side by side with Kafka's Cleaner.

Generates a ``__consumer_offsets-0`` partition of N offset commits (default 1M) over 10k keys
(100 groups x 10 topics x 10 partitions) with the real OffsetCommitKey (v1) / OffsetCommitValue
(v3) bytes, batches of 50 commits (uncompressed, or zstd with ``--codec zstd``) in 64 MiB segments
plus an empty active segment; compacts it with ``kstore compact`` in a child process (again while a
pass ends early because the key map filled the dedupe buffer); checks that exactly the latest
commit of every key remains (same offset, same value), and prints throughput and the child's peak
RSS next to the dedupe buffer (target: under the buffer + 64 MB).

When the shared kafka-oracle is there (``$KSTORE_ORACLE``, else ``../shared/kafka-oracle``, and
java), a copy of the same input is cleaned by Kafka's own ``Cleaner.clean`` (``clean-log``, one pass,
the broker's default cleaner settings, the same dedupe buffer and clock) in the same run: the
ratio is kstore's records/s (the whole ``kstore compact`` process) over Kafka's (records /
``clean_ms``, the time inside ``Cleaner.clean`` only), and the ``.log`` files both leave are compared
byte for byte. Python modules are byte-compiled once (a warm-up run) before the timed runs, as an
installed kstore is, even where ``PYTHONDONTWRITEBYTECODE`` is set (the cache then goes to the work dir).

    python3 bench/compact.py [--records 1000000] [--codec none,zstd] [--dedupe-buffer-bytes 134217728]
                             [--workdir DIR] [--no-oracle] [--transactional]

``run(size_records, workdir, codec=...) -> dict`` is what bench/run.py calls.
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
from typing import Dict, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kstore_cli.record.builder import RecordSpec, build_control_batch, build_v2_batch  # noqa: E402
from kstore_cli.log.names import filename_prefix  # noqa: E402
from kstore_cli.record.reader import read_batches  # noqa: E402

T0 = 1_700_000_000_000
GROUPS, TOPICS, PARTITIONS = 100, 10, 10  # 10k keys
BATCH = 50
SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_DEDUPE = 128 * 1024 * 1024
CODECS = {"none": 0, "zstd": 4}
RSS_HEADROOM_MB = 64  # issue 20: peak RSS under the dedupe buffer + 64 MB


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1: version int16, group string, topic string, partition int32."""
    return struct.pack(">h", 1) + _string(group) + _string(topic) + struct.pack(">i", partition)


def offset_commit_value(offset: int, timestamp: int) -> bytes:
    """OffsetCommitValue v3: version, offset int64, leader epoch int32, metadata string, commit timestamp."""
    return struct.pack(">hqi", 3, offset, 7) + _string("") + struct.pack(">q", timestamp)


PRODUCERS = 4  # --transactional: transactional producers taking turns, each batch its own committed transaction


def generate(part: Path, records: int, codec: int = 0, transactional: bool = False) -> Dict[bytes, Tuple[int, bytes]]:
    """Write the partition; returns key -> (offset, value) of each key's latest commit. `transactional`: every
    batch is a transaction of one of PRODUCERS producers, followed by its COMMIT marker (what a consumer
    group's transactional offset commits, or an exactly-once producer, leave)."""
    part.mkdir(parents=True)
    keys = [offset_commit_key(f"group-{g}", f"topic-{t}", p)
            for g in range(GROUPS) for t in range(TOPICS) for p in range(PARTITIONS)]
    latest: Dict[bytes, Tuple[int, bytes]] = {}
    offset = 0
    base = 0
    out = open(part / f"{filename_prefix(base)}.log", "wb")
    size = 0
    step = 7919  # a prime: every key is committed in turn, in a shuffled order
    written = 0
    sequences = [0] * PRODUCERS
    while written < records:
        specs = []
        for _ in range(min(BATCH, records - written)):
            key = keys[(written * step) % len(keys)]
            value = offset_commit_value(written * 3, T0 + written)
            specs.append(RecordSpec(offset, T0 + written, key, value))
            latest[key] = (offset, value)
            offset += 1
            written += 1
        if transactional:
            pid = (written // BATCH) % PRODUCERS
            data = build_v2_batch(specs, partition_leader_epoch=0, codec=codec, producer_id=1000 + pid,
                                  producer_epoch=0, base_sequence=sequences[pid], is_transactional=True)
            sequences[pid] += len(specs)
            data += build_control_batch(offset, T0 + written, commit=True, coordinator_epoch=0,
                                        producer_id=1000 + pid, producer_epoch=0, partition_leader_epoch=0)
            offset += 1
        else:
            data = build_v2_batch(specs, partition_leader_epoch=0, codec=codec)
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


def oracle_dir() -> Optional[Path]:
    """The shared kafka-oracle (as tests/oracle.py finds it), or None without it or without java."""
    path = Path(os.environ.get("KSTORE_ORACLE", ROOT.parent / "shared" / "kafka-oracle"))
    if not (path / "clean-log").exists() or shutil.which("java") is None:
        return None
    return path


def kafka_clean(part: Path, now: int, dedupe_buffer_bytes: int) -> dict:
    """One pass of Kafka's Cleaner.clean over `part` (modified in place): clean_ms and the summary."""
    oracle = oracle_dir()
    if oracle is None:
        return {"error": "kafka-oracle not found ($KSTORE_ORACLE or ../shared/kafka-oracle, and java)"}
    cmd = [str(oracle / "clean-log"), str(part), "--now", str(now), "--dedupe-buffer-bytes", str(dedupe_buffer_bytes),
           "--no-records"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = next((json.loads(line) for line in proc.stdout.splitlines() if '"clean_summary"' in line), None)
    if proc.returncode != 0 or summary is None or not summary.get("ok"):
        return {"error": f"clean-log exited {proc.returncode}: {(proc.stderr or proc.stdout)[-400:]}"}
    return {"clean_ms": summary["clean_ms"], "wall_seconds": wall, "summary": summary}


def _child_env(work: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if env.pop("PYTHONDONTWRITEBYTECODE", None):
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # bytecode as an install has it, outside the tree
    return env


def _compact(part: Path, size_records: int, dedupe_buffer_bytes: int, max_passes: int, env: dict) -> dict:
    """kstore compact in a child until a pass does not end early: wall seconds, peak RSS, passes."""
    cmd = [sys.executable, "-m", "kstore_cli", "compact", "--json", "--now", str(T0 + size_records + 1),
           "--dedupe-buffer-bytes", str(dedupe_buffer_bytes), str(part)]
    subprocess.run([sys.executable, "-m", "kstore_cli", "compact", "--help"], env=env, capture_output=True)  # warm-up
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
        lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
        map_full = any(r.get("type") == "partition" and r["stats"]["map_full"] for r in lines)
    return {"seconds": wall, "peak_rss_mb": rss_mb, "passes": passes}


def _verify(part: Path, latest: Dict[bytes, Tuple[int, bytes]]) -> int:
    """Exactly the latest commit per key remains (an independent read of the result): records kept."""
    seen: Dict[bytes, Tuple[int, bytes]] = {}
    kept = 0
    for log in sorted(part.glob("*.log")):
        for batch in read_batches(str(log)):
            if batch.is_control:
                continue
            for r in batch.records():
                kept += 1
                if r.key in seen:
                    raise AssertionError(f"key kept twice: offsets {seen[r.key][0]} and {r.offset}")
                seen[r.key] = (r.offset, r.value)
    if seen != latest:
        raise AssertionError("the records kept are not exactly the latest commit of every key")
    return kept


def _same_logs(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.glob("*.log"))
    return names == sorted(p.name for p in b.glob("*.log")) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names)


def run(size_records: int, workdir, dedupe_buffer_bytes: int = DEFAULT_DEDUPE, max_passes: int = 100,
        codec: str = "none", oracle: bool = True, transactional: bool = False) -> dict:
    """Generate, compact in a child, verify, and clean a copy with Kafka's Cleaner; the figures as a
    dict (for bench/run.py)."""
    work = Path(workdir)
    for sub in ("data", "kafka"):
        if (work / sub).exists():
            shutil.rmtree(work / sub)
    part = work / "data" / "__consumer_offsets-0"
    t0 = time.perf_counter()
    latest = generate(part, size_records, CODECS[codec], transactional)
    gen_s = time.perf_counter() - t0
    bytes_in = sum(p.stat().st_size for p in part.glob("*.log"))
    kafka_part = work / "kafka" / part.name
    if oracle:
        shutil.copytree(part, kafka_part)
    k = _compact(part, size_records, dedupe_buffer_bytes, max_passes, _child_env(work))
    kept = _verify(part, latest)
    result = {
        "records": size_records, "codec": codec, "transactional": transactional, "keys": len(latest), "records_kept": kept,
        "seconds": k["seconds"], "records_per_s": size_records / k["seconds"],
        "mb_per_s": bytes_in / k["seconds"] / 1e6, "bytes_in": bytes_in,
        "bytes_out": sum(p.stat().st_size for p in part.glob("*.log")), "peak_rss_mb": k["peak_rss_mb"],
        "dedupe_buffer_mb": dedupe_buffer_bytes / (1 << 20),
        "rss_target_mb": dedupe_buffer_bytes / (1 << 20) + RSS_HEADROOM_MB, "generate_seconds": gen_s,
        "passes": k["passes"],
    }
    result["rss_within_target"] = result["peak_rss_mb"] < result["rss_target_mb"]
    if oracle:
        kafka = kafka_clean(kafka_part, T0 + size_records + 1, dedupe_buffer_bytes)
        if "error" in kafka:
            result["kafka_error"] = kafka["error"]
        else:
            kafka_rate = size_records / (kafka["clean_ms"] / 1000.0)
            result.update(kafka_clean_ms=kafka["clean_ms"], kafka_wall_seconds=kafka["wall_seconds"],
                          kafka_records_per_s=kafka_rate, ratio_vs_kafka=result["records_per_s"] / kafka_rate,
                          identical_to_kafka=k["passes"] == 1 and _same_logs(part, kafka_part))
        shutil.rmtree(work / "kafka", ignore_errors=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--codec", default="none,zstd", help="comma-separated: none, zstd")
    parser.add_argument("--dedupe-buffer-bytes", type=int, default=DEFAULT_DEDUPE)
    parser.add_argument("--workdir")
    parser.add_argument("--no-oracle", action="store_true", help="do not run Kafka's Cleaner beside it")
    parser.add_argument("--transactional", action="store_true",
                        help="every batch a committed transaction (4 producers) followed by its COMMIT marker")
    args = parser.parse_args()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kstore-compact-bench-"))
    try:
        for codec in args.codec.split(","):
            r = run(args.records, work, args.dedupe_buffer_bytes, codec=codec, oracle=not args.no_oracle,
                    transactional=args.transactional)
            print(f"[{codec}] compacted {r['records']:,} offset commits over {r['keys']:,} keys in "
                  f"{r['seconds']:.2f} s: {r['records_per_s']:,.0f} records/s, {r['mb_per_s']:.1f} MB/s; "
                  f"{r['bytes_in']:,} -> {r['bytes_out']:,} bytes; kept {r['records_kept']:,} (the latest per key)")
            print(f"[{codec}] peak RSS {r['peak_rss_mb']:.0f} MiB with a {r['dedupe_buffer_mb']:g} MiB dedupe buffer "
                  f"(target < {r['rss_target_mb']:g}); {r['passes']} pass(es)")
            if "kafka_clean_ms" in r:
                print(f"[{codec}] Kafka's Cleaner.clean: {r['kafka_clean_ms']:.0f} ms in-process = "
                      f"{r['kafka_records_per_s']:,.0f} records/s; kstore (whole process) / Kafka = "
                      f"{r['ratio_vs_kafka']:.2f}x; same .log bytes: {r['identical_to_kafka']}")
            elif "kafka_error" in r:
                print(f"[{codec}] Kafka's Cleaner: not run ({r['kafka_error']})")
            print(json.dumps(r))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
