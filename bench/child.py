"""The measuring side of bench/run.py: one task per process, its result as the last stdout line.

    python bench/child.py decode kstore|kstore-columns|kafka-python|aiokafka FILE
    python bench/child.py scan FILE
    python bench/child.py crc FILE
    python bench/child.py spark MASTER DATA_DIR OUT_DIR [spark|arrow]
    python bench/child.py spark-core DATA_DIR OUT_FILE
    python bench/child.py compact RECORDS WORKDIR [CODEC [transactional]]
    python bench/child.py convert-codec SOURCE_DIR WORKDIR

Each runs in a fresh interpreter started by run.py, so the record decoder is chosen by that
process's KSTORE_DECODER (the backend is picked at import) and its peak RSS is its own. Timing
is done here, around the work only (interpreter start and imports excluded); the result line is
``BENCH-RESULT {json}``. kstore comes from whatever ``import kstore_cli`` finds (run.py sets
PYTHONPATH when it benchmarks a source tree).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Dict, Optional, Tuple

from harness import RESULT_PREFIX  # noqa: E402 - this script's directory is sys.path[0]


def best_of(fn: Callable[[], object], max_runs: int = 3, budget_s: float = 3.0,
            clock: Callable[[], float] = time.perf_counter) -> Tuple[float, int, object]:
    """Run fn up to max_runs times (stopping once budget_s of wall time is spent); best time by `clock`,
    runs, last result."""
    best = None
    runs = 0
    spent = 0.0
    result = None
    while runs < max_runs and (runs == 0 or spent < budget_s):
        w = time.perf_counter()
        t = clock()
        result = fn()
        dt = clock() - t
        spent += time.perf_counter() - w
        runs += 1
        best = dt if best is None else min(best, dt)
    return best, runs, result


def kstore_backend() -> str:
    try:
        from kstore_cli.record import decode
    except ImportError:
        return "unknown"
    return getattr(decode, "BACKEND", "unknown")


# ----------------------------------------------------------------------------- full record decoding
# Every implementation touches the same fields of every record: offset, timestamp, key, value and
# headers (keys and values materialised by the library's own accessors). The first pass also
# computes a digest (count, sum of offsets, key+value bytes, headers, sum of timestamps) that
# run.py compares across implementations and with the generator; the timed passes do no arithmetic
# beyond the attribute reads, so the loop overhead is the same for everyone.

def _digest_records(it) -> list:
    n = off = kv = hs = ts = 0
    for r in it:
        n += 1
        off += r.offset
        ts += r.timestamp
        k = r.key
        v = r.value
        kv += (len(k) if k is not None else 0) + (len(v) if v is not None else 0)
        hs += len(r.headers)
    return [n, off, kv, hs, ts]


def _decode_kstore(path: str):
    """The object API, iterating each batch (``for r in batch``, the peers' loop: a plain batch's records are
    built one at a time); ``batch.records()`` (all of a batch's records in a list) is timed too, as
    ``records_list_seconds``."""
    from kstore_cli.record.reader import read_batches

    def records():
        for b in read_batches(path):
            yield from b.records()

    def timed():
        for b in read_batches(path):
            for r in b:
                r.offset
                r.timestamp
                r.key
                r.value
                r.headers

    def timed_list():
        for b in read_batches(path):
            for r in b.records():
                r.offset
                r.timestamp
                r.key
                r.value
                r.headers

    digest = _digest_records(records())
    if _digest_records(r for b in read_batches(path) for r in b) != digest:
        raise SystemExit("iter(batch) and batch.records() disagree")
    list_seconds, _runs, _ = best_of(timed_list, max_runs=5, budget_s=5.0, clock=time.process_time)
    return digest, timed, {"backend": kstore_backend(), "api": "object", "records_list_seconds": list_seconds}


def _decode_kstore_columns(path: str):
    """The columnar API, the way spark-export reads: ``read_columns`` decodes runs of plain v2 batches
    (offsets, timestamps, keys, values and headers as Arrow-ready buffers, no Python object per
    record or batch); other batches (compressed) come as batch objects and go through
    ``RecordBatch.columns`` (no headers there, so the digest's header count is None for them)."""
    from array import array

    from kstore_cli.record.columns import RecordColumns, read_columns

    def digest():
        n = off = kv = ts = 0
        hs: "int | None" = 0
        for item in read_columns(path, with_headers=True):
            if isinstance(item, RecordColumns):
                n += item.rows
                off += sum(array("q", item.offsets))
                ts += sum(array("q", item.timestamps))
                kv += len(item.key_data) + len(item.value_data)
                if hs is not None:
                    hs += array("i", item.header_ends)[-1]
            else:
                cols = item.columns()
                n += cols[0]
                off += sum(array("q", cols[1]))
                ts += sum(array("q", cols[2]))
                kv += len(cols[4]) + len(cols[7])
                hs = None
        return [n, off, kv, hs, ts]

    def timed():
        for item in read_columns(path, with_headers=True):
            if not isinstance(item, RecordColumns):
                item.columns()

    return digest(), timed, {"backend": kstore_backend(), "api": "columnar"}


def _peer(memory_records_cls, data: bytes):
    def records():
        mr = memory_records_cls(data)
        while True:
            batch = mr.next_batch()
            if batch is None:
                return
            yield from batch

    def timed():
        mr = memory_records_cls(data)
        next_batch = mr.next_batch
        while True:
            batch = next_batch()
            if batch is None:
                return
            for r in batch:
                r.offset
                r.timestamp
                r.key
                r.value
                r.headers

    return _digest_records(records()), timed


def _decode_kafka_python(path: str):
    import kafka
    from kafka.record import MemoryRecords

    with open(path, "rb") as f:
        data = f.read()  # the peers decode bytes in memory: the read is not timed
    digest, timed = _peer(MemoryRecords, data)
    return digest, timed, {"version": getattr(kafka, "__version__", "?"), "variant": "pure Python"}


def _decode_aiokafka(path: str):
    import aiokafka
    from aiokafka.record.memory_records import MemoryRecords

    with open(path, "rb") as f:
        data = f.read()
    impl = "Cython" if "_crecords" in (MemoryRecords.__module__ or "") else "pure Python"
    digest, timed = _peer(MemoryRecords, data)
    return digest, timed, {"version": getattr(aiokafka, "__version__", "?"), "variant": impl}


DECODERS = {"kstore": _decode_kstore, "kstore-columns": _decode_kstore_columns, "kafka-python": _decode_kafka_python, "aiokafka": _decode_aiokafka}


def task_decode(impl: str, path: str) -> dict:
    digest, timed, info = DECODERS[impl](path)
    # CPU seconds of this (single-threaded) process: on a shared machine, wall time also counts the time
    # other processes held the core, which differs from one implementation's runs to the next.
    seconds, runs, _ = best_of(timed, max_runs=5, budget_s=5.0, clock=time.process_time)
    return {"impl": impl, "digest": digest, "records": digest[0], "seconds": seconds, "runs": runs,
            "clock": "process CPU time", **info}


# ----------------------------------------------------------------------------- shallow scan + CRC
def task_scan(path: str) -> dict:
    """Frame every batch and check its CRC (Kafka's ensureValid), nothing decompressed or decoded."""
    from kstore_cli.record.reader import read_batches

    def scan():
        n = 0
        for b in read_batches(path):
            b.ensure_valid()
            n += 1
        return n

    seconds, runs, batches = best_of(scan)

    return {"bytes": os.path.getsize(path), "batches": batches, "seconds": seconds, "runs": runs,
            "backend": kstore_backend()}


def task_crc(path: str) -> dict:
    """The floor of any CRC-checking scan: one CRC-32C call over the whole mapped file (its own process,
    so the scan's peak RSS does not count these mapped pages)."""
    from kstore_cli.record.reader import map_file
    from kstore_cli.record.crc import crc32c

    def crc_only():
        view = map_file(path)
        try:
            return crc32c(view)
        finally:
            view.release()

    seconds, runs, _ = best_of(crc_only)
    return {"bytes": os.path.getsize(path), "seconds": seconds, "runs": runs}


# ----------------------------------------------------------------------------- spark-export
#: Warm exports after the first in one session; the fastest is the figure (the JVM's JIT is still
#: compiling Spark's scheduler during the first few, so one warm export varied by up to 40%).
WARM_EXPORTS = 3


def task_spark(master: str, data_dir: str, out: str, writer: str = "spark") -> dict:
    """kstore spark-export's own path (build_session + export_with), with Spark's writer or the arrow one.

    Session start is timed apart; then the first export (what one CLI run pays: it includes the JVM's
    JIT warm-up and the Python daemons' start) and WARM_EXPORTS more in the same session, the fastest
    of which is the per-row cost (like every command benchmark's best of N), each with the CPU seconds
    the JVM, the Python workers and this driver spent."""
    import shutil

    from kstore_cli.spark.export import ExportRequest, export_with
    from kstore_cli.spark.session import build_session

    t0 = time.perf_counter()
    spark = build_session(master, writer=writer)
    session_s = time.perf_counter() - t0
    runs = []
    try:
        for i in range(1 + WARM_EXPORTS):
            target = out if i == 0 else out + "-warm"
            before = descendants_cpu()
            summary = export_with(spark, ExportRequest([data_dir], target, writer=writer))
            after = descendants_cpu()
            runs.append((summary, {k: round(after[k] - before[k], 3) for k in after}))
            if i:
                shutil.rmtree(target, ignore_errors=True)
        memory = descendants_peak_rss()  # before stop(): the JVM and its Python workers are still there
    finally:
        spark.stop()
    (first, first_cpu), warms = runs[0], runs[1:]
    warm, warm_cpu = min(warms, key=lambda run: run[0].seconds)
    return {"master": master, "writer": writer, "rows": first.records, "seconds": first.seconds,
            "warm_rows": warm.records, "warm_seconds": warm.seconds,
            "warm_exports": [(w.records, round(w.seconds, 3)) for w, _ in warms], "cpu_seconds": first_cpu,
            "warm_cpu_seconds": warm_cpu, "session_seconds": session_s, "bytes_in": first.bytes_in,
            "spark_partitions": first.tasks, "backend": kstore_backend(), **memory}


def _processes() -> Dict[int, Tuple[int, str, float]]:
    """{pid: (parent pid, command name, CPU seconds so far)} of every process in /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            out[int(entry)] = (int(fields[1]), stat[stat.index("(") + 1:stat.rindex(")")],
                               (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, ValueError):
            continue
    return out


def _descendants(processes: Dict[int, Tuple[int, str, float]]) -> set:
    """The pids of this process's descendants (children, their children, ...)."""
    family, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, (ppid, _comm, _cpu) in processes.items():
            if ppid in family and pid not in family:
                family.add(pid)
                grew = True
    return family - {os.getpid()}


def descendants_cpu() -> dict:
    """CPU seconds (user + system) so far of this process (driver), its JVMs and its Python workers."""
    processes = _processes()
    out = {"driver": processes.get(os.getpid(), (0, "", 0.0))[2], "jvm": 0.0, "python_workers": 0.0}
    for pid in _descendants(processes):
        _ppid, comm, cpu = processes[pid]
        out["jvm" if comm == "java" else "python_workers"] += cpu
    return out


def descendants_peak_rss() -> dict:
    """Peak RSS (VmHWM) of this process's descendants: the largest JVM and the largest Python worker.

    os.wait4 in run.py only sees processes that are reaped; Spark's JVM and workers are not
    waited for by this process, so they are read from /proc while alive.
    """
    family = _descendants(_processes())
    jvm = workers = 0.0
    for pid in family:
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        hwm = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0.0)
        if comm == "java":
            jvm = max(jvm, hwm)
        elif comm.startswith("python"):
            workers = max(workers, hwm)
    return {"jvm_peak_rss_mb": round(jvm, 1), "python_workers_peak_rss_mb": round(workers, 1),
            "descendants": len(family)}


def task_spark_core(data_dir: str, out: str) -> dict:
    """The same planner, reader and Arrow column builder the Spark source runs, in this one process,
    written by one pyarrow ParquetWriter: what the export costs without Spark."""
    import pyarrow.parquet as pq

    from kstore_cli.spark.columns import arrow_schema
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.plan import plan_read
    from kstore_cli.spark.read import read_task

    t0 = time.perf_counter()
    plan = plan_read(ReadOptions({"path": data_dir}))
    rows = 0
    with pq.ParquetWriter(out, arrow_schema(), compression="snappy") as writer:
        for task in plan.tasks:
            for batch in read_task(task):
                writer.write_batch(batch)
                rows += batch.num_rows
    return {"rows": rows, "seconds": time.perf_counter() - t0, "bytes_in": plan.bytes_in,
            "backend": kstore_backend()}


# ----------------------------------------------------------------------------- compact
def task_compact(records: str, workdir: str, codec: str = "none", transactional: str = "") -> dict:
    """bench/compact.py's run(size_records, workdir, codec=...) (owned by kstore compact's author)."""
    import compact  # bench/compact.py: this script's directory is on sys.path

    t0 = time.perf_counter()
    result = compact.run(int(records), workdir, codec=codec, transactional=transactional == "transactional")
    elapsed = time.perf_counter() - t0
    out = dict(result) if isinstance(result, dict) else {"result": repr(result)}
    out.setdefault("wall_seconds", elapsed)
    out["backend"] = kstore_backend()
    return out


# ----------------------------------------------------------------------------- convert-format's codec work
def task_convert_codec(source_dir: str, workdir: str) -> dict:
    """convert-format (v1 gzip -> v2 zstd, convert_partition into workdir; the default --jobs, and
    --jobs 1) and its codec work alone, in this one process, alternately (5 rounds, best of each, wall and
    CPU time; on a shared machine single runs of the same work differ by 10-20%): the codec work is every
    source wrapper's value gunzipped (zlib) and every converted batch's records zstd-compressed
    (python-zstandard, level 3, one frame per batch), library calls only. The converted records come
    from the conversion's own output: the bytes compressed are the ones convert-format compressed."""
    import shutil
    import zlib

    import zstandard
    from kstore_cli.codecs import ZSTD, get_codec
    from kstore_cli.record import decode
    from kstore_cli.operations.convert import ConvertOptions, convert_partition
    from kstore_cli.log.logdir import Partition, Target
    from kstore_cli.record.reader import read_batches

    partition = Partition(source_dir)
    out_root = os.path.join(workdir, "convert-codec-out")

    def convert(jobs: Optional[int] = None) -> object:
        return convert_partition(Target(partition, None), ConvertOptions(2, codec=ZSTD, jobs=jobs),
                                 output_root=out_root)

    convert()
    converted = [s.log for s in Partition(os.path.join(out_root, partition.name)).segments]
    values = []
    for seg in partition.segments:
        for batch in read_batches(seg.log):
            entry = decode.decode_legacy_message(batch.buffer, 0, batch.size)
            values.append(bytes(batch.buffer[entry[8] : entry[8] + entry[9]]))
    bodies = [bytes(get_codec(batch.compression).decompress(batch.buffer[61:], 2))
              for log in converted for batch in read_batches(log)]
    compressor = zstandard.ZstdCompressor(level=3)

    def codec_only() -> None:
        for value in values:
            zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(value)
        for body in bodies:
            compressor.compress(body)

    best: Dict[str, float] = {}
    for _ in range(5):
        for name, fn in (("convert", convert), ("codec", codec_only), ("convert_j1", lambda: convert(1))):
            # The last round's output goes first, untimed: removing files is not part of converting.
            shutil.rmtree(out_root, ignore_errors=True)
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            best[name + "_wall"] = min(best.get(name + "_wall", wall), wall)
            best[name + "_cpu"] = min(best.get(name + "_cpu", cpu), cpu)
    shutil.rmtree(out_root, ignore_errors=True)
    return {**{k: round(v, 4) for k, v in best.items()}, "wrappers": len(values), "batches_out": len(bodies),
            "backend": kstore_backend()}


TASKS = {"decode": task_decode, "scan": task_scan, "crc": task_crc, "spark": task_spark, "spark-core": task_spark_core,
         "compact": task_compact, "convert-codec": task_convert_codec}


def main(argv) -> int:
    if not argv or argv[0] not in TASKS:
        print(__doc__, file=sys.stderr)
        return 2
    result = TASKS[argv[0]](*argv[1:])
    sys.stdout.flush()
    print(RESULT_PREFIX + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
