"""Broker scale: doctor, verify-index and inspect on a data dir of many small partitions, side by side with
Kafka's own startup load of the same dir (LogManager.loadLogs, bench/kafka_startup/LoadDataDir.scala) and a
bare read of every file.

    python bench/scale.py [--partitions 10000] [--segments 3] [--large-mib 512] [--repeat 1]

Input: one partition of SEGMENTS segments (~10 KiB each: 200 records of ~40 B) written by Kafka's own
append path (the oracle's append-log, with partition.metadata, its snapshots and checkpoints; kstore's writer
when the oracle is absent), copied to PARTITIONS partitions of PARTITIONS/100 topics, each topic with its
own topic id; meta.properties (KRaft, v1) and a clean-shutdown marker as a broker leaves them.

Figures (wall time of one run, page cache warm, the interpreter's start-up subtracted):
- per command and --jobs 1/2: seconds, fixed cost per partition per core (ms; wall x jobs / partitions), the
  speed-up of --jobs 2, peak RSS, and the ratio to a bare read (`cat` of every file);
- each command's peak RSS at PARTITIONS/10 and PARTITIONS, and the bytes each partition more adds (flat: under
  100 B a partition, 1 MiB at 10,000, where the data dir's checkpoints alone hold 24 B an entry);
- doctor --quick beside Kafka's LoadDataDir (clean load, num.recovery.threads.per.data.dir = cores, timed
  inside the JVM, JVM start excluded);
- the full doctor's CRC scan in GB/s per core on 4 partitions of LARGE_MIB each (--large-mib 0 skips it).

Options a kstore build does not have (e.g. --jobs, --quick) are reported as "n/a".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

from harness import find_kafka_oracle, kafka_env, kstore_cmd, run_child  # noqa: E402
from inputs import Kind, write_partition  # noqa: E402

CLUSTER_ID = "c2NhbGUtYmVuY2gtY2x1c3Rlcg"
SMALL = Kind(2, "none", 40, 16)
LARGE = Kind(2, "none", 100, 128)


def _template(work: Path, segments: int, oracle: Optional[Path]) -> Path:
    """One partition dir of `segments` segments, Kafka-written where the oracle is present."""
    tmpl = work / "template" / "t-0"
    tmpl.parent.mkdir(parents=True)
    if oracle is not None:
        spec = "".join(json.dumps({"op": "leader", "leaderEpoch": 0, "records": [
            {"timestamp": 1_700_000_000_000 + i, "key": f"k{i % 50}", "value": "v" * 30} for i in range(50)]}) + "\n"
            for _ in range(4 * segments))
        done = subprocess.run([str(oracle / "append-log"), str(tmpl), "--config", "segment.bytes=10240",
                               "--clock", "1700000000000", "--topic-id", "AAAAAAAAAAAAAAAAAAAAAQ"],
                              input=spec, capture_output=True, text=True, env=kafka_env())
        if done.returncode == 0:
            return tmpl
        print(f"append-log failed ({done.stderr.strip()[-300:]}); kstore's writer instead")
        shutil.rmtree(tmpl, ignore_errors=True)
    write_partition(str(tmpl), SMALL, total_records=200 * segments, segment_bytes=10240)
    return tmpl


def _topic_id(n: int) -> str:
    import base64
    import uuid

    return base64.urlsafe_b64encode(uuid.UUID(int=(n + 1) << 64 | 0xBEEF).bytes).decode().rstrip("=")


def build_data_dir(dst: Path, tmpl: Path, partitions: int) -> None:
    """PARTITIONS copies of the template, 100 partitions a topic, checkpoints and meta.properties as a broker's."""
    dst.mkdir(parents=True)
    (dst / "meta.properties").write_text(f"version=1\nnode.id=1\ncluster.id={CLUSTER_ID}\n"
                                         f"directory.id=c2NhbGUtYmVuY2gtZGlyLTE\n")
    leo = _log_end_offset(tmpl)
    entries = []
    for i in range(partitions):
        topic, p = f"topic{i // 100:04d}", i % 100
        d = dst / f"{topic}-{p}"
        shutil.copytree(tmpl, d)
        (d / "partition.metadata").write_text(f"version: 0\ntopic_id: {_topic_id(i // 100)}\n")
        entries.append(f"{topic} {p} {leo}")
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (dst / name).write_text("0\n%d\n%s\n" % (len(entries), "\n".join(entries)))
    (dst / "log-start-offset-checkpoint").write_text("0\n0\n")
    (dst / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":-1}')


def _log_end_offset(partition: Path) -> int:
    from kstore_cli.log.log_segment import read_next_offset
    from kstore_cli.log.logdir import Partition

    last = Partition(str(partition)).segments[-1]
    return read_next_offset(last.log, last.base_offset)


def _supports(command: str, option: str) -> bool:
    done = subprocess.run(kstore_cmd(command, "--help"), capture_output=True, text=True, cwd=ROOT)
    return option in done.stdout


def _kstore(args: List[str], startup: float) -> Dict[str, float]:
    res = run_child(kstore_cmd(*args), dict(os.environ), stdout_to_devnull=True, cwd=str(ROOT))
    if res.exit not in (0, 1):
        raise SystemExit(f"kstore {' '.join(args)}: exit {res.exit}: {res.stderr[-800:]}")
    return {"s": max(res.wall - startup, 1e-9), "rss_mb": res.rss_mb}


def _bare_read(path: Path) -> float:
    t = time.perf_counter()
    subprocess.run(f"find {path} -type f -exec cat {{}} + > /dev/null", shell=True, check=True)
    return time.perf_counter() - t


def _kafka_load(oracle: Path, data_dir: Path, work: Path) -> Optional[dict]:
    """LoadDataDir (compiled once with the Scala compiler pyspark ships) on a copy of the dir."""
    env = kafka_env()
    out = work / "kafka-classes"
    cp = subprocess.run(["bash", "-c", f'source {oracle}/oracle-env.sh && echo "$ORACLE_CP" && '
                        f'echo "$(oracle_jar "$PJ" scala-compiler):$J_SCALA_LIBRARY:$(oracle_jar "$PJ" scala-reflect)"'],
                        capture_output=True, text=True, env=env)
    if cp.returncode != 0:
        print(f"Kafka: not measured ({cp.stderr.strip()})")
        return None
    oracle_cp, scalac_cp = cp.stdout.split()
    if not out.exists():
        out.mkdir()
        subprocess.run(["java", "-Xss8m", "-Xmx1g", "-cp", scalac_cp, "scala.tools.nsc.Main", "-nowarn",
                        "-release", "17", "-d", str(out), "-cp", oracle_cp,
                        str(BENCH / "kafka_startup" / "LoadDataDir.scala")], check=True)
    copy = work / "kafka-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(data_dir, copy)
    done = subprocess.run(["java", "-Xmx1G", "-Xms1G", "-XX:+UseG1GC",
                           "-Dlog4j2.configurationFile=classpath:tools-log4j2.properties", "-cp", f"{out}:{oracle_cp}",
                           "kstore.bench.LoadDataDir", str(copy), "--threads", str(os.cpu_count() or 1)],
                          capture_output=True, text=True, env=env)
    shutil.rmtree(copy, ignore_errors=True)
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    print(f"Kafka: LoadDataDir failed: {done.stderr[-600:]}")
    return None


def _commands(data_dir: Path, partitions: int, startup: float, bare: float) -> Dict[str, dict]:
    results = {}
    for command in ("doctor", "verify-index", "inspect"):
        jobs = [1, 2] if _supports(command, "--jobs") else [None]
        for j in jobs:
            args = [command, str(data_dir)] + (["--jobs", str(j)] if j else [])
            r = _kstore(args, startup)
            cores = j or 1
            r["fixed_ms_per_partition_core"] = r["s"] * cores * 1000 / partitions
            r["x_bare_read"] = r["s"] / bare
            results[f"{command} --jobs {j}" if j else command] = r
            print(f"{' '.join(args[:1] + args[2:]):<24} {r['s']:7.2f} s  {r['fixed_ms_per_partition_core']:5.2f} ms/"
                  f"partition/core  {r['x_bare_read']:5.1f}x bare read  peak RSS {r['rss_mb']:.0f} MiB")
        if len(jobs) == 2:
            speedup = results[f"{command} --jobs 1"]["s"] / results[f"{command} --jobs 2"]["s"]
            print(f"{command}: --jobs 2 = {speedup:.2f}x --jobs 1")
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partitions", type=int, default=10000)
    p.add_argument("--segments", type=int, default=3)
    p.add_argument("--large-mib", type=int, default=512)
    p.add_argument("--kafka-oracle", default=None)
    args = p.parse_args()
    oracle = find_kafka_oracle(args.kafka_oracle)
    work = Path(tempfile.mkdtemp(prefix="kstore-scale-bench-"))
    try:
        tmpl = _template(work, args.segments, oracle)
        small, big = work / "small", work / "dd"
        build_data_dir(small, tmpl, max(args.partitions // 10, 1))
        build_data_dir(big, tmpl, args.partitions)
        files = sum(len(fs) for _, _, fs in os.walk(big))
        bare = min(_bare_read(big) for _ in range(2))
        startup = _startup()
        print(f"input: {args.partitions} partitions x {args.segments} segments, {files} files; cpus {os.cpu_count()}; "
              f"bare read {bare:.2f} s; kstore start-up {startup * 1000:.0f} ms (subtracted)")
        results = _commands(big, args.partitions, startup, bare)
        _rss_growth(small, big, args.partitions, startup)
        quick = _kstore(["doctor", "--quick", str(big)], startup) if _supports("doctor", "--quick") else None
        kafka = _kafka_load(oracle, big, work) if oracle is not None else None
        if kafka is not None:
            line = f"Kafka LogManager load ({kafka['threads']} threads, clean): {kafka['load_ms'] / 1000:.2f} s"
            if quick is not None:
                line += f"; doctor --quick {quick['s']:.2f} s = {quick['s'] * 1000 / kafka['load_ms']:.2f}x Kafka's"
            print(line)
        elif quick is not None:
            print(f"doctor --quick: {quick['s']:.2f} s (Kafka: not measured)")
        if args.large_mib:
            _crc_scan(work, args.large_mib, startup)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rss_growth(small: Path, big: Path, partitions: int, startup: float) -> None:
    """Each command's peak RSS at PARTITIONS/10 and PARTITIONS (the best of 2 runs each: RSS varies by a few
    hundred KiB from run to run), and what each partition more adds. --jobs 1: one process's own growth; the
    default --jobs as an operator runs it."""
    added = partitions - max(partitions // 10, 1)
    for command in ("doctor", "verify-index", "inspect"):
        for jobs in (["--jobs", "1"], []):
            rss = [min(_kstore([command, str(d), *jobs], startup)["rss_mb"] for _ in range(2)) for d in (small, big)]
            print(f"{' '.join([command, *jobs]):<22} peak RSS {rss[0]:6.1f} MiB at {partitions // 10} partitions, "
                  f"{rss[1]:6.1f} MiB at {partitions}: {rss[1] - rss[0]:+.1f} MiB, "
                  f"{(rss[1] - rss[0]) * 2**20 / added:+.0f} B a partition")


def _startup() -> float:
    best = None
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run(kstore_cmd("--version"), capture_output=True, cwd=ROOT, check=True)
        d = time.perf_counter() - t
        best = d if best is None else min(best, d)
    return best or 0.0


def _crc_scan(work: Path, mib: int, startup: float) -> None:
    """doctor's full CRC scan on 4 large partitions, GB/s per core (jobs 1)."""
    large = work / "large"
    large.mkdir()
    (large / "meta.properties").write_text(f"version=1\nnode.id=1\ncluster.id={CLUSTER_ID}\n")
    total = 0
    for n in range(4):
        total += write_partition(str(large / f"big-{n}"), LARGE, total_bytes=mib << 20, segment_bytes=256 << 20,
                                 seed=n + 1)["bytes"]
    subprocess.run(f"find {large} -type f -exec cat {{}} + > /dev/null", shell=True, check=True)
    r = _kstore(["doctor", str(large)], startup)
    print(f"doctor CRC scan: {total / 1e9:.2f} GB in {r['s']:.2f} s = {total / r['s'] / 1e9:.2f} GB/s per core")


if __name__ == "__main__":
    raise SystemExit(main())
