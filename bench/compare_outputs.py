"""Every command's text and JSON output on the bundled data, from two checkouts: this one and --base REV.

    python bench/compare_outputs.py --base dde8494       # the tree before issue 30's refactor
    python bench/compare_outputs.py --base dde8494 --show 3   # print the first 3 differing cases whole
    python bench/compare_outputs.py --base dde8494 --same-but-key-style   # JSON equal once keys are snake_case

Each case runs `python -m kstore_cli ARGS` from a `git archive` of REV and from this working tree, with the
pure-Python twins on both sides (the native ones are held equal to them by the twin tests), in a pipe (no
terminal), on a fresh copy of its input at the same path each time (so paths in the output agree). Mutating
commands run with --dry-run. Printed: one line per case (`same` or `DIFFERS: stdout/stderr/exit`), then the
counts; exit 1 when a case differs, so a refactor that must not change output can be checked in one command.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")
LOGS = os.path.join(FIX, "kafka-corpus", "logs")
CRASHED = os.path.join(FIX, "kafka-corpus", "logs-crashed")
KRAFT = os.path.join(FIX, "kraft-cluster", "full")
NOW = "--now=1900000000000"


def cases() -> Dict[str, Tuple[str, List[str]]]:
    """name -> (input dir copied to DATA, argv with DATA standing for the copy)."""
    seg = "DATA/v2-gzip-0/00000000000000000000"
    out: Dict[str, Tuple[str, List[str]]] = {
        "dump-log": (LOGS, ["dump-segment", "--deep-iteration", "--print-data-log", seg + ".log"]),
        "dump-index": (LOGS, ["dump-segment", seg + ".index"]),
        "dump-txn": (LOGS, ["dump-segment", "--deep-iteration", "--transaction-log-decoder",
                            "DATA/__transaction_state-0/00000000000000000000.log"]),
        "dump-offsets": (LOGS, ["dump-segment", "--deep-iteration", "--offsets-decoder",
                                "DATA/__consumer_offsets-0/00000000000000000000.log"]),
        "dump-metadata": (KRAFT, ["dump-segment", "--cluster-metadata-decoder",
                                  "DATA/__cluster_metadata-0/00000000000000000000.log"]),
        "verify-index": (LOGS, ["verify-index", "DATA"]),
        "doctor": (LOGS, ["doctor", "DATA"]),
        "doctor-crashed": (CRASHED, ["doctor", "DATA"]),
        "inspect": (LOGS, ["inspect", "DATA"]),
        "find": (LOGS, ["find", "DATA/v2-gzip-0", "--offset", "3"]),
        "metadata": (KRAFT, ["metadata", "DATA/__cluster_metadata-0"]),
        "groups": (LOGS, ["groups", "DATA", "--offsets-partitions", "1"]),
        "transactions": (LOGS, ["transactions", "DATA", "--transaction-partitions", "1", NOW]),
        "retain": (LOGS, ["retain", "DATA", "--dry-run", "--retention-ms", "1", NOW]),
        "compact": (LOGS, ["compact", "DATA/v2-compact-0", "--dry-run", "--policy", "compact", NOW]),
        "recover": (CRASHED, ["recover", "DATA", "--dry-run"]),
        "rebuild-index": (CRASHED, ["rebuild-index", "DATA", "--dry-run"]),
        "salvage": (LOGS, ["salvage", "DATA/v2-none-0", "--dry-run"]),
        "convert-format": (LOGS, ["convert-format", "DATA/v2-none-0", "--to-magic", "1", "--dry-run"]),
    }
    for name in [n for n in out if not n.startswith("dump-") or n in ("dump-log", "dump-offsets")]:
        src, argv = out[name]
        out[name + " --json"] = (src, [*argv, "--json"])
    return out


def _snake(value):
    """`value` (parsed JSON) with every key in snake_case: fooBar -> foo_bar."""
    if isinstance(value, dict):
        return {re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), k): _snake(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_snake(v) for v in value]
    return value


def key_style_only(before: str, after: str) -> bool:
    """Whether two JSON Lines outputs are equal once both sides' keys are snake_case."""
    try:
        return [_snake(json.loads(x)) for x in before.splitlines()] == [_snake(json.loads(x)) for x in after.splitlines()]
    except ValueError:
        return False


def run(tree: str, src: str, argv: List[str], work: str) -> Tuple[str, str, int]:
    data = os.path.join(work, "data")
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(src, data, symlinks=True)
    args = [a.replace("DATA", data) for a in argv]
    env = dict(os.environ, KSTORE_DECODER="python", PYTHONPATH=tree, COLUMNS="200", NO_COLOR="1")
    done = subprocess.run([sys.executable, "-m", "kstore_cli", *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)
    return done.stdout, done.stderr, done.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the git revision to compare with")
    ap.add_argument("--show", type=int, default=0, help="print a diff of the first N differing cases")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("--same-but-key-style", action="store_true",
                    help="count a --json case whose only difference is the key style (camelCase vs snake_case) as same")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kstore-cmp-") as tmp:
        base = os.path.join(tmp, "base")
        os.mkdir(base)
        archive = subprocess.run(["git", "-C", ROOT, "archive", opts.base], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        differ, shown = [], 0
        for name, (src, argv) in cases().items():
            if opts.k not in name:
                continue
            before, after = run(base, src, argv, tmp), run(ROOT, src, argv, tmp)
            parts = [what for what, b, a in zip(("stdout", "stderr", "exit"), before, after) if b != a]
            keys_only = (opts.same_but_key_style and parts == ["stdout"] and name.endswith("--json")
                         and key_style_only(before[0], after[0]))
            if keys_only:
                parts = []
            verdict = "same but the key style" if keys_only else "same" if not parts else "DIFFERS: " + "/".join(parts)
            print(f"{name:28} {verdict} (exit {after[2]})")
            if parts:
                differ.append(name)
                if shown < opts.show:
                    shown += 1
                    for what, b, a in zip(("stdout", "stderr"), before, after):
                        sys.stdout.writelines(difflib.unified_diff(str(b).splitlines(True), str(a).splitlines(True),
                                                                   f"{opts.base}:{what}", f"HEAD:{what}", n=1))
        print(f"{len(differ)} of {len([n for n in cases() if opts.k in n])} cases differ"
              + (f": {', '.join(differ)}" if differ else ""))
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
