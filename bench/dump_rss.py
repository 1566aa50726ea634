"""Peak memory and throughput of a deep dump of a large segment (benchmark, not a test).

Generates a v2 segment (default 1 GiB) of mixed ~100 B and ~1 KiB values, one batch in five
compressed (gzip, snappy, lz4, zstd), then runs, each as its own child process:

1. ``python -m kstore_cli dump-segment --deep-iteration --print-data-log FILE > /dev/null``
2. the core alone: ``for b in read_batches(f): for r in b.records(): r.key; r.value``

and reports each child's peak RSS (``os.wait4`` rusage, so the generator in this process is not
counted), wall time, lines/s (records/s for the core) and MB/s of segment. Target: peak RSS < 150 MB.

    python bench/dump_rss.py                      # 1 GiB in a temp dir, deleted afterwards
    python bench/dump_rss.py --size-mb 64 --json out.json
    python bench/dump_rss.py --path /data/seg.log --keep

Batches are built directly with struct + CRC-32C from a pool of templates: a copy only gets a new
base offset and leader epoch, which the CRC does not cover, so generating 1 GiB takes seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crc32c import crc32c  # noqa: E402

from kstore_cli.codecs import get_codec  # noqa: E402

V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte DefaultRecordBatch header (layout reference)
CRC_START = 21
TS = 1_700_000_000_000
WORDS = [b"order", b"customer", b"kafka", b"segment", b"payload", b"value", b"42", b"EUR", b"shipped", b"\x00\x01"]


def _varint(value: int) -> bytes:
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _value(rng: random.Random) -> bytes:
    """~100 B (4 in 5) or ~1 KiB, half random bytes and half word soup, so compression does something."""
    n = rng.randint(80, 120) if rng.random() < 0.8 else rng.randint(900, 1150)
    if rng.random() < 0.5:
        return rng.randbytes(n)
    out = bytearray()
    while len(out) < n:
        out += rng.choice(WORDS) + b" "
    return bytes(out[:n])


def _record(offset_delta: int, ts_delta: int, key: bytes, value: bytes, headers: List[Tuple[bytes, bytes]]) -> bytes:
    body = bytearray(b"\x00")
    body += _varint(ts_delta) + _varint(offset_delta)
    body += _varint(len(key)) + key + _varint(len(value)) + value
    body += _varint(len(headers))
    for k, v in headers:
        body += _varint(len(k)) + k + _varint(len(v)) + v
    return _varint(len(body)) + bytes(body)


def template_batch(rng: random.Random, codec: int, n_records: int) -> Tuple[bytes, int]:
    """A complete batch at base offset 0 and its record count."""
    records = b"".join(
        _record(i, i * 3, b"key-%d" % rng.randrange(10_000), _value(rng), [(b"source", b"bench")] if i % 7 == 0 else [])
        for i in range(n_records)
    )
    payload = get_codec(codec).compress(records, 2) if codec else records
    after_crc = struct.pack(">hiqqqhii", codec, n_records - 1, TS, TS + 3 * (n_records - 1), -1, -1, -1, n_records)
    after_crc += payload
    head = struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), 0, 2)
    return head + struct.pack(">I", crc32c(after_crc)) + after_crc, n_records


def generate(path: Path, size_bytes: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    templates = []
    for i in range(60):
        codec = [1, 2, 3, 4][i % 4] if i % 5 == 0 else 0  # one batch in five compressed
        templates.append(template_batch(rng, codec, rng.choice([8, 16, 32, 64])))
    batches = records = written = 0
    offset = 0
    with open(path, "wb", buffering=8 << 20) as f:
        while written < size_bytes:
            data, n = templates[batches % len(templates)]
            buf = bytearray(data)
            struct.pack_into(">q", buf, 0, offset)  # base offset: not covered by the CRC
            struct.pack_into(">i", buf, 12, batches // 1000)  # leader epoch: not covered either
            f.write(buf)
            written += len(buf)
            offset += n
            records += n
            batches += 1
    return {"bytes": written, "batches": batches, "records": records}


def run_child(cmd: List[str], stdout) -> dict:
    """Run one child; its own peak RSS from wait4, wall time, exit status and stderr tail."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, cwd=str(ROOT),
                            env={**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    lines = None  # raw newline bytes in stdout, when it is piped here
    if stdout == subprocess.PIPE:
        lines = 0
        while True:
            chunk = proc.stdout.read(1 << 20)
            if not chunk:
                break
            lines += chunk.count(b"\n")
    stderr = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux reports KiB
        "exit": proc.returncode,
        "stderr_tail": stderr.decode("utf-8", "replace")[-500:],
        "newlines_counted": lines,
    }


CORE_SCRIPT = """
import sys
from kstore_cli.segment import read_batches
n = 0
for b in read_batches(sys.argv[1]):
    for r in b.records():
        r.key; r.value
        n += 1
print(n)
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="segment size in MiB (default 1024)")
    parser.add_argument("--path", type=Path,
                        help="a directory, or a segment-named file, to write to (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated segment")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--count-lines", action="store_true",
                        help="pipe the dump into this process and count its newlines instead of > /dev/null")
    parser.add_argument("--skip-dump", action="store_true", help="measure the core only")
    args = parser.parse_args(argv)

    tmpdir = None
    if args.path is None:
        tmpdir = tempfile.mkdtemp(prefix="kstore-bench-")
        path = Path(tmpdir) / "00000000000000000000.log"
    elif args.path.is_dir():
        path = args.path / "00000000000000000000.log"
    else:
        path = args.path
        if not path.name.split(".")[0].isdigit():
            parser.error("--path must be a directory or a file named like a segment (00000000000000000000.log)")
    result = {"size_mb": args.size_mb, "path": str(path), "python": sys.version.split()[0]}
    try:
        t0 = time.perf_counter()
        seg = generate(path, args.size_mb * 1024 * 1024)
        result["segment"] = {**seg, "generate_seconds": round(time.perf_counter() - t0, 1)}
        mb = seg["bytes"] / 1e6
        print(f"segment: {seg['bytes']} B, {seg['batches']} batches, {seg['records']} records "
              f"(generated in {result['segment']['generate_seconds']} s) at {path}", flush=True)

        if not args.skip_dump:
            cmd = [sys.executable, "-m", "kstore_cli", "dump-segment", "--deep-iteration", "--print-data-log", str(path)]
            if args.count_lines:
                dump = run_child(cmd, subprocess.PIPE)
            else:
                with open(os.devnull, "wb") as devnull:
                    dump = run_child(cmd, devnull)
            # Logical lines: "Dumping <file>", "Log starting offset: <n>", one per batch, one per record.
            # (--count-lines also reports raw newlines, which include 0x0a bytes inside printed values.)
            lines = 2 + seg["batches"] + seg["records"]
            dump.update(lines=lines, lines_per_s=round(lines / dump["seconds"]), mb_per_s=round(mb / dump["seconds"], 1))
            result["dump"] = dump
            print(f"dump-segment: exit {dump['exit']}, {dump['seconds']} s, peak RSS {dump['peak_rss_mb']} MB, "
                  f"{dump['lines_per_s']} lines/s, {dump['mb_per_s']} MB/s", flush=True)
            if dump["exit"] != 0:
                print(f"  stderr: {dump['stderr_tail']}", flush=True)

        core = run_child([sys.executable, "-c", CORE_SCRIPT, str(path)], subprocess.PIPE)
        core.update(records_per_s=round(seg["records"] / core["seconds"]), mb_per_s=round(mb / core["seconds"], 1))
        result["core"] = core
        print(f"core read_batches/records: exit {core['exit']}, {core['seconds']} s, peak RSS {core['peak_rss_mb']} MB, "
              f"{core['records_per_s']} records/s, {core['mb_per_s']} MB/s", flush=True)
        target_ok = all(result[k]["peak_rss_mb"] < 150 for k in ("dump", "core") if k in result)
        result["target_peak_rss_below_150mb"] = target_ok
        print("target peak RSS < 150 MB:", "met" if target_ok else "NOT met")
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return 0 if all(result[k]["exit"] == 0 for k in ("dump", "core") if k in result) else 1
    finally:
        if not args.keep:
            try:
                path.unlink()
            except OSError:
                pass
            if tmpdir:
                os.rmdir(tmpdir)


if __name__ == "__main__":
    sys.exit(main())
