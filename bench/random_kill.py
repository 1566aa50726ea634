"""Long randomized-kill run: the mutating commands SIGKILLed at random wall-clock times, every state
loaded by Kafka's own LogLoader, every rerun compared with an uninterrupted run.

    python bench/random_kill.py                       # 290 kills (60 compact, 50 each of three others, 40 merge,
                                                      # 40 recover --jobs)
    python bench/random_kill.py --kills 400 --seed 7  # spread over the same six commands
    python bench/random_kill.py --json out.json

The scenarios are tests/test_crash_matrix.py's (its realistic data dirs and command lines):
`compact` with four groups of two or three segments each, `convert-format --in-place` (v1 gzip to
v2 zstd), `retain` (time rule), `rebuild-index --truncate` (a CRC-damaged tail), `merge` (two brokers'
copies, one diverged, into an empty output dir with `--keep-diverged`: all or nothing) and `recover --jobs 2`
(five partitions, four cut, in two worker processes), of which the parent alone is killed: its workers
must die with it (within 2 s, else a failure). Per kill, on a
fresh copy: a real `python -m kstore_cli` process, held at its first file operation, is let go and
SIGKILLed after a random delay drawn below the duration of an uninterrupted run (measured first);
then, as in the crash matrix,

1. the directory as Kafka's LogLoader would see it (leftovers resolved) loads, its segments do not
   overlap, no checkpoint is past the log end, and its records are the original ones with some left
   out, among them every record the command keeps;
2. the state is kept for Kafka's loader;
3. the command is rerun and must leave exactly the uninterrupted run's files (names and bytes).

At the end every kept state is loaded by Kafka's LogLoader (kafka-oracle load-log), clean and
unclean (only unclean while the input's own damage is still there), a few hundred per JVM: no
exception, no truncation but of that damage, Kafka's log end and records exactly those kstore reads
there -- so every record Kafka serves is there exactly once. The uninterrupted end states (which
every rerun equals) are loaded too. Prints the kills (and how many came after the run's end), the
states and loads checked, every failure and the time; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Share of the kills per scenario (compact, with its multi-segment groups, gets the most).
SHARES = {"compact-multi-segment-groups": 60, "convert-v1gzip-v2zstd": 50, "retain-time": 50,
          "rebuild-index-truncate": 50,
          "merge": 40,
          "recover-jobs": 40}  # the parent alone killed, not its workers
CHUNK = 150  # kept states per JVM


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=sum(SHARES.values()),
                        help=f"total kills that land mid-run [{sum(SHARES.values())}]")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--dir", help="work dir [a temp dir, removed]")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    os.environ.setdefault("KSTORE_ORACLE", str(ROOT.parent / "shared" / "kafka-oracle"))
    from tests import test_crash_matrix as m
    from tests.oracle import find_oracle

    oracle = find_oracle()
    if oracle is None:
        print("kafka-oracle not found (set KSTORE_ORACLE) or no java: Kafka's loader is the judge here", file=sys.stderr)
        return 2
    work_root = Path(args.dir or tempfile.mkdtemp(prefix="kstore-random-kill-"))
    work_root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    total_share = sum(SHARES.values())
    plan = {name: max(1, round(args.kills * share / total_share)) for name, share in SHARES.items()}
    failures: List[str] = []
    cases = []
    figures: Dict[str, dict] = {}
    try:
        for name, kills in plan.items():
            sc = next(s for s in m.SCENARIOS if s.name == name)
            rng = random.Random(f"{args.seed}-{name}")
            base = work_root / name
            template = base / "template"
            sc.setup(template / "data")
            ref = m._reference(sc, template, base)
            cases.append(m.kafka_case(f"{sc}: uninterrupted", base / "reference" / "data", base / "kept-reference",
                                      base / "scratch"))
            timing = base / "timing"
            shutil.copytree(template, timing)
            killed, duration = m.kill_at_random(sc.argv(timing / "data"), base / "flags", 120.0)
            if killed or m.tree_bytes(timing / "data") != ref.data:
                failures.append(f"{sc}: the uninterrupted subprocess run differs from the in-process reference")
            shutil.rmtree(timing)
            counted = {"kills_asked": kills, "killed": 0, "after_end": 0, "run_ms": round(duration * 1000, 1),
                       "file_operations": ref.ops}
            t0 = time.monotonic()
            i = 0
            # Kills that come after the run's end (its duration varies with the load) do not count:
            # go on until `kills` real ones, within a bound.
            while counted["killed"] < kills and i < 3 * kills:
                i += 1
                delay = rng.uniform(0, duration)
                work = base / f"kill-{i}"
                shutil.copytree(template, work)
                label = f"{sc}: kill {i}, {delay * 1000:.2f} ms into the run (seed {args.seed})"
                try:
                    killed, _ = m.kill_at_random(sc.argv(work / "data"), base / "flags", delay)
                except AssertionError as exc:  # a worker outlived its killed parent (killed since)
                    failures.append(f"{label}: {exc}")
                    killed = True
                counted["killed" if killed else "after_end"] += 1
                try:
                    m._check_crashed(sc, 0, work, template, ref, base / "view")
                except AssertionError as exc:
                    failures.append(f"{label}: {exc}")
                cases.append(m.kafka_case(label, work / "data", base / f"kept-{i}", base / "scratch"))
                try:
                    m._check_rerun(sc, 0, work, ref)
                except AssertionError as exc:
                    failures.append(f"{label}: rerun: {exc}")
                shutil.rmtree(work)
            counted["seconds"] = round(time.monotonic() - t0, 1)
            figures[name] = counted
            print(f"{name}: {counted['killed']} killed + {counted['after_end']} after the end of a "
                  f"{counted['run_ms']} ms run ({ref.ops} file operations), {counted['seconds']} s", flush=True)
        t0 = time.monotonic()
        loads = 0
        for first in range(0, len(cases), CHUNK):
            problems, n = m.kafka_load_problems(oracle, cases[first:first + CHUNK])
            failures.extend(problems)
            loads += n
        oracle_s = time.monotonic() - t0
    finally:
        if not args.dir:
            shutil.rmtree(work_root, ignore_errors=True)
    summary = {
        "seed": args.seed,
        "kills_asked": sum(f["kills_asked"] for f in figures.values()),
        "killed_mid_run": sum(f["killed"] for f in figures.values()),
        "after_end": sum(f["after_end"] for f in figures.values()),
        "states_checked_by_kafka": len(cases),
        "kafka_loads": loads,
        "jvm_starts": oracle.jvm_starts,
        "failures": len(failures),
        "oracle_seconds": round(oracle_s, 1),
        "seconds": round(time.monotonic() - started, 1),
        "per_command": figures,
    }
    for failure in failures:
        print("FAIL " + failure)
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({**summary, "failure_lines": failures}, indent=2) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
