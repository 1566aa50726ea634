"""`kstore schemas` on a Schema Registry store topic of RECORDS records.

    python bench/schemas.py [--records 100000] [--keep DIR]

Input: `_schemas-0` written by kstore's batch builder, one record a batch as the registry's KafkaStore sends
them: Avro SCHEMA records (subjects of 1-10 versions, ~300 B schemas), with every 50th record a per-subject
CONFIG, every 97th a NOOP, every 200th a soft delete, every 500th a tombstone (a hard delete). Prints the
seconds and records/s of the whole command (`kstore schemas --json > /dev/null`, the interpreter's start-up,
`kstore --version`, subtracted) and of the replay alone (load_schema_store in this process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kstore_cli.cluster.schema_registry import load_schema_store  # noqa: E402
from kstore_cli.record.builder import RecordSpec, build_v2_batch  # noqa: E402


def _j(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _schema(subject: int, version: int) -> str:
    fields = [{"name": f"f{i}", "type": "long"} for i in range(version + 3)]
    return json.dumps({"type": "record", "name": f"R{subject}", "namespace": "com.bench", "fields": fields},
                      separators=(",", ":"))


def records(n: int):
    """(key, value) pairs of the store topic, n of them."""
    next_id, latest = 1, {}
    for i in range(n):
        subject = i % max(n // 6, 1)
        name = f"topic-{subject}-value"
        if i % 97 == 96:
            yield _j({"keytype": "NOOP", "magic": 0}), None
        elif i % 50 == 49:
            yield (_j({"keytype": "CONFIG", "subject": name, "magic": 0}),
                   _j({"subject": name, "compatibilityLevel": "FULL"}))
        elif i % 500 == 499 and subject in latest:
            yield _j({"keytype": "SCHEMA", "subject": name, "version": latest[subject], "magic": 1}), None
        elif i % 200 == 199 and subject in latest:
            v = latest[subject]
            yield (_j({"keytype": "SCHEMA", "subject": name, "version": v, "magic": 1}),
                   _j({"subject": name, "version": v, "id": next_id - 1, "schemaType": "AVRO",
                       "schema": _schema(subject, v), "deleted": True}))
        else:
            v = latest.get(subject, 0) + 1
            latest[subject] = v
            yield (_j({"keytype": "SCHEMA", "subject": name, "version": v, "magic": 1}),
                   _j({"subject": name, "version": v, "id": next_id, "schemaType": "AVRO",
                       "schema": _schema(subject, v), "deleted": False}))
            next_id += 1


def write_store(directory: Path, n: int) -> int:
    part = directory / "_schemas-0"
    part.mkdir(parents=True)
    with open(part / "00000000000000000000.log", "wb") as f:
        for offset, (key, value) in enumerate(records(n)):
            f.write(build_v2_batch([RecordSpec(offset, 1_700_000_000_000 + offset, key, value)]))
    return (part / "00000000000000000000.log").stat().st_size


def _wall(argv) -> float:
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, default=None, help="write the input here and keep it")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="kstore-bench-schemas-"))
    size = write_store(work, args.records)
    kstore = [sys.executable, "-m", "kstore_cli"]
    startup = min(_wall(kstore + ["--version"]) for _ in range(3))
    whole = min(_wall(kstore + ["schemas", str(work), "--json"]) for _ in range(3)) - startup
    t = time.perf_counter()
    store = load_schema_store([str(work)])
    replay = time.perf_counter() - t
    print(f"input: {args.records} records, {size} bytes, {len(store.versions)} versions, {len(store.ids)} ids, "
          f"{len(store.problems)} problems")
    print(f"kstore schemas --json: {whole:.3f} s ({args.records / whole:,.0f} records/s; start-up {startup:.3f} s "
          "subtracted)")
    print(f"replay alone: {replay:.3f} s ({args.records / replay:,.0f} records/s)")
    if args.keep is None:
        import shutil
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
