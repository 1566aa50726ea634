"""Long mutation-fuzzing run of the segment core and the read-only commands, with the mutators of
tests/record/test_fuzz.py, per record decoder.

    python bench/fuzz_long.py 100000                      # 100k inputs per decoder, every file kind
    python bench/fuzz_long.py 100000 --decoder python     # only the pure-Python decoder
    python bench/fuzz_long.py 50000 --kind log --seed 7 --no-memory

Each decoder runs in child processes (KSTORE_DECODER=native / python), one per file kind, so that
a crash of native code (a segfault) is a reported failure -- the input that caused it is named --
and the run goes on from the next input. Prints how many inputs were tried per kind and decoder,
how many read-only command runs (dump-segment, verify-index, inspect, find, rebuild-index
--dry-run over every --cli-every-th input), and every failure: a non-KstoreError exception, a
documented exit code not met, a hang past the per-input budget, a peak allocation over the bound,
or a dead child. Exits 1 when there was any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Share of the inputs per kind (segments get most: they have the most code behind them).
SHARES = {"log": 0.6, "index": 0.07, "timeindex": 0.07, "txnindex": 0.06, "snapshot": 0.08, "checkpoint": 0.12}
KINDS = tuple(SHARES)


def child(args) -> int:
    """One kind, inputs [start, n), in this process: FAIL lines as they come, then a JSON summary."""
    from tests.record import test_fuzz as fz  # noqa: E402  (the same mutators and harness as CI)

    progress_fd = os.open(args.progress, os.O_WRONLY | os.O_CREAT, 0o644)

    def progress(i: int) -> None:
        os.pwrite(progress_fd, b"%020d" % i, 0)

    shown = 0

    class Streaming(list):
        def append(self, failure) -> None:  # print as found: a later crash must not lose them
            nonlocal shown
            super().append(failure)
            if shown < args.show:
                print(f"FAIL {failure}", flush=True)
                shown += 1

    with tempfile.TemporaryDirectory(prefix="kstore-fuzz-") as tmp:
        partial = fz.Report()
        partial.failures = Streaming()
        fz.fuzz(args.child, args.seed, args.n, Path(tmp), check_memory=not args.no_memory,
                cli_every=args.cli_every, start=args.start, progress=progress, report=partial)
    print(json.dumps({"tried": partial.tried, "failures": len(partial.failures), "cli_runs": partial.cli_runs,
                      "max_seconds": partial.max_seconds, "max_peak": partial.max_peak,
                      "max_peak_ratio": partial.max_peak_ratio, "backend": fz.BACKEND}), flush=True)
    return 0


def run_kind(backend: str, kind: str, n: int, args, progress_file: Path) -> Dict:
    """Run one kind under one decoder in child processes, restarting after a crash."""
    total = {"tried": 0, "failures": 0, "cli_runs": 0, "max_seconds": 0.0, "max_peak": 0, "max_peak_ratio": 0.0,
             "crashes": 0, "backend": None}
    start = 0
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if backend != "default":
        env["KSTORE_DECODER"] = backend
    while start < n:
        progress_file.write_bytes(b"%020d" % start)
        cmd = [sys.executable, str(Path(__file__).resolve()), str(n), "--child", kind, "--start", str(start),
               "--seed", str(args.seed), "--cli-every", str(args.cli_every), "--progress", str(progress_file),
               "--show", str(args.show)]
        if args.no_memory:
            cmd.append("--no-memory")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        summary = None
        for line in proc.stdout:
            if line.startswith("FAIL "):
                print(f"  [{backend}] {line.rstrip()}", flush=True)
            elif line.startswith("{"):
                summary = json.loads(line)
        err = proc.stderr.read()
        proc.wait()
        if summary is not None and proc.returncode == 0:
            for key in ("tried", "failures", "cli_runs"):
                total[key] += summary[key]
            for key in ("max_seconds", "max_peak", "max_peak_ratio"):
                total[key] = max(total[key], summary[key])
            total["backend"] = summary["backend"]
            break
        # The child died (a signal from native code, or an import error): name the input, go on after it.
        at = int(progress_file.read_bytes() or b"0")
        how = (f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0
               else f"exit {proc.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}")
        print(f"  [{backend}] FAIL {kind} #{at} (seed {args.seed}): the child died, {how}", flush=True)
        total["tried"] += at - start + 1
        total["failures"] += 1
        total["crashes"] += 1
        if proc.returncode > 0 and at == start:  # not an input's fault (e.g. no native extension)
            total["tried"] -= 1
            break
        start = at + 1
    return total


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, help="number of inputs in total, per decoder")
    parser.add_argument("--kind", choices=KINDS, action="append", help="only these kinds (repeatable)")
    parser.add_argument("--seed", type=int, default=1, help="RNG seed (CI uses 20240601)")
    parser.add_argument("--decoder", choices=("both", "native", "python", "default"), default="both",
                        help="record decoder(s) to fuzz (KSTORE_DECODER); default: both")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc bound (about 2x faster)")
    parser.add_argument("--cli-every", type=int, default=12, help="also run the read-only commands over every "
                                                                  "N-th input (0: never)")
    parser.add_argument("--show", type=int, default=50, help="failures to print per kind")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--progress", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.n = int(args.n)
        return child(args)

    kinds = args.kind or list(KINDS)
    total_share = sum(SHARES[k] for k in kinds)
    backends: List[str] = ["native", "python"] if args.decoder == "both" else [args.decoder]
    failures = 0
    started = time.perf_counter()
    lines = []
    with tempfile.TemporaryDirectory(prefix="kstore-fuzz-progress-") as tmp:
        for backend in backends:
            tried = cli_runs = 0
            t_backend = time.perf_counter()
            for kind in kinds:
                n = max(1, round(args.n * SHARES[kind] / total_share))
                t0 = time.perf_counter()
                r = run_kind(backend, kind, n, args, Path(tmp) / f"{backend}-{kind}.progress")
                tried += r["tried"]
                cli_runs += r["cli_runs"]
                failures += r["failures"]
                print(f"{backend:7} {kind:10} tried {r['tried']:7d}  command runs {r['cli_runs']:6d}  "
                      f"failures {r['failures']:4d}  {time.perf_counter() - t0:7.1f} s  slowest "
                      f"{r['max_seconds'] * 1000:7.1f} ms  peak {r['max_peak']:9d} B ({r['max_peak_ratio']:.0%} of bound)"
                      + (f"  [decoder in use: {r['backend']}]" if r["backend"] and r["backend"] != backend else ""),
                      flush=True)
            lines.append(f"{backend}: tried {tried} inputs ({cli_runs} command runs) in "
                         f"{time.perf_counter() - t_backend:.1f} s")
    for line in lines:
        print(line)
    print(f"total: {failures} failures in {time.perf_counter() - started:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
