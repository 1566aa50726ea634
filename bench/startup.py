"""How fast kstore starts: `kstore --version` and `kstore dump-segment --help` against a bare
`python -c "import click"` (issue 17's target: within 1.5x, bytecode cached).

    python bench/startup.py              # best of 20 runs each, ratios printed
    python bench/startup.py -n 50 --check 1.5   # exit 1 when a ratio is above 1.5
    python bench/startup.py --venv .venv  # an installed kstore: its `kstore` script and its python

Each figure is the best wall time of N fresh interpreters (after one untimed run that writes the
bytecode caches), so noise from other processes only ever makes a figure worse, never better.
Without --venv kstore runs as `python -m kstore_cli` from this checkout (what the installed `kstore`
script does, plus runpy's few milliseconds, which only count against kstore).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def cases(venv: Optional[str]) -> Dict[str, List[str]]:
    """The timed command lines: the baseline first."""
    python = os.path.join(venv, "bin", "python") if venv else sys.executable
    kstore = [os.path.join(venv, "bin", "kstore")] if venv else [python, "-m", "kstore_cli"]
    return {
        "python -c 'import click'": [python, "-c", "import click"],
        "kstore --version": [*kstore, "--version"],
        "kstore dump-segment --help": [*kstore, "dump-segment", "--help"],
        "kstore --help": [*kstore, "--help"],
    }


BASELINE = "python -c 'import click'"
#: The two commands the target is about (`kstore --help` is shown for information).
TARGETED = ("kstore --version", "kstore dump-segment --help")


def best_of(argv: List[str], runs: int) -> float:
    """The fastest of `runs` wall times (seconds) of `argv`, after one untimed warm-up run."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="")
    env.pop("PYTHONDONTWRITEBYTECODE")
    subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="timed runs per command (best is kept)")
    parser.add_argument("--check", type=float, metavar="RATIO",
                        help="exit 1 when `kstore --version` or `dump-segment --help` is slower than RATIO x baseline")
    parser.add_argument("--venv", help="time the kstore installed in this virtual environment")
    args = parser.parse_args()
    commands = cases(args.venv)

    # Interleave the cases round by round so a burst of load elsewhere hits all of them alike.
    times = {name: float("inf") for name in commands}
    rounds = max(1, args.runs // 5)
    for _ in range(rounds):
        for name, argv in commands.items():
            times[name] = min(times[name], best_of(argv, max(1, args.runs // rounds)))
    base = times[BASELINE]
    print(f"best of {args.runs} runs each, {commands[BASELINE][0]}")
    for name, seconds in times.items():
        print(f"  {name:32s} {seconds * 1000:7.1f} ms   {seconds / base:4.2f}x")
    worst = max(times[name] / base for name in TARGETED)
    if args.check is not None and worst > args.check:
        print(f"slower than {args.check}x the baseline: {worst:.2f}x")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
