"""Regenerates fixtures/kraft-metadata/: KRaft metadata and coordinator logs written by kstore's builders
(tests/parsers/metadata_factory.py, tests/parsers/test_coordinator_dump_oracle.py) and what Kafka's own
``dump-log`` (../shared/kafka-oracle) prints for them. Run from the repository root::

    python -m tests.parsers.make_kraft_golden

tests/parsers/test_kraft_golden.py then checks ``kstore dump-segment`` against the stored output with no
Kafka at hand (the live comparison is tests/parsers/test_*_dump_oracle.py).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tests.oracle import find_oracle
from tests.parsers.metadata_factory import write_metadata_log, write_snapshot
from tests.parsers import test_coordinator_dump_oracle as coord

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "kraft-metadata"

#: case name -> (file, dump-log options)
CASES = {
    "metadata-log": ("__cluster_metadata-0/00000000000000000000.log", ["--cluster-metadata-decoder"]),
    "metadata-snapshot": ("__cluster_metadata-0/00000000000000000500-0000000003.checkpoint",
                          ["--cluster-metadata-decoder"]),
    "offsets": ("__consumer_offsets-0/00000000000000000000.log", ["--offsets-decoder"]),
    "share-group-state": ("__share_group_state-0/00000000000000000000.log", ["--share-group-state-decoder"]),
    "transaction-log": ("__transaction_state-0/00000000000000000000.log", ["--transaction-log-decoder"]),
    "remote-log-metadata": ("__remote_log_metadata-0/00000000000000000000.log", ["--remote-log-metadata-decoder"]),
}


def main() -> int:
    oracle = find_oracle()
    if oracle is None:
        print("make_kraft_golden: kafka-oracle not found (set KSTORE_ORACLE)", file=sys.stderr)
        return 1
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    write_metadata_log(OUT)
    write_snapshot(OUT)
    coord._write(OUT, "__consumer_offsets", coord.coordinator_pairs(coord.GROUP_COORDINATOR_RECORDS)
                 + coord.consumer_group_metadata() + coord.null_tagged_struct()
                 + coord.skipped_pairs(coord.GROUP_COORDINATOR_RECORDS))
    coord._write(OUT, "__share_group_state", coord.coordinator_pairs(coord.SHARE_COORDINATOR_RECORDS)
                 + coord.skipped_pairs(coord.SHARE_COORDINATOR_RECORDS))
    coord._write(OUT, "__transaction_state", coord.transaction_pairs())
    coord._write(OUT, "__remote_log_metadata", coord.remote_pairs())
    # dump-log prints the path as given: run it on absolute paths and store them relative to OUT
    results = oracle.run_many([("dump-log", [*opts, "--files", str(OUT / f)]) for f, opts in CASES.values()])
    manifest = {}
    for (name, (f, opts)), result in zip(CASES.items(), results):
        if result.rc != 0:
            print(f"make_kraft_golden: {name}: dump-log exit {result.rc}", file=sys.stderr)
            return 1
        (OUT / f"{name}.stdout").write_text(result.stdout.replace(str(OUT) + "/", "<DIR>/"), encoding="utf-8")
        manifest[name] = {"file": f, "options": opts}
    (OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
