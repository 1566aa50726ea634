"""Verdicts on partitions Kafka's own code laid out (fixtures/kafka-written, made by its make.py with
../shared/kafka-oracle): leaders of Kafka 4.0 and <= 3.6, a follower, recovery, the cleaner, LogAppendTime,
another index.interval.bytes. None is broken, so verify-index finds no error and rebuild-index has nothing
to rebuild; a broken index is rebuilt alone, with its reason; --all rewrites as Kafka's recovery does."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.log.logdir import resolve
from kstore_cli.record.reader import read_batches
from kstore_cli.operations.verify import ERROR, verify_partition
from tests.conftest import FIXTURES

WRITTEN = FIXTURES / "kafka-written"
CASES = sorted(p.name for p in WRITTEN.iterdir() if (p / "t-0").is_dir())

_register_commands()


def invoke(*argv: str):
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False)


def partition(case: str):
    (target,) = resolve([str(WRITTEN / case / "t-0")])
    return target.partition


def test_every_writer_is_there() -> None:
    assert CASES == ["cleaner", "follower", "interval-default", "leader-3.6", "leader-4.0", "logappendtime", "recovery"]


@pytest.mark.parametrize("case", CASES)
def test_no_error_on_what_kafka_wrote(case: str) -> None:
    findings, _ = verify_partition(partition(case))
    assert [f for f in findings if f.severity == ERROR] == []
    res = invoke("verify-index", str(WRITTEN / case / "t-0"))
    assert res.exit_code == 0, res.output
    assert "healthy" in res.output
    res = invoke("doctor", str(WRITTEN / case))
    assert res.exit_code == 0, res.output
    assert "no errors or warnings" in res.output


@pytest.mark.parametrize("case", CASES)
def test_rebuild_index_has_nothing_to_do(case: str) -> None:
    res = invoke("rebuild-index", "--dry-run", "--json", str(WRITTEN / case / "t-0"))
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.output.splitlines()]
    assert rows and all(r["status"] == "unchanged" for r in rows), [r for r in rows if r["status"] != "unchanged"]
    text = invoke("rebuild-index", "--dry-run", str(WRITTEN / case / "t-0")).output
    assert text.strip().endswith("segment(s) with nothing to rebuild") and len(text.splitlines()) == 1, text


def _batch_last_offsets(part: Path) -> set:
    return {b.last_offset for log in part.glob("*.log") for b in read_batches(str(log))}


def test_the_36_layout_points_inside_batches() -> None:
    """The <= 3.6 leader case is what it claims: entries name a record offset that ends no batch (the
    layout the old verify-index called an error), and the 4.0 case's do not."""
    def entries(case):
        out = []
        for t in (WRITTEN / case / "t-0").glob("*.timeindex"):
            data, base = t.read_bytes(), int(t.stem)
            out += [base + struct.unpack_from(">qi", data, p)[1] for p in range(0, len(data), 12)]
        return out

    old, new = entries("leader-3.6"), entries("leader-4.0")
    assert len(old) == len(new) > 20
    ends_36 = _batch_last_offsets(WRITTEN / "leader-3.6" / "t-0")
    assert sum(o not in ends_36 for o in old) >= 20
    assert all(o in _batch_last_offsets(WRITTEN / "leader-4.0" / "t-0") for o in new)


def test_a_selective_rebuild_rewrites_only_the_broken_index(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(WRITTEN / "leader-3.6", data)
    part = data / "t-0"
    tidx = sorted(part.glob("*.timeindex"))[1]
    raw = bytearray(tidx.read_bytes())
    ts, rel = struct.unpack_from(">qi", raw, 12 * 3)
    struct.pack_into(">qi", raw, 12 * 3, ts - 10**6, rel)  # entry 3 falls below entry 2: Kafka's search misreads
    tidx.write_bytes(bytes(raw))
    before = {p.name: p.read_bytes() for p in part.iterdir()}
    res = invoke("verify-index", str(part))
    assert res.exit_code == 1 and tidx.name in res.output
    res = invoke("rebuild-index", str(part))
    assert res.exit_code == 0, res.output
    assert f"timeindex rewrite: timeindex-order" in res.output
    after = {p.name: p.read_bytes() for p in part.iterdir()}
    assert {n for n in after if after[n] != before.get(n)} == {tidx.name}
    assert invoke("verify-index", str(part)).exit_code == 0


def test_all_rewrites_as_kafkas_recovery_does(tmp_path: Path) -> None:
    """--all on the leader's partition gives byte for byte the indexes Kafka's own recovery rebuilt
    (the `recovery` case: LogSegment.recover at the default index.interval.bytes)."""
    data = tmp_path / "data"
    shutil.copytree(WRITTEN / "leader-4.0", data)
    res = invoke("rebuild-index", "--all", str(data / "t-0"))
    assert res.exit_code == 0, res.output
    assert "rewrite: --all" in res.output
    kafka = WRITTEN / "recovery" / "t-0"
    for suffix in ("*.index", "*.timeindex", "*.txnindex"):
        for f in kafka.glob(suffix):
            assert (data / "t-0" / f.name).read_bytes() == f.read_bytes(), f.name


def test_index_interval_bytes_comes_from_the_topic_config(tmp_path: Path, oracle) -> None:
    """--topic-config's index.interval.bytes reaches the rebuild: --all then writes what Kafka's recovery
    writes at that interval (Kafka's loader, --index-interval-bytes 1024, on a copy)."""
    data = tmp_path / "data"
    shutil.copytree(WRITTEN / "leader-4.0", data)
    topics = tmp_path / "topics.ini"
    topics.write_text("[t]\nindex.interval.bytes = 1024\n")
    kafka_copy = tmp_path / "kafka" / "t-0"
    shutil.copytree(WRITTEN / "leader-4.0" / "t-0", kafka_copy)
    (res,) = oracle.run_many([("load-log", [str(kafka_copy), "--unclean", "--index-interval-bytes", "1024",
                                            "--no-records", "--no-lookup"])])
    assert res.rc == 0 and res.one("summary")["ok"], res.stdout[-2000:]
    assert invoke("rebuild-index", "--all", "--topic-config", str(topics), str(data / "t-0")).exit_code == 0
    for f in kafka_copy.glob("*.index"):
        assert (data / "t-0" / f.name).read_bytes() == f.read_bytes(), f.name
    assert (data / "t-0" / "00000000000000000000.index").read_bytes() != \
        (WRITTEN / "recovery" / "t-0" / "00000000000000000000.index").read_bytes()


def test_kafka_loads_every_case_as_it_is(oracle) -> None:
    """Kafka's loader reads every layout here with no index complaint, rebuild or truncation (clean
    shutdown: it trusts the indexes, as a broker does)."""
    results = oracle.load_logs([WRITTEN / c / "t-0" for c in CASES], clean=True, extra=["--no-records"])
    for case, res in zip(CASES, results):
        summary = res.one("summary")
        assert res.rc == 0 and summary["ok"], (case, res.stdout[-2000:])
        assert all(i["ok"] for i in summary["index_sanity_before_load"]), case
        assert not summary["truncations"] and not summary["recovery_ran"], case


def test_one_corrupt_batch_is_one_fault_not_one_line_per_index_entry(tmp_path: Path) -> None:
    """A flipped byte mid-segment: the corrupt batch is named once, and the index entries past the valid
    data (consequences: recovery's cut drops them) come as one finding per index file, with their count."""
    data = tmp_path / "data"
    shutil.copytree(WRITTEN / "leader-3.6", data)
    log = sorted((data / "t-0").glob("*.log"))[1]
    raw = bytearray(log.read_bytes())
    raw[5000] ^= 0xFF
    log.write_bytes(bytes(raw))
    (target,) = resolve([str(data / "t-0")])
    findings, _ = verify_partition(target.partition)
    errors = [f for f in findings if f.severity == ERROR]
    checks = [f.check for f in errors]
    assert checks.count("log-corrupt-batch") == 1
    assert checks.count("index-position") == 1 and checks.count("timeindex-offset") == 1
    assert len(errors) <= 6, [repr(f) for f in errors]
    (past,) = [f for f in errors if f.check == "index-position"]
    n = int(past.message.split(" entries", 1)[0])
    entries = (data / "t-0" / log.name.replace(".log", ".index")).stat().st_size // 8
    assert 10 < n < entries
