"""Differential: Kafka's own loader over what every mutating kstore command writes.

After rebuild-index (indexes missing, damaged), rebuild-index --truncate (torn, zero-filled, corrupt
tails), retain (retention.ms, retention.bytes, a raised log start offset), compact and convert-format
(in place and --output-dir, to v0/v1/v2 with each codec), run on Kafka-written partitions
(fixtures/kafka-corpus, fixtures/kafka-golden/inputs) and on generated data dirs (tests/safety_data.py,
tests/oracle_gen.py), Kafka's LogLoader (`load-log`) opens every output partition
after a clean shutdown AND after a crash (every segment recovered) with:

* no exception, no truncation, no segment deleted;
* exactly the batches and records kstore reads back from the output (offset, timestamp, key, value,
  headers, control type; batch framing, producer fields, validity), the same log end offset, and the
  log start offset kstore's checkpoint says;
* after rebuild-index, recovery rebuilds every index file kstore wrote byte for byte.

Against Kafka's own mutations of the same input: retain deletes the segments Kafka's `deleteOldSegments`
deletes (same log start offset, same records left); compact leaves what one pass of Kafka's Cleaner
leaves; --truncate keeps exactly the records Kafka's recovery keeps. Where kstore differs on purpose, a
test names it: the bytes Kafka's recovery deletes are in kstore's quarantine; an offset overflow Kafka
cannot load is left in place (exit 1). A negative control (one flipped byte) shows the checks can fail.

Kafka's loads use segment.index.bytes=64 KiB (LOAD_CONFIG) to keep them fast. All Kafka calls of the
module run in ONE JVM (module fixture `results`).

All Kafka calls of the module run in ONE JVM (module fixture `results`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import main
from kstore_cli.log.checkpoint import read_offset_checkpoint
from kstore_cli.log.logdir import Partition
from kstore_cli.record.reader import read_batches
from tests import safety_data
from tests.conftest import CORPUS, GOLDEN, json_lines_summary
from tests.oracle_gen import Gen, damage_partition
from kstore_cli.log.names import filename_prefix
from kstore_cli.operations.recovery import apply_plan, plan_partition

NOW = 1_800_000_000_000  # the clock of every retention run, far past every fixture's timestamps

#: Kafka's defaults but a 64 KiB segment.index.bytes: LogLoader sizes the active segment's indexes to it and
#: load-log hashes them; 10 MiB (the default) costs ~0.3 s per load. Every index here holds < 2000 entries.
LOAD_CONFIG = ["--config", "segment.index.bytes=65536"]

CHECKPOINTS = ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint",
               "cleaner-offset-checkpoint")


# ------------------------------------------------------------------------------------ inputs


def _copy_partitions(src_dir: Path, names: List[str], dst: Path) -> Path:
    """A data dir at `dst` holding copies of src_dir's partitions `names` and its checkpoint files."""
    dst.mkdir(parents=True)
    for f in src_dir.iterdir():
        if f.is_file() and f.name in CHECKPOINTS:
            shutil.copy2(f, dst / f.name)
    for name in names:
        shutil.copytree(src_dir / name, dst / name)
    return dst


def _generated(dst: Path, seed: int) -> Path:
    """A data dir with one partition drawn by tests/oracle_gen.py (v0/v1/v2, codecs, txns)."""
    import random

    dst.mkdir(parents=True, exist_ok=True)
    part = dst / f"gen{seed}-0"
    part.mkdir()
    gen = Gen(random.Random(seed))
    segments, _end = gen.partition()
    for base, data in segments:
        (part / (filename_prefix(base) + ".log")).write_bytes(data)
    apply_plan(plan_partition(Partition(str(part)), index_interval_bytes=300))
    return dst


def _generated_damaged(dst: Path) -> Path:
    """Generated multi-segment partitions (tests/oracle_gen.py) with one damage each, in the first
    segment (so Kafka's recovery also drops every later segment) or in the last one."""
    import random
    import struct

    dst.mkdir(parents=True)
    seed = 100
    for i, (where, kind) in enumerate([("first", "flip"), ("last", "size"), ("last", "cut"), ("first", "size")]):
        while True:
            seed += 1
            segments, _end = Gen(random.Random(seed)).partition()
            if len(segments) >= 2 and all(len(data) > 400 for _b, data in segments):
                break
        part = dst / f"damaged{i}-0"
        part.mkdir()
        for base, data in segments:
            (part / (filename_prefix(base) + ".log")).write_bytes(data)
        apply_plan(plan_partition(Partition(str(part)), index_interval_bytes=300))
        base, data = segments[0] if where == "first" else segments[-1]
        log = part / (filename_prefix(base) + ".log")
        raw = bytearray(data)
        batch_starts = [b.position for b in read_batches(bytes(raw))]
        at = batch_starts[len(batch_starts) // 2]
        if kind == "flip":
            raw[at + 40] ^= 0x10  # inside the batch, past its CRC: the CRC no longer matches
        elif kind == "size":
            struct.pack_into(">i", raw, at + 8, 7)  # below the 14-byte minimum
        else:
            del raw[at + 30:]  # a torn write
        log.write_bytes(bytes(raw))
    return dst


def _generated_many(dst: Path, seeds: range, damage: bool) -> Path:
    """Generated partitions `gen<seed>-0`, each with one random damage (a cut, a flipped bit, a bad size)
    when `damage` (oracle_gen.damage_partition, seeded by the partition's seed)."""
    import random

    for seed in seeds:
        _generated(dst, seed)
        if damage:
            damage_partition(random.Random(seed * 7), dst / f"gen{seed}-0", ["truncate", "flip", "size"])
    return dst


def _offset_overflow(dst: Path) -> Path:
    """A segment whose second batch's base offset had a bit flipped: 2^40 past the segment's base."""
    _generated(dst, 5)
    part = dst / "gen5-0"
    log = sorted(part.glob("*.log"))[0]
    raw = bytearray(log.read_bytes())
    second = [b.position for b in read_batches(bytes(raw))][1]
    raw[second + 2] ^= 0x01
    log.write_bytes(bytes(raw))
    return dst


def _drop_indexes(part: Path) -> None:
    for f in list(part.glob("*.index")) + list(part.glob("*.timeindex")):
        f.unlink()


def _flip_index_bytes(part: Path) -> None:
    for f in sorted(part.glob("*.index"))[:2] + sorted(part.glob("*.timeindex"))[:2]:
        raw = bytearray(f.read_bytes())
        if raw:
            raw[len(raw) // 2] ^= 0x5A
            f.write_bytes(bytes(raw))


class Scenario(NamedTuple):
    name: str
    make: Callable[[Path], Path]  # builds the input data dir at the given path; returns it
    command: List[str]  # kstore args; {data} = the input data dir, {out} = an output dir beside it
    outputs: List[str]  # partition dirs Kafka loads afterwards, "{data}/x-0" or "{out}/x-0"
    rc: int = 0
    prepare: Optional[Callable[[Path], None]] = None  # damage applied to the input data dir
    retention: Optional[List[str]] = None  # retain-log --config/--log-start-offset args, for the same retention
    clean: Optional[List[str]] = None  # clean-log args (after --now), for the same cleaning pass
    #: partition dirs Kafka's recovery also runs on as they were BEFORE kstore (the input, for --truncate)
    recover_input: Tuple[str, ...] = ()
    #: output partitions where nothing is left, on purpose (everything retained away, or cut as Kafka cuts it)
    empty: Tuple[str, ...] = ()


def corpus(*names: str) -> Callable[[Path], Path]:
    return lambda dst: _copy_partitions(CORPUS / "logs", list(names), dst)


def crashed(*names: str) -> Callable[[Path], Path]:
    return lambda dst: _copy_partitions(CORPUS / "logs-crashed", list(names), dst)


def golden(*names: str) -> Callable[[Path], Path]:
    return lambda dst: _copy_partitions(GOLDEN / "inputs", list(names), dst)


def safety(**kw) -> Callable[[Path], Path]:
    return lambda dst: safety_data.make_data_dir(dst, **kw).parent


def with_cluster_metadata(make: Callable[[Path], Path], topic: str, **configs: str) -> Callable[[Path], Path]:
    """The data dir `make` builds, plus a KRaft metadata log holding `topic`'s overrides (ConfigRecords), its
    TopicRecord with the topic ID of the partition's partition.metadata (the metadata's incarnation)."""
    from kstore_cli.log.checkpoint import read_partition_metadata
    from tests.make_metadata_cluster import write_config_log

    def build(dst: Path) -> Path:
        data = make(dst)
        topic_id = str(read_partition_metadata(data / f"{topic}-0" / "partition.metadata")["topicId"])
        write_config_log(data, {topic: topic_id}, [(2, topic, k.replace("_", "."), v) for k, v in configs.items()])
        return data
    return build


def each_partition(fn: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda data: [fn(p) for p in sorted(data.iterdir()) if p.is_dir()]


_TOPIC_CONFIG_COMPACT = "[*]\ncleanup.policy = compact\n"


SCENARIOS: List[Scenario] = [
    # ---- rebuild-index: Kafka-written logs with their indexes gone or damaged; generated logs
    Scenario("rebuild-missing-corpus",
             corpus("v2-none-0", "legacy-v0-0", "legacy-v1-0", "mixed-magic-0", "transactional-0",
                    "index-full-roll-0", "v2-logappendtime-0"),
             ["rebuild-index", "{data}"],
             ["{data}/v2-none-0", "{data}/legacy-v0-0", "{data}/legacy-v1-0", "{data}/mixed-magic-0",
              "{data}/transactional-0", "{data}/index-full-roll-0", "{data}/v2-logappendtime-0"],
             prepare=each_partition(_drop_indexes)),
    Scenario("rebuild-damaged-corpus", corpus("v2-zstd-0", "idempotent-0"), ["rebuild-index", "{data}"],
             ["{data}/v2-zstd-0", "{data}/idempotent-0"], prepare=each_partition(_flip_index_bytes)),
    Scenario("rebuild-golden-damaged", golden("bad-index-0", "bad-sanity-0", "sparse-index-0", "gaps-0", "txn-0"),
             ["rebuild-index", "{data}"],
             ["{data}/bad-index-0", "{data}/bad-sanity-0", "{data}/sparse-index-0", "{data}/gaps-0", "{data}/txn-0"],
             prepare=lambda data: _drop_indexes(data / "gaps-0") or _drop_indexes(data / "txn-0")),
    Scenario("rebuild-all-safety", safety(), ["rebuild-index", "{data}"], ["{data}/orders-0", "{data}/clicks-0"],
             prepare=each_partition(_drop_indexes)),
    Scenario("rebuild-generated", lambda d: _generated(d, 3), ["rebuild-index", "{data}"], ["{data}/gen3-0"],
             prepare=each_partition(_drop_indexes)),
    # ---- rebuild-index --truncate: what a crash or damage left
    Scenario("truncate-crashed", crashed("active-open-0", "preallocated-open-0", "transactional-open-0"),
             ["rebuild-index", "--truncate", "--quarantine-dir", "{out}", "{data}"],
             ["{data}/active-open-0", "{data}/preallocated-open-0", "{data}/transactional-open-0"],
             recover_input=("active-open-0", "preallocated-open-0", "transactional-open-0")),
    Scenario("truncate-corrupt", golden("corrupt-truncated-0", "corrupt-crc-0", "corrupt-badsize-0", "corrupt-gzip-0"),
             ["rebuild-index", "--truncate", "--quarantine-dir", "{out}", "{data}"],
             ["{data}/corrupt-truncated-0", "{data}/corrupt-crc-0", "{data}/corrupt-badsize-0", "{data}/corrupt-gzip-0"],
             recover_input=("corrupt-truncated-0", "corrupt-crc-0", "corrupt-badsize-0", "corrupt-gzip-0"),
             empty=("corrupt-crc-0",)),  # its first batch is the corrupt one: Kafka's recovery keeps nothing either
    Scenario("truncate-generated", _generated_damaged,
             ["rebuild-index", "--truncate", "--quarantine-dir", "{out}", "{data}"],
             [f"{{data}}/damaged{i}-0" for i in range(4)], rc=0,
             recover_input=tuple(f"damaged{i}-0" for i in range(4))),
    Scenario("truncate-generated-random", lambda d: _generated_many(d, range(1, 7), damage=True),
             ["rebuild-index", "--truncate", "--quarantine-dir", "{out}", "{data}"],
             [f"{{data}}/gen{i}-0" for i in range(1, 7)], rc=0,
             recover_input=tuple(f"gen{i}-0" for i in range(1, 7)),
             empty=("gen2-0", "gen4-0", "gen6-0")),  # damaged in their first batch: Kafka keeps nothing either
    # Kafka's loader cannot load this (it tries to split the segment and raises); kstore leaves it, exit 1
    Scenario("truncate-offset-overflow", _offset_overflow,
             ["rebuild-index", "--truncate", "--quarantine-dir", "{out}", "{data}"], [], rc=1,
             recover_input=("gen5-0",)),
    # ---- retain, checked against Kafka's deleteOldSegments on the same input
    Scenario("retain-bytes", corpus("transactional-0"),
             ["retain", "--retention-ms", "-1", "--retention-bytes", "20000", "--now", str(NOW), "{data}"],
             ["{data}/transactional-0"], retention=["--config", "retention.ms=-1", "--config", "retention.bytes=20000"]),
    Scenario("retain-ms", corpus("time-roll-0"),
             ["retain", "--retention-ms", str(NOW - 1_700_000_000_000 - 15_000), "--retention-bytes", "-1",
              "--now", str(NOW), "{data}"],
             ["{data}/time-roll-0"],
             retention=["--config", f"retention.ms={NOW - 1_700_000_000_000 - 15_000}", "--config", "retention.bytes=-1"]),
    # No retention flag: the topic's retention.ms comes from the cluster metadata log in the data dir.
    Scenario("retain-cluster-metadata",
             with_cluster_metadata(corpus("time-roll-0"), "time-roll", retention_ms=str(NOW - 1_700_000_000_000 - 15_000)),
             ["retain", "--now", str(NOW), "{data}"],
             ["{data}/time-roll-0"],
             retention=["--config", f"retention.ms={NOW - 1_700_000_000_000 - 15_000}"]),
    Scenario("retain-log-start-offset", corpus("idempotent-0"),
             ["retain", "--retention-ms", "-1", "--retention-bytes", "-1", "--log-start-offset", "150",
              "--now", str(NOW), "{data}"],
             ["{data}/idempotent-0"],
             retention=["--config", "retention.ms=-1", "--config", "retention.bytes=-1", "--log-start-offset", "150"]),
    Scenario("retain-safety", safety(),
             ["retain", "--retention-ms", str(4 * safety_data.DAY), "--retention-bytes", "-1",
              "--now", str(safety_data.T0 + 12 * safety_data.DAY), "{data}"],
             ["{data}/orders-0", "{data}/clicks-0"], empty=("clicks-0",)),  # clicks-0 is 40 days old
    # ---- compact
    Scenario("compact-corpus", corpus("v2-compact-0", "transactional-0", "__consumer_offsets-0", "mixed-magic-0",
                                      "legacy-v1-0"),
             ["compact", "--force-clean", "--topic-config", "{topic_config}", "--now", str(NOW), "{data}"],
             ["{data}/v2-compact-0", "{data}/transactional-0", "{data}/__consumer_offsets-0", "{data}/mixed-magic-0",
              "{data}/legacy-v1-0"],
             clean=["--now", str(NOW)]),
    Scenario("compact-safety", safety(keys=7, second_partition=False),
             ["compact", "--force-clean", "--topic-config", "{topic_config}", "--delete-retention-ms", "0",
              "--now", str(safety_data.T0 + 30 * safety_data.DAY), "{data}"],
             ["{data}/orders-0"],
             clean=["--now", str(safety_data.T0 + 30 * safety_data.DAY), "--config", "delete.retention.ms=0"]),
    # ---- convert-format
    Scenario("convert-v0-to-v2-zstd-out", corpus("legacy-v0-0", "legacy-v1-logappendtime-0"),
             ["convert-format", "--to-magic", "2", "--compression", "zstd", "--output-dir", "{out}", "{data}"],
             ["{out}/legacy-v0-0", "{out}/legacy-v1-logappendtime-0"]),
    Scenario("convert-v2-to-v1-out", corpus("v2-gzip-0", "mixed-magic-0"),
             ["convert-format", "--to-magic", "1", "--compression", "snappy", "--output-dir", "{out}", "{data}"],
             ["{out}/v2-gzip-0", "{out}/mixed-magic-0"]),
    Scenario("convert-v2-to-v0-out", corpus("v2-lz4-0"),
             ["convert-format", "--to-magic", "0", "--compression", "gzip", "--output-dir", "{out}", "{data}"],
             ["{out}/v2-lz4-0"]),
    Scenario("convert-txn-lz4-in-place", corpus("transactional-0", "v2-snappy-0"),
             ["convert-format", "--to-magic", "2", "--compression", "lz4", "--in-place", "{data}"],
             ["{data}/transactional-0", "{data}/v2-snappy-0"]),
    Scenario("convert-regroup-in-place", safety(),
             ["convert-format", "--to-magic", "2", "--compression", "none", "--batch-bytes", "700",
              "--segment-bytes", "4000", "--in-place", "{data}"],
             ["{data}/orders-0", "{data}/clicks-0"]),
    Scenario("convert-legacy-safety-out", safety(magic=1, codec=safety_data.LZ4),
             ["convert-format", "--to-magic", "2", "--compression", "gzip", "--output-dir", "{out}", "{data}"],
             ["{out}/orders-0", "{out}/clicks-0"]),
    Scenario("convert-generated-out", lambda d: _generated_many(d, range(11, 15), damage=False),
             ["convert-format", "--to-magic", "2", "--compression", "snappy", "--output-dir", "{out}", "{data}"],
             [f"{{out}}/gen{i}-0" for i in range(11, 15)]),
    Scenario("convert-generated-v1-out", lambda d: _generated_many(d, range(15, 18), damage=False),
             ["convert-format", "--to-magic", "1", "--compression", "lz4", "--segment-bytes", "3000",
              "--output-dir", "{out}", "{data}"],
             [f"{{out}}/gen{i}-0" for i in range(15, 18)]),
    Scenario("convert-generated-v0-in-place", lambda d: _generated_many(d, range(18, 20), damage=False),
             ["convert-format", "--to-magic", "0", "--compression", "gzip", "--batch-bytes", "500", "--in-place",
              "{data}"],
             [f"{{data}}/gen{i}-0" for i in range(18, 20)]),
]


# ------------------------------------------------------------------------------------ kstore's view


def kstore_view(part: Path) -> dict:
    """What kstore reads in a partition: batches, records, log end offset, log start offset."""
    batches, records = [], []
    segments = Partition(str(part)).segments
    end = segments[0].base_offset if segments else 0
    for seg in segments:
        end = max(end, seg.base_offset)  # an empty segment keeps the log end offset (a rolled, empty active one)
        for b in read_batches(seg.log):
            batches.append((b.base_offset, b.last_offset, b.magic, b.is_control,
                            getattr(b, "is_transactional", False), getattr(b, "producer_id", -1), b.is_valid))
            for r in b.records():
                control = r.control.type_name if b.is_control and r.control is not None else None
                records.append((r.offset, r.timestamp, r.key.hex() if r.key is not None else None,
                                r.value.hex() if r.value is not None else None,
                                [] if r.is_legacy else [[h.key, None if h.value is None else h.value.hex()]
                                                        for h in r.headers], control))
            end = b.last_offset + 1
    lso = read_offset_checkpoint(part.parent / "log-start-offset-checkpoint").get(
        (part.name.rsplit("-", 1)[0], int(part.name.rsplit("-", 1)[1]))) if (
        part.parent / "log-start-offset-checkpoint").exists() else None
    first = segments[0].base_offset if segments else 0
    return {"batches": batches, "records": records, "log_end_offset": end,
            "log_start_offset": max(lso or 0, first)}


def kafka_view(result) -> dict:
    batches = [(b["baseOffset"], b["lastOffset"], b["magic"], b["isControl"], b["isTransactional"], b["producerId"],
                b["isValid"]) for b in result.of_type("batch")]
    records = [(r["offset"], r["timestamp"], r["key"], r["value"], r["headers"], r.get("controlType"))
               for r in result.of_type("record")]
    return {"batches": batches, "records": records}


def run_kstore(args: List[str]) -> Tuple[int, str]:
    runner = CliRunner()
    with runner.isolation() as (out, err, _mixed):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        return code, (out.getvalue() + err.getvalue()).decode("utf-8", "replace")


def _oracle_copy(part: Path, dst_parent: Path) -> Path:
    """A private copy of a partition (with its parent's checkpoint files) for a harness that modifies it."""
    dst_parent.mkdir(parents=True)
    for f in part.parent.iterdir():
        if f.is_file() and f.name in CHECKPOINTS:
            shutil.copy2(f, dst_parent / f.name)
    shutil.copytree(part, dst_parent / part.name)
    return dst_parent / part.name


class Outcome(NamedTuple):
    scenario: Scenario
    rc: int
    output: str
    views: Dict[str, dict]  # output partition -> kstore_view
    dirs: Dict[str, Path]  # output partition -> its path after kstore
    inputs: Dict[str, Path]  # partition name -> the input (before kstore) copy
    kafka: Dict[Tuple[str, str], object]  # (partition, "clean"/"unclean"/"retain"/"input-unclean") -> OracleResult
    quarantine: Path


@pytest.fixture(scope="module")
def results(oracle, tmp_path_factory) -> Dict[str, Outcome]:
    root = tmp_path_factory.mktemp("oracle-mut")
    topic_config = root / "compact.ini"
    topic_config.write_text(_TOPIC_CONFIG_COMPACT)
    calls, keys, pending = [], [], {}
    for sc in SCENARIOS:
        base = root / sc.name
        data = sc.make(base / "data")
        if sc.prepare:
            sc.prepare(data)
        before = base / "before"
        shutil.copytree(data, before)
        out = base / "out"
        subst = {"{data}": str(data), "{out}": str(out), "{topic_config}": str(topic_config)}
        args = [subst.get(a, a) for a in sc.command]
        rc, text = run_kstore(args)
        views, dirs = {}, {}
        for spec in sc.outputs:
            path = Path(spec.replace("{data}", str(data)).replace("{out}", str(out)))
            name = spec.split("/", 1)[1]
            dirs[name] = path
            views[name] = kstore_view(path)
            for mode in ("clean", "unclean"):
                copy = _oracle_copy(path, base / "kafka" / f"{name}-{mode}")
                calls.append(("load-log", [str(copy), f"--{mode}", *LOAD_CONFIG]))
                keys.append((sc.name, name, mode))
            if sc.retention is not None:
                copy = _oracle_copy(before / name, base / "kafka" / f"{name}-retain")
                calls.append(("retain-log", [str(copy), "--now", str(NOW), *sc.retention]))
                keys.append((sc.name, name, "retain"))
            if sc.clean is not None:
                copy = _oracle_copy(before / name, base / "kafka" / f"{name}-clean-log")
                calls.append(("clean-log", [str(copy), *sc.clean]))
                keys.append((sc.name, name, "clean-log"))
        for name in sc.recover_input:
            copy = _oracle_copy(before / name, base / "kafka" / f"{name}-input-unclean")
            calls.append(("load-log", [str(copy), "--unclean", *LOAD_CONFIG]))
            keys.append((sc.name, name, "input-unclean"))
        pending[sc.name] = (sc, rc, text, views, dirs, {p.name: p for p in before.iterdir() if p.is_dir()}, out)
    # the negative control: kstore's own output with one byte flipped must not pass the checks above
    sabotaged = _oracle_copy(pending["rebuild-missing-corpus"][4]["v2-none-0"], root / "control" / "sabotaged")
    log = sorted(sabotaged.glob("*.log"))[0]
    raw = bytearray(log.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    log.write_bytes(bytes(raw))
    calls.append(("load-log", [str(sabotaged), "--unclean", *LOAD_CONFIG]))
    keys.append(("rebuild-missing-corpus", "v2-none-0", "sabotaged"))
    kafka: Dict[str, dict] = {name: {} for name in pending}
    for (scn, part, mode), res in zip(keys, oracle.run_many(calls, heap="-Xmx1G")):
        kafka[scn][(part, mode)] = res
    return {name: Outcome(sc, rc, text, views, dirs, inputs, kafka[name], out)
            for name, (sc, rc, text, views, dirs, inputs, out) in pending.items()}


LOADS = [(sc.name, spec.split("/", 1)[1], mode) for sc in SCENARIOS for spec in sc.outputs
         for mode in ("clean", "unclean")]


@pytest.mark.parametrize("scenario", [sc.name for sc in SCENARIOS])
def test_command_did_its_work(scenario: str, results) -> None:
    """Each scenario changed what it is about (so a load that passes is not a load of the untouched input)."""
    outcome = results[scenario]
    command = outcome.scenario.command
    for name, view in outcome.views.items():
        if command[0] == "rebuild-index":
            part = outcome.dirs[name]
            assert all((part / (filename_prefix(s.base_offset) + ".index")).exists()
                       for s in Partition(str(part)).segments), (name, outcome.output)
            continue
        before = kstore_view(outcome.inputs[name])
        if command[0] == "convert-format":
            target = int(command[command.index("--to-magic") + 1])
            assert {b[2] for b in view["batches"]} == {target}, (name, outcome.output)
            if target == 2:  # nothing lost going up
                assert [r[:4] for r in view["records"] if r[5] is None] == [
                    r[:4] for r in before["records"] if r[5] is None] or command.count("--batch-bytes"), name
        elif command[0] == "compact":
            assert "cleaned" in outcome.output, outcome.output
            assert len(view["records"]) < len(before["records"]), (name, outcome.output)
        elif command[0] == "retain":
            assert view["log_start_offset"] > before["log_start_offset"], (name, outcome.output)


def test_commands_succeeded(results) -> None:
    failed = [f"{name}: kstore exit {o.rc}\n{o.output}" for name, o in results.items()
              if o.rc != o.scenario.rc or "Traceback" in o.output]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("scenario,partition,mode", LOADS, ids=[f"{s}:{p}:{m}" for s, p, m in LOADS])
def test_kafka_loads_what_kstore_wrote(scenario: str, partition: str, mode: str, results) -> None:
    outcome = results[scenario]
    res = outcome.kafka[(partition, mode)]
    summary = res.one("summary")
    context = f"{scenario} {partition} --{mode}: {json.dumps({k: summary.get(k) for k in ('exception', 'truncations', 'deleted_segments', 'kafka_log_messages')})[:3000]}"
    assert res.rc == 0 and summary["ok"] and not summary.get("exception"), context
    assert summary["truncations"] == [], context
    assert summary["deleted_segments"] == [], context
    assert not [m for m in summary.get("kafka_log_messages", []) if m.startswith(("WARN", "ERROR"))], context
    mine = outcome.views[partition]
    assert summary["log_end_offset"] == mine["log_end_offset"], context
    assert summary["log_start_offset"] == mine["log_start_offset"], context
    theirs = kafka_view(res)
    assert theirs["batches"] == mine["batches"], context
    assert theirs["records"] == mine["records"], context
    assert bool(mine["records"]) != (partition in outcome.scenario.empty), f"{scenario} {partition}: records left?"


REBUILT = [(sc.name, spec.split("/", 1)[1]) for sc in SCENARIOS if sc.command[0] == "rebuild-index"
           for spec in sc.outputs]


@pytest.mark.parametrize("scenario,partition", REBUILT, ids=[f"{s}:{p}" for s, p in REBUILT])
def test_recovery_rebuilds_the_same_indexes(scenario: str, partition: str, results) -> None:
    """Kafka's recovery (every segment) rebuilds byte for byte each .index/.timeindex/.txnindex kstore wrote
    (an index kstore left as it was, e.g. a leader-written one that is right, is not kstore's to answer for)."""
    outcome = results[scenario]
    summary = outcome.kafka[(partition, "unclean")].one("summary")
    before, after = outcome.inputs[partition], outcome.dirs[partition]

    def written(name: str) -> bool:
        return not (before / name).exists() or (before / name).read_bytes() != (after / name).read_bytes()

    checked = [i for i in summary["indexes_after_load"] if i["kind"] in ("offset", "time", "txn") and written(i["file"])]
    differ = [i["file"] for i in checked if not i["identical_to_before"]]
    assert checked, f"{scenario} {partition}: kstore wrote no index"
    assert differ == [], f"{scenario} {partition}: Kafka's rebuilt indexes differ from kstore's: {differ}"


RETAINED = [(sc.name, spec.split("/", 1)[1]) for sc in SCENARIOS if sc.retention is not None for spec in sc.outputs]


@pytest.mark.parametrize("scenario,partition", RETAINED, ids=[f"{s}:{p}" for s, p in RETAINED])
def test_retain_deletes_what_kafka_deletes(scenario: str, partition: str, results) -> None:
    """The same retention given to Kafka's deleteOldSegments leaves the same log start offset and records."""
    outcome = results[scenario]
    res = outcome.kafka[(partition, "retain")]
    assert res.rc == 0, res.stdout[-2000:]
    summary = res.one("retain_summary")
    mine = outcome.views[partition]
    assert summary["log_start_offset"] == mine["log_start_offset"], summary
    assert kafka_view(res)["records"] == [r for r in mine["records"]], summary
    assert mine["records"] != kstore_view(outcome.inputs[partition])["records"], "the retention removed nothing"


#: inputs of --truncate scenarios that a crash left whole (Kafka's recovery cuts nothing there either)
UNDAMAGED = {"active-open-0", "transactional-open-0"}

CLEANED = [(sc.name, spec.split("/", 1)[1]) for sc in SCENARIOS if sc.clean is not None for spec in sc.outputs]


@pytest.mark.parametrize("scenario,partition", CLEANED, ids=[f"{s}:{p}" for s, p in CLEANED])
def test_compact_cleans_what_kafka_cleans(scenario: str, partition: str, results) -> None:
    """One pass of Kafka's Cleaner on the same input at the same clock leaves the same batches and records
    (the dirty range, the latest record per key, tombstones, aborted data and markers, empty batches)."""
    outcome = results[scenario]
    res = outcome.kafka[(partition, "clean-log")]
    assert res.rc == 0, res.stdout[-2000:]
    summary = res.one("clean_summary")
    mine = outcome.views[partition]
    assert kafka_view(res)["batches"] == mine["batches"], summary
    assert kafka_view(res)["records"] == mine["records"], summary
    assert summary["log_end_offset_after"] == mine["log_end_offset"]


TRUNCATED = [(sc.name, p) for sc in SCENARIOS for p in sc.recover_input if sc.outputs]


@pytest.mark.parametrize("scenario,partition", TRUNCATED, ids=[f"{s}:{p}" for s, p in TRUNCATED])
def test_truncate_keeps_what_kafka_recovery_keeps(scenario: str, partition: str, results) -> None:
    """--truncate cuts where Kafka's recovery cuts. The difference, on purpose: Kafka deletes the bytes past
    the cut; kstore moves them to the quarantine (a zero-filled preallocated tail is only recorded)."""
    outcome = results[scenario]
    kafka = outcome.kafka[(partition, "input-unclean")]
    summary = kafka.one("summary")
    assert kafka.rc == 0 and summary["ok"], summary
    mine = outcome.views[partition]
    assert summary["log_end_offset"] == mine["log_end_offset"]
    assert kafka_view(kafka)["records"] == mine["records"]
    assert kafka_view(kafka)["batches"] == mine["batches"]
    # what Kafka deleted, kstore kept aside: per segment, the input's bytes past the output's size
    before = outcome.inputs[partition]
    after = outcome.dirs[partition]
    tails = {}
    for log in sorted(before.glob("*.log")):
        old = log.read_bytes()
        new = (after / log.name).read_bytes() if (after / log.name).exists() else b""
        assert old[:len(new)] == new, f"{log.name}: kstore changed bytes it kept"
        if len(old) > len(new):
            tails[log.name] = old[len(new):]
    cut_by_kafka = bool(summary["truncations"] or summary["log_files_changed"] or summary["deleted_segments"])
    assert bool(tails) == cut_by_kafka, (tails.keys(), summary["truncations"], summary["log_files_changed"])
    assert cut_by_kafka == (partition not in UNDAMAGED), (partition, summary["truncations"])
    if partition.startswith("damaged") and partition != "damaged1-0" and partition != "damaged2-0":
        assert summary["deleted_segments"], "damage in the first segment: Kafka drops every later one"
    held = {p.read_bytes() for p in outcome.quarantine.rglob("*") if p.is_file() and not p.name.endswith(".json")}
    manifests = [json.loads(m.read_text()) for m in outcome.quarantine.rglob("kstore-quarantine.json")]
    for name, tail in tails.items():
        if tail.strip(b"\0"):
            assert tail in held, f"{name}: the {len(tail)} bytes past the cut are not in the quarantine"
        else:  # a preallocated, never written tail: recorded, nothing to keep
            assert any(m["problem"]["kind"] == "zero-filled-tail" and os.path.basename(m["segment"]) == name
                       for m in manifests), (name, manifests)


def test_the_checks_can_fail(results) -> None:
    """Negative control: one flipped byte in kstore's output, and Kafka's recovery cuts there, so the
    comparison above (no truncation, the same records) would fail."""
    outcome = results["rebuild-missing-corpus"]
    res = outcome.kafka[("v2-none-0", "sabotaged")]
    summary = res.one("summary")
    assert summary["truncations"] and summary["log_files_changed"]
    assert kafka_view(res)["records"] != outcome.views["v2-none-0"]["records"]
    assert kafka_view(res)["records"] == outcome.views["v2-none-0"]["records"][:len(kafka_view(res)["records"])]


def test_offset_overflow_is_left_as_kafka_cannot_load_it(results) -> None:
    """A base offset 2^40 past its segment's: Kafka's LogLoader sees an offset overflow, tries to split the
    segment and raises, so no broker starts on it; kstore --truncate does not cut it either (Kafka would not),
    leaves every byte in place and exits 1 with the reason."""
    outcome = results["truncate-offset-overflow"]
    kafka = outcome.kafka[("gen5-0", "input-unclean")].one("summary")
    assert not kafka["ok"] and "Split operation is only permitted for segments with overflow" in kafka["exception"]
    assert outcome.rc == 1 and "offset-overflow" in outcome.output and "Kafka" in outcome.output
    data = outcome.quarantine.parent / "data" / "gen5-0"
    for log in outcome.inputs["gen5-0"].glob("*.log"):
        assert (data / log.name).read_bytes() == log.read_bytes()


def test_compact_says_why_it_did_not_clean(tmp_path) -> None:
    """A log whose first transaction is still open (last stable offset 1) holds 67 offsets: kstore stops
    at the open transaction and says so, rather than calling the log empty. (Kafka's Cleaner, started
    clean with no producer snapshot, rebuilds no producer state, sees no open transaction and cleans
    [0, 22): stopping at the first unstable offset is the safer reading.)"""
    data = _generated(tmp_path / "data", 31)  # v1 message, then producer 48's transaction, never ended
    (tmp_path / "topics.ini").write_text(_TOPIC_CONFIG_COMPACT)
    rc, text = run_kstore(["compact", "--json", "--topic-config", str(tmp_path / "topics.ini"), "--now", str(NOW),
                           "--force-clean", str(data)])
    part = json_lines_summary(text)["partitions"][0]
    assert rc == 0 and part["last_stable_offset"] == 1 and not part["cleaned"]
    assert kstore_view(data / "gen31-0")["log_end_offset"] == 67
    assert part["reason"] == ("cleaning stops at the first unstable offset 1, where producer 48's transaction is "
                              "still open, and nothing below it is cleanable")
