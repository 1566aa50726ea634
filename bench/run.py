"""kstore's benchmark suite: kstore side by side with its peers, every figure against issue 8's targets.

    python bench/run.py                          # default sizes: a few minutes
    python bench/run.py --full                   # the full check: every command on a 1 GiB segment
    python bench/run.py --quick                  # tiny inputs: proves the suite runs, figures mean little
    python bench/run.py --only decode,scan --decoder both --json out.json
    python bench/run.py --list                   # the benchmark names --only takes

Generates its inputs (with kstore's own batch builder and partition writer, cross-checked with
kafka-python) in a temp dir, then measures, each in a fresh child process (so the record decoder
is the one KSTORE_DECODER selects there, and peak RSS is that child's own, from os.wait4):

* decode:<kind>   full record decoding, records/s (offset, timestamp, key, value, headers of every
                  record touched): kstore (read_batches + records) vs kafka-python vs aiokafka, for
                  v2 none/lz4/zstd/gzip, ~100 B / ~1 KiB values, 1- / 100-record batches, v1 gzip;
  decode:<kind>:columnar  the same v2 inputs through kstore's columnar API (read_columns, what
                  spark-export reads: runs of plain batches decoded in one call into offsets,
                  timestamps, keys, values and headers as Arrow-ready buffers, no object per record
                  or batch; compressed batches through RecordBatch.columns, without headers), against
                  the same peer figures. The decode target is judged on this API, kstore's bulk
                  decoder; the object API's ratios are printed beside it;
* scan            shallow batch scan with CRC check (kstore) vs `cat file > /dev/null`, GB/s;
* rebuild-index   `kstore rebuild-index` on 16 KiB and ~1 KiB batches, GB/s; against Kafka's recovery of
                  the same partition with its indexes deleted (the oracle's `load-log --unclean`: time
                  inside UnifiedLog.apply, as a broker loads a log after a crash);
* verify-index    `kstore verify-index`, GB/s; against Kafka's `kafka-dump-log --verify-index-only`;
* dump-segment:<values>  `kstore dump-segment --deep-iteration --print-data-log > /dev/null`, lines/s,
                  on ASCII text, random binary (not UTF-8) and mixed values; against Kafka's
                  `kafka-dump-log` on the same segment, whose output kstore's is checked identical to;
* compact         `kstore compact` through bench/compact.py's run(), uncompressed, zstd and transactional (compact:none,
                  compact:zstd, compact:txn: each batch a committed transaction and its COMMIT marker), with
                  Kafka's Cleaner.clean on the same input in the same run (ratio);
* convert-format  `kstore convert-format` v1 gzip -> v2 zstd, MiB/s of input and records/s, 1 KiB values
                  (convert-format:100B: 100 B values); then in one child, alternately, the conversion
                  and the codec work alone (every wrapper gunzipped and every output batch
                  zstd-compressed, library calls only), wall and CPU time, and their ratio (target:
                  <= 1.5x, judged on CPU time: wall time on a shared machine measures the others);
* spark-export    the export on Spark local[1] and local[2], with Spark's writer (spark-export:local[N])
                  and with the arrow writer (spark-export:arrow:local[N]; what --writer auto, the
                  default, picks for a local output): the fastest of 3 warm exports (the first one,
                  session start excluded, and CPU per process kind beside it), and the same reading
                  path in one process without Spark, rows/s.

Command timings are wall time of `python -m kstore_cli ...` minus the measured start-up of
`kstore --version` (interpreter + imports), best of up to --repeat runs, page cache warm. Kafka's
tools (the shared kafka-oracle: Apache Kafka's own classes, see its README; --kafka-oracle, else
$KSTORE_ORACLE or ../shared/kafka-oracle) are timed the same way, minus the start-up of the same tool
on an empty input (JVM and class loading), or by the time the harness measures inside Kafka's call;
each Kafka row also gives the whole-process ratio. Record decoding is timed in CPU seconds of the
decoding process (single-threaded), which a busy machine disturbs less than wall time, with kstore
and aiokafka run alternately for --repeat rounds of fresh processes, each keeping its best.
Figures on a busy machine are noisy: the machine's load average is reported with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402
from harness import ROOT, child_cmd, child_env, kstore_cmd, kstore_startup, run_child, warm  # noqa: E402

GROUPS = ["decode", "scan", "rebuild-index", "verify-index", "dump-segment", "compact", "convert-format",
          "spark-export"]
RSS_TARGET_MB = 150
#: A command whose wall time is within this of the start-up time (or half the start-up time, when that is
#: more) is not timed meaningfully: start-up varies by that much on a busy machine.
MIN_NET_SECONDS = 0.1
TS_NOTE = "command timings exclude interpreter (and JVM) start-up"
#: The dump-segment inputs: what their values hold (bench/inputs.py) and each one's target.
DUMP_VALUES = [("text", ">= 3 M lines/s"), ("binary", ">= 5x Kafka dump-log"), ("mixed", ">= 5x Kafka dump-log")]


# ----------------------------------------------------------------------------- formatting
def fmt_rate(value: Optional[float], unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("records/s", "lines/s", "rows/s"):
        return f"{value / 1e6:.3f} M {unit}"
    if unit == "GB/s":
        return f"{value:.2f} GB/s"
    if unit == "MiB/s":
        return f"{value:.1f} MiB/s"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "MB":
        return f"{value:.0f} MB"
    return f"{value:.3g} {unit}"


def _short(value: float, unit: str) -> str:
    if unit in ("records/s", "lines/s", "rows/s"):
        return f"{value / 1e6:.3f}M/s"
    return fmt_rate(value, unit)


class Suite:
    """Inputs (generated on first use), the selected benchmarks, and the rows measured so far."""

    def __init__(self, args: argparse.Namespace, workdir: Path, kstore_src: Optional[str]) -> None:
        self.args = args
        self.work = workdir
        self.kstore_src = kstore_src
        self.rows: List[dict] = []
        self.inputs: Dict[str, dict] = {}
        self.decoders: List[dict] = []  # one per requested decoder: env, label, startup
        self.only = [t.strip() for t in args.only.split(",")] if args.only else None
        self.kafka = None if args.no_kafka else harness.find_kafka_oracle(args.kafka_oracle)
        self._kafka_env: Optional[Dict[str, str]] = None
        self._kafka_startup: Dict[str, float] = {}

    # -------------------------------------------------------------- selection and output
    def selected(self, row_id: str) -> bool:
        if not self.only:
            return True
        group = row_id.split(":")[0]
        return any(t == row_id or t == group or row_id.startswith(t) for t in self.only)

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    def add(self, row_id: str, *, decoder: Optional[str], figure: Optional[float], unit: str,
            target: Optional[str] = None, met: Optional[bool] = None, peers: Optional[dict] = None,
            ratios: Optional[dict] = None, rss_mb: Optional[float] = None, seconds: Optional[float] = None,
            note: str = "", detail: Optional[dict] = None) -> dict:
        if detail and detail.get("too_short"):
            met = None
            note = "too short to time (within start-up noise; raise --segment-mib or --dump-mib); " + note
        row = {"id": row_id, "group": row_id.split(":")[0], "decoder": decoder, "figure": figure, "unit": unit,
               "target": target, "met": met, "peers": peers or {}, "ratios": ratios or {},
               "peak_rss_mb": None if rss_mb is None else round(rss_mb, 1),
               "seconds": None if seconds is None else round(seconds, 4), "note": note, "detail": detail or {}}
        self.rows.append(row)
        shown = fmt_rate(figure, unit)
        self.log(f"{row_id} [{decoder or '-'}]: {shown}" + (f" ({note})" if note else ""))
        return row

    # -------------------------------------------------------------- inputs
    def _input(self, key: str, make: Callable[[], dict]) -> dict:
        if key not in self.inputs:
            t = time.perf_counter()
            self.log(f"generating {key} ...")
            info = make()
            info["generate_seconds"] = round(time.perf_counter() - t, 2)
            if info.get("log") and key != "spark":
                problem = inputs.check_with_kafka_python(info["log"])
                info["kafka_python_check"] = problem or "ok"
                if problem and "not installed" not in problem:
                    raise SystemExit(f"bench: generated input {key} is not readable by kafka-python: {problem}")
            self.inputs[key] = info
        return self.inputs[key]

    def decode_input(self, kind) -> dict:
        def make():
            path = self.work / "decode" / f"{kind.name}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            return {"log": str(path), **inputs.write_segment(str(path), kind, total_records=self.args.records)}

        return self._input("decode:" + kind.name, make)

    def partition(self, name: str, kind, total_bytes: int) -> dict:
        def make():
            d = self.work / "data" / f"{name}-0"
            info = inputs.write_partition(str(d), kind, total_bytes=total_bytes)
            return {"dir": str(d), "log": str(d / "00000000000000000000.log"), "kind": kind.name, **info}

        return self._input(name, make)

    def seg16k(self) -> dict:
        # ~125 B per record (100 B values, keys, a header in five): 128 records make a ~16 KiB batch.
        return self.partition("bench16k", inputs.Kind(2, "none", 100, 128), self.segment_bytes)

    def seg1k(self) -> dict:
        return self.partition("bench1k", inputs.Kind(2, "none", 100, 8), self.segment_bytes)

    def legacy(self) -> dict:
        return self.partition("legacy", inputs.Kind(1, "gzip", 1024, 100), int(self.args.convert_mib * 2**20))

    def legacy100(self) -> dict:
        # 100 B values: the per-record work, not the codecs, is most of the time.
        return self.partition("legacy100", inputs.Kind(1, "gzip", 100, 100), int(self.args.convert_mib * 2**20 / 4))

    def spark_data(self) -> dict:
        def make():
            d = self.work / "spark"
            parts = 4
            total = {"records": 0, "bytes": 0, "batches": 0, "segments": 0}
            for p in range(parts):
                info = inputs.write_partition(str(d / f"bench-{p}"), inputs.Kind(2, "none", 100, 100),
                                              total_records=max(1, self.args.spark_records // parts),
                                              segment_bytes=128 << 20, seed=10 + p)
                for k in total:
                    total[k] += info[k]
            return {"dir": str(d), "partitions": parts, **total}

        return self._input("spark", make)

    @property
    def segment_bytes(self) -> int:
        return int(self.args.segment_mib * 2**20)

    # -------------------------------------------------------------- decoders
    def setup_decoders(self) -> None:
        wanted = {"python": ["python"], "native": ["native"], "both": ["python", "native"]}.get(
            self.args.decoder or "", [None])
        for req in wanted:
            env = child_env(self.kstore_src, req)
            startup = kstore_startup(env)
            backend = startup["backend"] or "unknown"
            label = backend if (req is None or req == backend) else f"{backend} ({req} requested)"
            if not startup["ok"]:
                label = f"{req or 'default'}: kstore does not start"
            self.decoders.append({"requested": req, "env": env, "label": label, "backend": backend,
                                  "startup": startup})
            self.log(f"decoder {req or '(default)'}: {startup['version_text']!r}, "
                     f"start-up {startup['startup_seconds']:.3f} s")

    # -------------------------------------------------------------- command timing
    def time_command(self, dec: dict, argv: List[str], *, prepare: Optional[Callable[[], None]] = None,
                     warm_paths: List[str] = (), ok_exits=(0,)) -> dict:
        """Best of up to --repeat runs (stopping past --budget seconds): net seconds, max peak RSS."""
        startup = dec["startup"]["startup_seconds"] or 0.0
        best = cpu = None
        rss = 0.0
        walls = []
        spent = 0.0
        for _ in range(self.args.repeat):
            if prepare:
                prepare()
            warm(list(warm_paths))
            res = run_child(kstore_cmd(*argv), dec["env"], stdout_to_devnull=True)
            if res.exit not in ok_exits:
                return {"error": res.error(), "rss_mb": res.rss_mb, "wall": res.wall}
            walls.append(res.wall)
            if res.cpu is not None:
                cpu = res.cpu if cpu is None else min(cpu, res.cpu)
            rss = max(rss, res.rss_mb)
            net = max(res.wall - startup, 1e-3)
            best = net if best is None else min(best, net)
            spent += res.wall
            if spent > self.args.budget:
                break
        # CPU seconds (user + system) beside the wall time: what the command cost on a busy machine.
        startup_cpu = dec["startup"].get("startup_cpu_seconds") or 0.0
        out = {"net": best, "rss_mb": rss, "walls": [round(w, 4) for w in walls], "startup": startup,
               "cpu_net": None if cpu is None else max(cpu - startup_cpu, 1e-3),
               "too_short": best < max(MIN_NET_SECONDS, startup / 2)}
        profile = self.profile(dec["env"], ["-m", "kstore_cli", *argv], prepare)
        if profile:
            out["profile"] = profile
        return out

    def profile(self, env: Dict[str, str], tail: List[str], prepare: Optional[Callable[[], None]] = None
                ) -> Optional[str]:
        """With --profile: one more run under cProfile (not timed), its top functions by own time."""
        if not self.args.profile:
            return None
        import io
        import pstats

        if prepare:
            prepare()
        pfile = self.work / "profile.out"
        res = run_child([sys.executable, "-m", "cProfile", "-o", str(pfile), *tail], env, stdout_to_devnull=True)
        if not pfile.exists():
            return f"(profile failed: {res.error()})"
        buf = io.StringIO()
        pstats.Stats(str(pfile), stream=buf).sort_stats("tottime").print_stats(12)
        pfile.unlink()
        return "\n".join(line for line in buf.getvalue().splitlines() if line.strip())

    def run_task(self, dec_env: Dict[str, str], *args: str, timeout: Optional[float] = None):
        return run_child(child_cmd(*args), dec_env, timeout=timeout)

    # -------------------------------------------------------------- Kafka itself (the oracle)
    @property
    def kafka_env(self) -> Dict[str, str]:
        if self._kafka_env is None:
            self._kafka_env = harness.kafka_env()
        return self._kafka_env

    def kafka_startup(self) -> float:
        """kafka-dump-log's start-up: the JVM and Kafka's classes, on an empty segment (best of 3)."""
        if "dump-log" not in self._kafka_startup:
            d = self.work / "kafka-empty"
            d.mkdir(exist_ok=True)
            empty = d / "00000000000000000000.log"
            empty.write_bytes(b"")
            best = None
            for _ in range(3):
                res = run_child(harness.kafka_cmd(self.kafka, "dump-log", "--files", str(empty)), self.kafka_env,
                                stdout_to_devnull=True)
                best = res.wall if best is None else min(best, res.wall)
            self._kafka_startup["dump-log"] = best
            self.log(f"kafka-dump-log start-up (empty segment): {best:.2f} s")
        return self._kafka_startup["dump-log"]

    def time_kafka(self, argv: List[str], *, runs: int, warm_paths: List[str] = ()) -> dict:
        """Kafka's dump-log with these arguments, stdout to /dev/null: best net seconds (minus its start-up)
        of `runs` runs, the best whole-process seconds, peak RSS."""
        startup = self.kafka_startup()
        best = None
        rss = 0.0
        for _ in range(runs):
            warm(list(warm_paths))
            res = run_child(harness.kafka_cmd(self.kafka, "dump-log", *argv), self.kafka_env, stdout_to_devnull=True)
            if res.exit != 0:
                return {"error": f"kafka-dump-log {res.error()}"}
            rss = max(rss, res.rss_mb)
            best = res.wall if best is None else min(best, res.wall)
        return {"net": max(best - startup, 1e-3), "whole": best, "startup": startup, "rss_mb": rss}

    def same_output_as_kafka(self, dec: dict, argv: List[str]) -> str:
        """'' when kstore dump-segment and Kafka's dump-log write the same bytes with these arguments, else
        what differs (both outputs go to files in the work dir, hashed, then removed)."""
        import hashlib

        def digest(cmd, env) -> tuple:
            out = self.work / "dump-output"
            res = run_child(cmd, env, stdout_path=str(out))
            h = hashlib.sha256()
            size = 0
            with open(out, "rb") as f:
                while True:
                    chunk = f.read(8 << 20)
                    if not chunk:
                        break
                    h.update(chunk)
                    size += len(chunk)
            out.unlink()
            return res.exit, size, h.hexdigest()

        ours = digest(kstore_cmd("dump-segment", *argv), dec["env"])
        theirs = digest(harness.kafka_cmd(self.kafka, "dump-log", *argv), self.kafka_env)
        if ours == theirs:
            return ""
        return f"OUTPUT DIFFERS FROM KAFKA'S: kstore (exit, bytes, sha256) {ours} vs kafka-dump-log {theirs}"

    # ================================================================ the benchmarks
    def bench_decode(self) -> None:
        for kind in inputs.DECODE_KINDS:
            row_id = f"decode:{kind.name}"
            if not self.selected(row_id):
                continue
            inp = self.decode_input(kind)
            path = inp["log"]
            warm([path])
            peers = {}
            peer_detail = {}
            digests = {"generator": inp["digest"]}
            env0 = self.decoders[0]["env"]
            # Two kstore figures per decoder: the object API (read_batches + records(), a Record per record,
            # the same loop as the peers) and, for v2, the columnar API spark-export reads through
            # (read_columns: runs of plain batches straight into buffers; no object per record).
            apis = [("object", "kstore")] + ([("columnar", "kstore-columns")] if kind.magic >= 2 else [])
            # aiokafka and kstore run alternately, --repeat rounds of fresh processes, each keeping its best:
            # on a shared machine a burst of load lands on one round of everyone, not on one side of a ratio.
            # kafka-python (20-30x slower, far from any bound) runs once.
            jobs = [("aiokafka", env0, "aiokafka")] + [
                ((id(dec), api), dec["env"], task) for dec in self.decoders for api, task in apis]
            best: Dict[object, object] = {}
            for _round in range(self.args.repeat):
                for key, env, task in jobs:
                    _keep_best(best, key, self.run_task(env, "decode", task, path))
            best["kafka-python"] = self.run_task(env0, "decode", "kafka-python", path)
            for peer in ("aiokafka", "kafka-python"):
                res = best[peer]
                if not res.ok or not res.result:
                    peer_detail[peer] = {"error": res.error()}
                    continue
                r = res.result
                name = f"aiokafka[{r.get('variant')}]" if peer == "aiokafka" else peer
                peers[name] = r["records"] / r["seconds"]
                peer_detail[name] = {"seconds": r["seconds"], "runs": r["runs"], "version": r.get("version"),
                                     "peak_rss_mb": round(res.rss_mb, 1), "rounds": self.args.repeat if peer == "aiokafka" else 1}
                digests[peer] = r["digest"]
            for dec in self.decoders:
                for api, task in apis:
                    self._decode_row(kind, inp, path, dec, api, task, peers, peer_detail, digests, best[(id(dec), api)])

    def _decode_row(self, kind, inp: dict, path: str, dec: dict, api: str, task: str, peers: dict,
                    peer_detail: dict, digests: dict, res) -> None:
        """One kstore row from `res`, the best of its rounds (see bench_decode)."""
        row_id = f"decode:{kind.name}" + (":columnar" if api == "columnar" else "")
        if not res.ok or not res.result:
            self.add(row_id, decoder=f"{dec['label']} ({api} API)", figure=None, unit="records/s", note=res.error())
            return
        r = res.result
        if api == "columnar":
            # Headers are in the columnar digest for plain batches (None when compressed batches took part).
            ref = digests.get("kstore") or next((d for k, d in digests.items() if k != "generator"), None)
            digests = {**digests, "kstore (columnar)": r["digest"]}
            note = ""
            fields = (0, 1, 2, 4) if r["digest"][3] is None else (0, 1, 2, 3, 4)
            if ref is not None and [r["digest"][i] for i in fields] != [ref[i] for i in fields]:
                note = f"DIGEST MISMATCH: columnar {r['digest']} vs object API {ref}"
        else:
            digests["kstore"] = r["digest"]
            note = _digest_problem(digests)
        rate = r["records"] / r["seconds"]
        ratios = {name: rate / v for name, v in peers.items()}
        target = met = None
        a = next((v for k, v in ratios.items() if k.startswith("aiokafka")), None)
        if kind.magic == 2 and kind.codec == "none" and api == "columnar":
            target = ">= 2.0x aiokafka, >= 20x kafka-python"
            k = ratios.get("kafka-python")
            met = None if a is None or k is None else (a >= 2.0 and k >= 20.0)
        if kind.name == "v2-none-100B-x100" and api == "object":
            target = ">= 1.5x aiokafka (issue 20)"
            met = None if a is None else a >= 1.5
        listed = ""
        if r.get("records_list_seconds"):
            list_rate = r["records"] / r["records_list_seconds"]
            listed = (f"batch.records() (a list per batch): {list_rate / 1e6:.3f} M records/s"
                      + "".join(f", {list_rate / v:.2f}x {name}" for name, v in peers.items()))
        api_note = ("object API: for r in batch (the peers' loop), a Record per record, "
                    "offset/timestamp/key/value/headers read" + (f"; {listed}" if listed else "") if api == "object"
                    else "columnar API (read_columns, as spark-export): offsets, timestamps, keys, values"
                         + (", headers" if r["digest"][3] is not None else " (compressed batches: no headers)")
                         + "; no object per record")
        self.add(row_id, decoder=f"{_backend_label(dec, r)} ({api} API)", figure=rate, unit="records/s",
                 target=target, met=False if note else met, peers=peers, ratios=ratios, rss_mb=res.rss_mb,
                 seconds=r["seconds"], note="; ".join(x for x in (note, kind.description, api_note,
                                                                  f"{r.get('clock', 'wall time')}") if x),
                 detail={"records": r["records"], "bytes": inp["bytes"], "batches": inp["batches"], "api": api,
                         "runs": r["runs"], "rounds": self.args.repeat, "peers": peer_detail, "digests": digests,
                         "profile": self.profile(dec["env"], [str(harness.CHILD), "decode", task, path])})

    def bench_scan(self) -> None:
        if not self.selected("scan"):
            return
        seg = self.seg16k()
        path = seg["log"]
        size = os.path.getsize(path)
        warm([path])
        cat_best = None
        for _ in range(3):
            res = run_child(["cat", path], dict(os.environ), stdout_to_devnull=True)
            cat_best = res.wall if cat_best is None else min(cat_best, res.wall)
        cat_gbs = size / cat_best / 1e9
        crc = self.run_task(self.decoders[0]["env"], "crc", path)
        crc_gbs = size / crc.result["seconds"] / 1e9 if crc.ok and crc.result else None
        for dec in self.decoders:
            res = self.run_task(dec["env"], "scan", path)
            if not res.ok or not res.result:
                self.add("scan", decoder=dec["label"], figure=None, unit="GB/s", note=res.error())
                continue
            r = res.result
            gbs = size / r["seconds"] / 1e9
            peers = {"cat > /dev/null": cat_gbs}
            if crc_gbs:
                peers["crc32c(whole file)"] = crc_gbs
            self.add("scan", decoder=_backend_label(dec, r), figure=gbs, unit="GB/s", target=">= 2 GB/s",
                     met=gbs >= 2.0, peers=peers, ratios={k: gbs / v for k, v in peers.items()},
                     rss_mb=res.rss_mb, seconds=r["seconds"],
                     note="16 KiB batches, page cache warm",
                     detail={"bytes": size, "batches": r["batches"], "runs": r["runs"], "cat_seconds": cat_best,
                             "profile": self.profile(dec["env"], [str(harness.CHILD), "scan", path])})

    def kafka_recovery(self, part: dict) -> Optional[dict]:
        """Kafka's recovery of the partition with its indexes deleted (load-log --unclean on a copy of the
        .log: every segment goes through LogSegment.recover, which rebuilds its indexes): the best of
        min(--repeat, 2) times inside UnifiedLog.apply (load_ms) and the whole process."""
        if not self.kafka:
            return None
        d = self.work / "kafka-recovery" / Path(part["dir"]).name
        shutil.rmtree(d.parent, ignore_errors=True)
        d.mkdir(parents=True)
        logs = sorted(Path(part["dir"]).glob("*.log"))
        for log in logs:
            shutil.copyfile(log, d / log.name)
        best = whole = None
        try:
            for _ in range(min(self.args.repeat, 2)):
                for p in d.iterdir():  # what a previous load wrote: indexes, snapshots, checkpoints
                    if p.suffix != ".log":
                        shutil.rmtree(p) if p.is_dir() else p.unlink()
                warm([str(d / log.name) for log in logs])
                out = self.work / "kafka-recovery.jsonl"
                res = run_child(harness.kafka_cmd(self.kafka, "load-log", str(d), "--unclean", "--no-records",
                                                  "--no-lookup"), self.kafka_env, stdout_path=str(out))
                summary = None
                if res.exit == 0:
                    with open(out) as f:
                        summary = json.loads(f.readline() or "null")
                out.unlink(missing_ok=True)
                if summary is None or not summary.get("ok") or summary.get("truncations"):
                    return {"error": f"load-log: {res.error()} {summary and summary.get('exception')}"}
                sec = summary["load_ms"] / 1000
                best = sec if best is None else min(best, sec)
                whole = res.wall if whole is None else min(whole, res.wall)
        finally:
            shutil.rmtree(d.parent, ignore_errors=True)
        return {"seconds": best, "whole": whole}

    def bench_rebuild_index(self) -> None:
        for label, make in (("16k", self.seg16k), ("1k", self.seg1k)):
            row_id = f"rebuild-index:{label}"
            if not self.selected(row_id):
                continue
            part = make()
            size = part["bytes"]

            def drop_indexes(d=part["dir"]):
                for p in Path(d).iterdir():
                    if p.suffix in (".index", ".timeindex"):
                        p.unlink()

            kafka = self.kafka_recovery(part)
            for dec in self.decoders:
                t = self.time_command(dec, ["rebuild-index", "--force", part["dir"]], prepare=drop_indexes,
                                      warm_paths=[part["log"]])
                if "error" in t:
                    self.add(row_id, decoder=dec["label"], figure=None, unit="GB/s", rss_mb=t["rss_mb"],
                             note=t["error"])
                    continue
                gbs = size / t["net"] / 1e9
                batch_kib = size / part["batches"] / 1024
                note = f"{size / 2**20:.0f} MiB of {batch_kib:.1f} KiB batches (100 B text values), indexes deleted first"
                peers, ratios = {}, {}
                if kafka and "error" not in kafka:
                    peers["Kafka recovery"] = size / kafka["seconds"] / 1e9
                    ratios["Kafka recovery"] = kafka["seconds"] / t["net"]
                    note += (f"; Kafka: load-log --unclean, {kafka['seconds']:.2f} s inside UnifiedLog.apply, "
                             f"whole process {kafka['whole'] / (t['net'] + t['startup']):.1f}x")
                elif kafka:
                    note += f"; Kafka: {kafka['error']}"
                self.add(row_id, decoder=dec["label"], figure=gbs, unit="GB/s",
                         target=">= 1 GB/s" if label == "16k" else None,
                         met=(gbs >= 1.0) if label == "16k" else None, peers=peers, ratios=ratios,
                         rss_mb=t["rss_mb"], seconds=t["net"], note=note,
                         detail={"bytes": size, "batches": part["batches"], "kafka": kafka, **t})

    def bench_verify_index(self) -> None:
        if not self.selected("verify-index"):
            return
        part = self.seg16k()
        size = part["bytes"]
        index_files = sorted(str(p) for p in Path(part["dir"]).glob("*index"))
        kafka = None
        if self.kafka:
            kafka = self.time_kafka(["--verify-index-only", "--files", ",".join(index_files)],
                                    runs=min(self.args.repeat, 2), warm_paths=[part["log"]] + index_files)
        for dec in self.decoders:
            t = self.time_command(dec, ["verify-index", "--quiet", part["dir"]],
                                  warm_paths=[part["log"]] + index_files)
            if "error" in t:
                self.add("verify-index", decoder=dec["label"], figure=None, unit="GB/s", rss_mb=t["rss_mb"],
                         note=t["error"])
                continue
            gbs = size / t["net"] / 1e9
            note = f"{size / 2**20:.0f} MiB of 16 KiB batches, .index and .timeindex"
            peers, ratios = {}, {}
            if kafka and "error" not in kafka:
                peers["Kafka dump-log --verify-index-only"] = size / kafka["net"] / 1e9
                ratios["Kafka dump-log --verify-index-only"] = kafka["net"] / t["net"]
                note += (f"; Kafka {kafka['net']:.2f} s + {kafka['startup']:.2f} s JVM start-up, whole process "
                         f"{kafka['whole'] / (t['net'] + t['startup']):.1f}x")
            elif kafka:
                note += f"; {kafka['error']}"
            self.add("verify-index", decoder=dec["label"], figure=gbs, unit="GB/s", target=">= 1 GB/s",
                     met=gbs >= 1.0, peers=peers, ratios=ratios, rss_mb=t["rss_mb"], seconds=t["net"], note=note,
                     detail={"bytes": size, "batches": part["batches"], "kafka": kafka, **t})

    def dump_input(self, values: str) -> dict:
        """A --dump-mib segment of ~16 KiB batches (128 records, ~100 B values) holding `values`."""
        kind = inputs.Kind(2, "none", 100, 128, values)
        info = self.partition(f"dump-{values}", kind, int(self.args.dump_mib * 2**20))
        info["description"] = kind.description
        return info

    def bench_dump_segment(self) -> None:
        for values, target in DUMP_VALUES:
            row_id = f"dump-segment:{values}"
            if not self.selected(row_id):
                continue
            seg = self.dump_input(values)
            # "Dumping <file>", "Log starting offset: <n>", then one line per batch and one per record.
            lines = 2 + seg["batches"] + seg["records"]
            argv = ["--deep-iteration", "--print-data-log", "--files", seg["log"]]
            kafka, same = None, {}
            if self.kafka:
                kafka = self.time_kafka(argv, runs=min(self.args.repeat, 2), warm_paths=[seg["log"]])
            for dec in self.decoders:
                t = self.time_command(dec, ["dump-segment", *argv], warm_paths=[seg["log"]])
                if "error" in t:
                    self.add(row_id, decoder=dec["label"], figure=None, unit="lines/s", rss_mb=t["rss_mb"],
                             note=t["error"])
                    continue
                rate = lines / t["net"]
                peers, ratios, note = {}, {}, f"> /dev/null; {seg['bytes'] / 2**20:.0f} MiB, {seg['description']}"
                if t.get("cpu_net"):
                    note += f"; by CPU seconds {lines / t['cpu_net'] / 1e6:.2f} M lines/s"
                if kafka and "error" not in kafka:
                    peers["Kafka dump-log"] = lines / kafka["net"]
                    ratios["Kafka dump-log"] = kafka["net"] / t["net"]
                    whole = kafka["whole"] / (t["net"] + t["startup"])
                    note += (f"; Kafka {kafka['net']:.2f} s + {kafka['startup']:.2f} s JVM start-up, whole process "
                             f"{whole:.1f}x")
                    if dec is self.decoders[0]:
                        same["problem"] = self.same_output_as_kafka(dec, argv)
                    if same.get("problem"):
                        note = same["problem"] + "; " + note
                    else:
                        note += "; output identical to Kafka's"
                elif kafka:
                    note += f"; {kafka['error']}"
                elif values != "text":
                    note += "; Kafka not measured (no kafka-oracle: --kafka-oracle)"
                if values == "text":
                    met = rate >= 3e6
                else:
                    met = None if "Kafka dump-log" not in ratios else ratios["Kafka dump-log"] >= 5.0
                if same.get("problem"):
                    met = False
                self.add(row_id, decoder=dec["label"], figure=rate, unit="lines/s", target=target, met=met,
                         peers=peers, ratios=ratios, rss_mb=t["rss_mb"], seconds=t["net"], note=note,
                         detail={"lines": lines, "bytes": seg["bytes"], "input": seg["description"], "kafka": kafka,
                                 **t})

    def bench_compact(self) -> None:
        if not self.selected("compact"):
            return
        module = BENCH / "compact.py"
        if not module.exists():
            self.add("compact", decoder=None, figure=None, unit="records/s",
                     note="not available: bench/compact.py (kstore compact) does not exist yet")
            return
        for codec, txn in (("none", False), ("zstd", False), ("none", True)):
            for dec in self.decoders:
                self._bench_compact_one(codec, dec, txn)

    def _bench_compact_one(self, codec: str, dec: dict, txn: bool = False) -> None:
        """One compact row: kstore compact's records/s (whole process) and, in the same run, Kafka's
        Cleaner.clean on the same input (bench/compact.py runs the oracle's clean-log). compact:txn: every
        batch a committed transaction followed by its COMMIT marker (exactly-once offset commits)."""
        row = "compact:txn" if txn else f"compact:{codec}"
        workdir = self.work / "compact"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        res = self.run_task(dec["env"], "compact", str(self.args.records), str(workdir), codec,
                            *(["transactional"] if txn else []), timeout=3600)
        shutil.rmtree(workdir, ignore_errors=True)
        if not res.ok or not res.result:
            self.add(row, decoder=dec["label"], figure=None, unit="records/s", rss_mb=res.rss_mb,
                     note="bench/compact.py failed: " + res.error())
            return
        r = res.result
        rate = _records_per_second(r)
        # bench/compact.py reports the peak RSS of its `kstore compact` child; ours would add its generator.
        own_rss = r.get("peak_rss_mb")
        kafka = r.get("kafka_records_per_s")
        ratios = {"Kafka Cleaner.clean": rate / kafka} if rate and kafka else {}
        met = None
        if ratios:
            met = ratios["Kafka Cleaner.clean"] >= 2.0 and bool(r.get("rss_within_target"))
        note = (f"{codec} batches of 50 __consumer_offsets commits"
                + (", each a transaction of one of 4 producers followed by its COMMIT marker" if txn else "")
                + f", {r.get('records', 0):,} records over "
                f"{r.get('keys', 0):,} keys; whole `kstore compact` process vs time inside Kafka's Cleaner.clean "
                f"(oracle clean-log, same input, same run)")
        if kafka:
            note += f"; Kafka {kafka:,.0f} records/s; same .log bytes as Kafka: {r.get('identical_to_kafka')}"
        else:
            note += f"; Kafka not run: {r.get('kafka_error', 'no oracle')}"
        note += f"; peak RSS target < {r.get('rss_target_mb')} MB"
        self.add(row, decoder=_backend_label(dec, r), figure=rate, unit="records/s",
                 target=">= 2x Kafka's Cleaner, RSS < dedupe buffer + 64 MB", met=met, ratios=ratios,
                 rss_mb=own_rss if isinstance(own_rss, (int, float)) else res.rss_mb, seconds=r.get("seconds"),
                 note=note, detail=r)

    def bench_convert_format(self) -> None:
        """`kstore convert-format` v1 gzip -> v2 zstd: the whole command (MiB/s, records/s), and in one child
        (child.py's convert-codec) the conversion and the codec work alone, alternately, wall and CPU time."""
        for row_id, part in (("convert-format", self.legacy), ("convert-format:100B", self.legacy100)):
            if self.selected(row_id):
                self._convert_row(row_id, part())

    def _convert_row(self, row_id: str, part: dict) -> None:
        size = part["bytes"]
        out = self.work / "convert-out"
        value = "1 KiB" if row_id == "convert-format" else "100 B"

        def clear():
            shutil.rmtree(out, ignore_errors=True)

        for dec in self.decoders:
            t = self.time_command(dec, ["convert-format", "--to-magic", "2", "--compression", "zstd",
                                        "--output-dir", str(out), part["dir"]], prepare=clear,
                                  warm_paths=[part["log"]])
            clear()
            if "error" in t:
                self.add(row_id, decoder=dec["label"], figure=None, unit="MiB/s", rss_mb=t["rss_mb"], note=t["error"])
                continue
            out.mkdir(parents=True)
            res = self.run_task(dec["env"], "convert-codec", part["dir"], str(out), timeout=3600)
            clear()
            c = res.result if res.ok and res.result else None
            rate = part["records"] / t["net"]
            # The target is judged on CPU time (in one process, same run): on a shared machine wall time
            # mostly measures the other processes; the wall ratio is reported beside it.
            cpu = None if c is None else c["convert_cpu"] / c["codec_cpu"]
            wall = None if c is None else c["convert_wall"] / c["codec_wall"]
            note = f"v1 gzip -> v2 zstd, {value} values, {rate / 1e3:.0f} k records/s (whole command)"
            if c is None:
                note += "; codec baseline failed: " + res.error()
            else:
                note += (f"; in one process: convert {c['convert_cpu']:.3f} s CPU ({c['convert_wall']:.3f} s wall), "
                         f"codec work alone {c['codec_cpu']:.3f} s CPU ({c['codec_wall']:.3f} s wall): "
                         f"{cpu:.2f}x CPU, {wall:.2f}x wall; at --jobs 1: {c['convert_j1_cpu']:.3f} s CPU, "
                         f"{c['convert_j1_cpu'] / c['codec_cpu']:.2f}x")
            self.add(row_id, decoder=dec["label"], figure=size / 2**20 / t["net"], unit="MiB/s", rss_mb=t["rss_mb"],
                     seconds=t["net"], target="<= 1.5x the codec work alone (CPU)",
                     met=None if cpu is None else cpu <= 1.5,
                     peers={} if c is None else {"codec work alone": size / 2**20 / c["codec_cpu"]},
                     ratios={} if c is None else {"codec work alone": 1 / cpu},
                     note=note, detail={"bytes": size, "records": part["records"], "records_per_s": rate,
                                        "in_process": c, **t})

    def bench_spark_export(self) -> None:
        ids = [i for i in row_ids() if i.startswith("spark-export:")]
        if not any(self.selected(i) for i in ids):
            return
        if shutil.which("java") is None:
            self.add("spark-export", decoder=None, figure=None, unit="rows/s", note="not available: no java on PATH")
            return
        import importlib.util

        missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
        if missing:  # the light install: pyspark and pyarrow are the [spark] extra
            self.add("spark-export", decoder=None, figure=None, unit="rows/s",
                     note=f"not available: {' and '.join(missing)} not installed (pip install '.[spark]')")
            return
        data = self.spark_data()
        warm([str(p) for p in Path(data["dir"]).rglob("*.log")])
        for dec in self.decoders:
            rates = {}
            if self.selected("spark-export:core"):
                out = self.work / "spark-core.parquet"
                res = self.run_task(dec["env"], "spark-core", data["dir"], str(out))
                out.unlink(missing_ok=True)
                if res.ok and res.result:
                    r = res.result
                    rates["core"] = r["rows"] / r["seconds"]
                    profile = self.profile(dec["env"], [str(harness.CHILD), "spark-core", data["dir"], str(out)])
                    out.unlink(missing_ok=True)
                    self.add("spark-export:core", decoder=_backend_label(dec, r), figure=rates["core"],
                             unit="rows/s", rss_mb=res.rss_mb, seconds=r["seconds"],
                             note="same reader + Arrow builder, 1 process, pyarrow writer, no Spark",
                             detail={**r, "profile": profile})
                else:
                    self.add("spark-export:core", decoder=dec["label"], figure=None, unit="rows/s",
                             note=res.error())
            for writer in ("spark", "arrow"):
                # spark-export:local[N] (Spark's writer, the default) and spark-export:arrow:local[N] (--writer arrow)
                prefix = "spark-export:" if writer == "spark" else "spark-export:arrow:"
                firsts = {}
                for master, cores in (("local[1]", 1), ("local[2]", 2)):
                    row_id = f"{prefix}{master}"
                    if not (self.selected(row_id) or self.selected(f"{prefix}scaling")):
                        continue
                    out = self.work / f"spark-out-{writer}-{cores}"
                    shutil.rmtree(out, ignore_errors=True)
                    res = self.run_task(dec["env"], "spark", master, data["dir"], str(out), writer, timeout=3600)
                    shutil.rmtree(out, ignore_errors=True)
                    if not res.ok or not res.result:
                        self.add(row_id, decoder=dec["label"], figure=None, unit="rows/s", rss_mb=res.rss_mb,
                                 note=res.error())
                        continue
                    r = res.result
                    # The figure is the warm export (the per-row cost); the first export in a fresh session
                    # also pays the JVM's JIT warm-up and the Python daemons' start, shown beside it.
                    rate = r["warm_rows"] / r["warm_seconds"]
                    first = r["rows"] / r["seconds"]
                    rates[f"{writer}:{master}"], firsts[master] = rate, first
                    cpu, wcpu = r["cpu_seconds"], r["warm_cpu_seconds"]
                    peers = {"1-process core": rates["core"]} if "core" in rates else {}
                    self.add(row_id, decoder=_backend_label(dec, r), figure=rate, unit="rows/s",
                             target=f">= {cores} M rows/s (1 M per core)", met=rate / cores >= 1e6, peers=peers,
                             ratios={k: rate / v for k, v in peers.items()}, rss_mb=res.rss_mb,
                             seconds=r["warm_seconds"],
                             note=f"{writer} writer; fastest of {len(r['warm_exports'])} warm exports (after the first in the session); first export "
                                  f"{first / 1e3:.0f} k rows/s ({r['seconds']:.1f} s, session start "
                                  f"{r['session_seconds']:.1f} s excluded); CPU s warm/first: JVM "
                                  f"{wcpu['jvm']:.1f}/{cpu['jvm']:.1f}, Python workers "
                                  f"{wcpu['python_workers']:.1f}/{cpu['python_workers']:.1f}; peak RSS: Python driver "
                                  f"(JVM {r.get('jvm_peak_rss_mb', 0):.0f} MB, Python workers "
                                  f"{r.get('python_workers_peak_rss_mb', 0):.0f} MB)",
                             detail={**r, "records_generated": data["records"]})
                    if any(rows != data["records"] for rows in [r["rows"]] + [w[0] for w in r["warm_exports"]]):
                        self.rows[-1]["note"] += f"; ROWS {r['rows']}/{[w[0] for w in r['warm_exports']]} != {data['records']} generated"
                        self.rows[-1]["met"] = False
                one, two = rates.get(f"{writer}:local[1]"), rates.get(f"{writer}:local[2]")
                if one and two and self.selected(f"{prefix}scaling"):
                    ratio = two / one
                    self.add(f"{prefix}scaling", decoder=dec["label"], figure=ratio, unit="x",
                             target=">= 1.7x", met=ratio >= 1.7,
                             note=f"{writer} writer: local[2] rows/s / local[1] rows/s, warm exports; first exports "
                                  f"{firsts.get('local[2]', 0) / max(firsts.get('local[1]', 0), 1e-9):.2f}x",
                             detail={"machine_cores": os.cpu_count(), "first_exports": firsts})

    def rss_summary(self) -> None:
        """The target: < 150 MB for any command. spark-export is left out: its work runs in a JVM and Spark's
        Python workers (their peaks are in its rows' notes); compact's input is sized by --records."""
        cmd_groups = {"rebuild-index", "verify-index", "dump-segment", "compact", "convert-format"}
        for dec in self.decoders:
            rows = [r for r in self.rows if r["group"] in cmd_groups and r["peak_rss_mb"] is not None
                    and (r["decoder"] or "").split(" ")[0] == dec["label"].split(" ")[0]]
            if not rows:
                continue
            worst = max(rows, key=lambda r: r["peak_rss_mb"])
            converted = any(r["group"] == "convert-format" for r in rows)
            mib = min(self.args.segment_mib, self.args.convert_mib) if converted else self.args.segment_mib
            note = f"worst: {worst['id']}; on {self.args.segment_mib:g} MiB segments"
            if converted and self.args.convert_mib != self.args.segment_mib:
                note += f" ({self.args.convert_mib:g} MiB converted)"
            if mib < 1024:
                note += " (the target is for 1 GiB: --full)"
            self.add("peak-rss", decoder=dec["label"], figure=worst["peak_rss_mb"], unit="MB",
                     target=f"< {RSS_TARGET_MB} MB", met=worst["peak_rss_mb"] < RSS_TARGET_MB, note=note,
                     detail={r["id"]: r["peak_rss_mb"] for r in rows})

    def run(self) -> None:
        self.setup_decoders()
        for bench in (self.bench_decode, self.bench_scan, self.bench_rebuild_index, self.bench_verify_index,
                      self.bench_dump_segment, self.bench_compact, self.bench_convert_format,
                      self.bench_spark_export):
            bench()
        self.rss_summary()


def _backend_label(dec: dict, result: dict) -> str:
    """The decoder the child actually ran (it reports decode.BACKEND), flagged when not the one asked for."""
    actual = result.get("backend") or dec["backend"]
    req = dec["requested"]
    return actual if (req is None or req == actual) else f"{actual} ({req} requested)"


def _keep_best(best: dict, key: object, res) -> None:
    """best[key]: the faster of it and this round's decode task `res` (a failed round only while no round has
    succeeded), with the faster ``records_list_seconds`` of the two (the object API's records() figure)."""
    prev = best.get(key)
    if prev is None or not (prev.ok and prev.result):
        best[key] = res
        return
    if not (res.ok and res.result):
        return
    fast, slow = (res, prev) if res.result["seconds"] < prev.result["seconds"] else (prev, res)
    a, b = fast.result.get("records_list_seconds"), slow.result.get("records_list_seconds")
    if a and b and b < a:
        fast.result["records_list_seconds"] = b
    best[key] = fast


def _digest_problem(digests: Dict[str, list]) -> str:
    """'' when every decoder saw the same records (and what the generator wrote), else what differs."""
    gen = digests.get("generator")
    first = None
    for name, d in digests.items():
        if name == "generator":
            continue
        if gen is not None and list(d[:4]) != list(gen[:4]):
            return f"DIGEST MISMATCH: {name} {d[:4]} vs generated {gen[:4]}"
        if first is None:
            first = (name, d)
        elif list(d) != list(first[1]):
            return f"DIGEST MISMATCH: {name} vs {first[0]}"
    return ""


def _records_per_second(r: dict) -> Optional[float]:
    for key in ("records_per_s", "records_per_second", "recordsPerSecond", "rate"):
        if isinstance(r.get(key), (int, float)):
            return float(r[key])
    records = next((r[k] for k in ("records", "records_in", "recordsIn", "size_records") if isinstance(r.get(k), int)),
                   None)
    seconds = next((r[k] for k in ("seconds", "elapsed", "wall_seconds") if isinstance(r.get(k), (int, float))), None)
    if records and seconds:
        return records / seconds
    return None


# ----------------------------------------------------------------------------- the table
def table(rows: List[dict]) -> str:
    header = ["benchmark", "decoder", "figure", "target", "met", "vs peers (kstore / peer)", "peak RSS", "note"]
    lines = []
    for r in rows:
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        peers = "; ".join(f"{name} {_short(v, r['unit'])} -> {r['ratios'].get(name, 0):.2f}x"
                          for name, v in r["peers"].items())
        lines.append([r["id"], r["decoder"] or "-", fmt_rate(r["figure"], r["unit"]), r["target"] or "-", met,
                      peers or "-", "-" if r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:.0f} MB", r["note"]])
    widths = [max(len(str(x[i])) for x in [header] + lines) for i in range(len(header) - 1)]
    out = []
    for i, line in enumerate([header] + lines):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(line, widths)) + "  " + str(line[-1]))
        if i == 0:
            out.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(out)


def machine_text(info: dict) -> str:
    peers = ", ".join(f"{k} {v}" for k, v in info["peers"].items() if v)
    decs = "; ".join(f"{d['requested'] or 'default'} -> {d['label']}" for d in info["decoders"])
    load = info.get("loadavg_start")
    return (f"machine: {info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
            f"{info['memory_gib']} GiB, {info['os']}\n"
            f"python: {info['python']}; kstore: {info['kstore']}; record decoder: {decs}\n"
            f"peers: {peers}; java: {info.get('java') or 'none'}\n"
            f"Kafka: {info.get('kafka_oracle') or 'not measured (no kafka-oracle)'}\n"
            f"load average at start: {', '.join(f'{x:.2f}' for x in load) if load else '?'}"
            f" (end: {', '.join(f'{x:.2f}' for x in info.get('loadavg_end') or [])})")


# ----------------------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="benchmarks: " + ", ".join(GROUPS),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, help="records per decode input (default 200000; --quick 2000)")
    ap.add_argument("--segment-mib", type=float,
                    help="size of the segments scanned, indexed and dumped, in MiB (default 512; --quick 1)")
    ap.add_argument("--convert-mib", type=float,
                    help="size of convert-format's v1 gzip input in MiB (default 128; --quick 1)")
    ap.add_argument("--dump-mib", type=float,
                    help="size of each dump-segment input (text, binary, mixed values) in MiB (default 64; "
                         "--quick 1): Kafka's dump-log prints about 0.1 M lines/s")
    ap.add_argument("--kafka-oracle", help="the kafka-oracle directory (Apache Kafka's tools, to measure against; "
                                           "default: $KSTORE_ORACLE or ../shared/kafka-oracle)")
    ap.add_argument("--no-kafka", action="store_true", help="do not measure Kafka itself")
    ap.add_argument("--full", action="store_true",
                    help="the issue's memory check: 1 GiB segments for every command (--segment-mib 1024 "
                         "--convert-mib 1024)")
    ap.add_argument("--spark-records", type=int, help="rows exported by spark-export (default 2000000)")
    ap.add_argument("--quick", action="store_true", help="tiny inputs and one run each: checks the suite works")
    ap.add_argument("--only",
                    help="comma-separated benchmarks or row ids (e.g. decode,scan or decode:v2-none-100B-x100)")
    ap.add_argument("--decoder", choices=["python", "native", "both"],
                    help="run kstore under this record decoder (KSTORE_DECODER in the children); "
                         "default: whichever kstore selects by itself")
    ap.add_argument("--json", type=Path, help="write every figure (and the machine) to this JSON file")
    ap.add_argument("--repeat", type=int, help="runs per command benchmark, best kept (default 3; --quick 1)")
    ap.add_argument("--budget", type=float, default=15.0,
                    help="stop repeating a command once its runs took this many seconds (default 15)")
    ap.add_argument("--kstore-src", help="benchmark the kstore_cli package in this directory "
                                         "(default: the installed kstore, else this source tree)")
    ap.add_argument("--dir", help="where to create the temp dir of inputs (default: $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs (their path is printed)")
    ap.add_argument("--profile", action="store_true",
                    help="also run each kstore benchmark once under cProfile (not timed) and print where the time goes")
    ap.add_argument("--list", action="store_true", help="list the benchmark and row names and exit")
    args = ap.parse_args(argv)
    q = args.quick
    args.records = args.records or (2_000 if q else 200_000)
    args.segment_mib = args.segment_mib or (1024 if args.full else 1 if q else 512)
    args.convert_mib = args.convert_mib or (1024 if args.full else 1 if q else 128)
    args.dump_mib = args.dump_mib or (1 if q else 64)
    args.spark_records = args.spark_records or (4_000 if q else 2_000_000)
    args.repeat = args.repeat or (1 if q else 3)
    if args.only:
        known = set(GROUPS) | set(row_ids())
        bad = [t for t in args.only.split(",") if t.strip() and not any(k == t.strip() or k.startswith(t.strip())
                                                                          for k in known)]
        if bad:
            ap.error(f"--only: unknown {', '.join(bad)} (see --list)")
    return args


def row_ids() -> List[str]:
    ids = [f"decode:{k.name}" for k in inputs.DECODE_KINDS]
    ids += [f"decode:{k.name}:columnar" for k in inputs.DECODE_KINDS if k.magic >= 2]
    ids += ["scan", "rebuild-index:16k", "rebuild-index:1k", "verify-index"]
    ids += [f"dump-segment:{v}" for v, _t in DUMP_VALUES]
    ids += ["compact",
            "convert-format", "convert-format:100B", "spark-export:core", "spark-export:local[1]", "spark-export:local[2]",
            "spark-export:scaling", "spark-export:arrow:local[1]", "spark-export:arrow:local[2]",
            "spark-export:arrow:scaling"]
    return ids


def resolve_kstore(args: argparse.Namespace) -> tuple:
    """(PYTHONPATH entry for the children or None, description): --kstore-src, else installed, else the tree."""
    if args.kstore_src:
        src = str(Path(args.kstore_src).resolve())
        return src, f"{src}/kstore_cli (--kstore-src)"
    installed = harness.find_installed_kstore()
    if installed:
        return None, f"{installed} (installed)"
    return str(ROOT), f"{ROOT}/kstore_cli (source tree, not installed)"


inputs = None  # bench/inputs.py, imported once kstore_cli is importable


def main(argv=None) -> int:
    global inputs
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--kstore-src")
    known, _ = pre.parse_known_args(argv)
    src, where = resolve_kstore(known)
    if src:
        sys.path.insert(0, src)
    import inputs as inputs_module

    inputs = inputs_module
    args = parse_args(argv)
    if args.list:
        print("\n".join(GROUPS + [i for i in row_ids() if i not in GROUPS]))
        return 0
    info = harness.machine_info()
    info["kstore"] = where
    oracle = None if args.no_kafka else harness.find_kafka_oracle(args.kafka_oracle)
    info["kafka_oracle"] = f"{oracle} (Apache Kafka 4.0.0-SNAPSHOT at 1eb7644, its own classes)" if oracle else None
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kstore-bench-", dir=args.dir))
    suite = Suite(args, work, src)
    started = time.perf_counter()
    interrupted = False
    try:
        suite.run()
    except KeyboardInterrupt:
        interrupted = True
        suite.log("interrupted: reporting what was measured")
    finally:
        if args.keep:
            suite.log(f"inputs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    info["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    info["decoders"] = [{"requested": d["requested"], "label": d["label"], "backend": d["backend"],
                         **d["startup"]} for d in suite.decoders]
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    print(machine_text(info))
    print(f"sizes: {args.records:,} records per decode input, {args.segment_mib:g} MiB segments, "
          f"{args.convert_mib:g} MiB to convert, "
          f"{args.spark_records:,} spark rows; {TS_NOTE}; total {time.perf_counter() - started:.0f} s")
    print()
    print(table(suite.rows))
    for row in suite.rows:
        if row["detail"].get("profile"):
            print(f"\nprofile of {row['id']} [{row['decoder']}] (cProfile, by own time):\n{row['detail']['profile']}")
    if args.json:
        doc = {"machine": info, "options": options, "inputs": suite.inputs, "rows": suite.rows,
               "seconds": round(time.perf_counter() - started, 1), "interrupted": interrupted}
        args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    failed = [r for r in suite.rows if r["figure"] is None and not r["note"].startswith("not available")]
    return 130 if interrupted else (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
