"""`kstore schemas` on a Schema Registry store topic of RECORDS records, and spark-export's decoded columns
beside the raw export on the same data.

    python bench/schemas.py [--records 100000] [--keep DIR] [--export-records 300000] [--spark]

The export part: a topic of EXPORT_RECORDS Avro values (KafkaAvroSerializer's bytes, a 10-field record with a
timestamp-millis, a decimal, a nullable string and an enum; an evolved schema: half written with v1, half with
v2, read as v2), 500 records a batch, lz4; the arrow writer's tasks run in this process, one core: raw
(binary) and --value-format avro, rows per CPU second each (the best of 5) and their ratio (the goal is >= 0.5).

Input: `_schemas-0` written by kstore's batch builder, one record a batch as the registry's KafkaStore sends
them: Avro SCHEMA records (subjects of 1-10 versions, ~300 B schemas), with every 50th record a per-subject
CONFIG, every 97th a NOOP, every 200th a soft delete, every 500th a tombstone (a hard delete). Prints the
seconds and records/s of the whole command (`kstore schemas --json > /dev/null`, the interpreter's start-up,
`kstore --version`, subtracted) and of the replay alone (load_schema_store in this process).
"""

from __future__ import annotations

import argparse
import json
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


_FIELDS = [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
           {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
           {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
           {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
           {"name": "qty", "type": "int"}, {"name": "price", "type": "double"},
           {"name": "note", "type": ["null", "string"], "default": None},
           {"name": "flag", "type": "boolean"}]
_ORDER_V1 = {"type": "record", "name": "Order", "namespace": "bench", "fields": _FIELDS}
_ORDER_V2 = {"type": "record", "name": "Order", "namespace": "bench",
             "fields": _FIELDS + [{"name": "channel", "type": "string", "default": "web"}]}


def write_export_input(directory: Path, n: int) -> None:
    """`_schemas-0` with orders-value v1 and v2, and `orders-0` of n Avro values (half v1, half v2)."""
    import datetime
    import decimal
    import io
    import struct

    import fastavro

    from kstore_cli.record.builder import build_v2_batch

    store = directory / "_schemas-0"
    store.mkdir(parents=True)
    regs = [(_j({"keytype": "SCHEMA", "subject": "orders-value", "version": v, "magic": 1}),
             _j({"subject": "orders-value", "version": v, "id": v, "schemaType": "AVRO",
                 "schema": json.dumps(s), "deleted": False})) for v, s in ((1, _ORDER_V1), (2, _ORDER_V2))]
    (store / "00000000000000000000.log").write_bytes(b"".join(
        build_v2_batch([RecordSpec(i, 1_700_000_000_000, k, v)]) for i, (k, v) in enumerate(regs)))
    parsed = {1: fastavro.parse_schema(_ORDER_V1), 2: fastavro.parse_schema(_ORDER_V2)}
    at = datetime.datetime(2026, 11, 28, tzinfo=datetime.timezone.utc)
    (directory / "orders-0").mkdir()
    with open(directory / "orders-0" / "00000000000000000000.log", "wb") as f:
        for base in range(0, n, 500):
            specs = []
            for i in range(base, min(n, base + 500)):
                sid = 1 if i < n // 2 else 2
                datum = {"id": i, "customer": f"customer-{i % 977}", "amount": decimal.Decimal(i % 10000) / 100,
                         "at": at, "status": "PAID", "qty": i % 7, "price": i * 0.5,
                         "note": None if i % 3 else "gift", "flag": bool(i & 1), "channel": "app"}
                out = io.BytesIO()
                fastavro.schemaless_writer(out, parsed[sid], datum)
                specs.append(RecordSpec(i, 1_700_000_000_000 + i, str(i).encode(),
                                        b"\x00" + struct.pack(">i", sid) + out.getvalue()))
            f.write(build_v2_batch(specs, codec=3))  # lz4


def export_rates(directory: Path, n: int) -> None:
    """Rows/s of the arrow writer's tasks, in this process (one core), raw and decoded."""
    import shutil as _shutil

    from kstore_cli.spark.export import ExportRequest
    from kstore_cli.spark.write import WriteJob, write_task

    rates = {}
    for fmt in ("binary", "avro"):
        out = directory.parent / f"out-{fmt}"
        request = ExportRequest([str(directory)], str(out), topics="orders", writer="arrow", value_format=fmt)
        plan = request.validate()
        job = WriteJob(str(out), "bench", False, False, "topic,partition", "snappy", None, "fail",
                       getattr(request, "decoding", None))
        best = None
        for _ in range(5):  # CPU seconds of this process (all its threads): per core, whatever else runs
            t = time.process_time()
            rows = sum(w["rows"] for i, task in enumerate(plan.tasks) for w in write_task(job, i, task))
            best = min(best or 1e9, time.process_time() - t)
            _shutil.rmtree(out)
        assert rows == n, rows
        rates[fmt] = n / best
        print(f"spark-export tasks, --value-format {fmt}: {best:.3f} CPU s, {rates[fmt]:,.0f} rows/s per core")
    print(f"decoded/raw: {rates['avro'] / rates['binary']:.2f} (goal >= 0.5)")


def spark_rates(directory: Path, n: int) -> None:
    """The same through spark-export on a local[1] session (one core; the session's start-up not counted)."""
    import shutil as _shutil

    from kstore_cli.spark.export import ExportRequest, export_with
    from kstore_cli.spark.session import build_session

    spark = build_session("local[1]")
    try:
        rates = {}
        for fmt in ("binary", "avro", "binary", "avro"):  # the first run of each warms the workers
            out = directory.parent / f"spark-{fmt}"
            request = ExportRequest([str(directory)], str(out), topics="orders", master="local[1]",
                                    value_format=fmt)
            request.validate()
            summary = export_with(spark, request)
            assert summary.records == n and not summary.dead_letters
            rates[fmt] = n / summary.seconds
            _shutil.rmtree(out)
        for fmt, rate in rates.items():
            print(f"spark-export local[1], --value-format {fmt}: {rate:,.0f} rows/s")
        print(f"decoded/raw through Spark: {rates['avro'] / rates['binary']:.2f}")
    finally:
        spark.stop()


def _wall(argv) -> float:
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, default=None, help="write the input here and keep it")
    ap.add_argument("--export-records", type=int, default=300_000)
    ap.add_argument("--spark", action="store_true", help="also run spark-export on a local[1] session")
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
    if args.export_records:
        write_export_input(work / "export", args.export_records)
        export_rates(work / "export", args.export_records)
        if args.spark:
            spark_rates(work / "export", args.export_records)
    if args.keep is None:
        import shutil
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
