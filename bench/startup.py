"""How fast kstore starts: `kstore --version` and `kstore dump-segment --help` against a bare
`python -c "import click"` (issue 17's target: within 1.5x, bytecode cached).

    python bench/startup.py              # best of 20 runs each, ratios printed
    python bench/startup.py -n 50 --check 1.5   # exit 1 when a ratio is above 1.5
    python bench/startup.py --venv .venv  # an installed kstore: its `kstore` script and its python

Each figure is the best wall time, and the least CPU time, of N fresh interpreters (after one
untimed run that writes the bytecode caches), so noise from other processes only ever makes a figure
worse, never better; --check judges a command by the better of its two ratios.
Without --venv kstore runs as `python -m kstore_cli` from this checkout (what the installed `kstore`
script does, plus runpy's few milliseconds, which only count against kstore).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

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


def best_of(argv: List[str], runs: int) -> Tuple[float, float]:
    """The fastest wall time and the least CPU time (user + system, from wait4) in seconds of `runs`
    runs of `argv`, after one untimed warm-up run. CPU time is the steadier figure on a shared machine."""
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, check=True)
    wall = cpu = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = min(wall, time.perf_counter() - start)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(argv)} failed")
        cpu = min(cpu, usage.ru_utime + usage.ru_stime)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=20, help="timed runs per command (best is kept)")
    parser.add_argument("--check", type=float, metavar="RATIO",
                        help="exit 1 when `kstore --version` or `dump-segment --help` is slower than RATIO x baseline")
    parser.add_argument("--venv", help="time the kstore installed in this virtual environment")
    args = parser.parse_args()
    commands = cases(args.venv)

    # Interleave the cases round by round so a burst of load elsewhere hits all of them alike.
    wall = {name: float("inf") for name in commands}
    cpu = dict(wall)
    rounds = max(1, args.runs // 5)
    for _ in range(rounds):
        for name, argv in commands.items():
            w, c = best_of(argv, max(1, args.runs // rounds))
            wall[name], cpu[name] = min(wall[name], w), min(cpu[name], c)
    print(f"best of {args.runs} runs each, {commands[BASELINE][0]}")
    print(f"  {'':32s} {'wall':>9s} {'ratio':>6s} {'cpu':>9s} {'ratio':>6s}")
    for name in commands:
        print(f"  {name:32s} {wall[name] * 1000:6.1f} ms {wall[name] / wall[BASELINE]:5.2f}x "
              f"{cpu[name] * 1000:6.1f} ms {cpu[name] / cpu[BASELINE]:5.2f}x")
    worst = max(min(wall[name] / wall[BASELINE], cpu[name] / cpu[BASELINE]) for name in TARGETED)
    if args.check is not None and worst > args.check:
        print(f"slower than {args.check}x the baseline: {worst:.2f}x")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
