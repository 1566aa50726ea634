"""Kafka's own loader (load-log, one JVM for the module) on the damaged partitions doctor diagnoses:
does Kafka fail, truncate, delete, rebuild or complete as doctor's `kafka` field says?"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tests.commands.test_doctor import doctor, findings, make_data_dir


def _corrupt_third_batch(log: Path) -> int:
    raw = bytearray(log.read_bytes())
    pos = 0
    for _ in range(2):
        pos += 12 + int.from_bytes(raw[pos + 8:pos + 12], "big")
    raw[pos + 70] ^= 0xFF
    log.write_bytes(bytes(raw))
    return pos


# name -> (partition, how to damage the data dir, load-log mode)
def _crc(data: Path) -> None:
    _corrupt_third_batch(data / "v2-none-0" / "00000000000000000000.log")


def _lso(data: Path) -> None:
    (data / "log-start-offset-checkpoint").write_text("0\n1\nv2-none 0 900\n")


def _epoch_count(data: Path) -> None:
    (data / "v2-none-0" / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n1 150\n")


def _epoch_number(data: Path) -> None:
    (data / "v2-none-0" / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n1 x150\n")


def _no_logs(data: Path) -> None:
    for f in (data / "transactional-0").glob("*.log"):
        f.unlink()


def _swap(data: Path) -> None:
    part = data / "v2-none-0"
    shutil.copy2(part / "00000000000000000174.log", part / "00000000000000000174.log.swap")


def _no_index(data: Path) -> None:
    (data / "v2-none-0" / "00000000000000000174.index").unlink()


def _no_timeindex(data: Path) -> None:
    (data / "v2-none-0" / "00000000000000000174.timeindex").unlink()


def _no_indexes(data: Path) -> None:
    _no_index(data)
    _no_timeindex(data)


CASES = {
    "crc": ("v2-none-0", _crc, "--unclean"),
    "lso": ("v2-none-0", _lso, "--unclean"),
    "epoch-count": ("v2-none-0", _epoch_count, "--clean"),
    "epoch-number": ("v2-none-0", _epoch_number, "--clean"),
    "no-logs": ("transactional-0", _no_logs, "--unclean"),
    "swap": ("v2-none-0", _swap, "--clean"),
    "no-index": ("v2-none-0", _no_index, "--clean"),
    "no-timeindex": ("v2-none-0", _no_timeindex, "--clean"),
    "no-indexes": ("v2-none-0", _no_indexes, "--clean"),
}


@pytest.fixture(scope="module")
def cases(oracle, tmp_path_factory):
    """{case: (doctor's findings, Kafka's load-log summary)}: doctor first (read-only), then Kafka
    loads the same directory, all cases in one JVM."""
    root = tmp_path_factory.mktemp("doctor-oracle")
    found, calls = {}, []
    for name, (partition, damage, mode) in CASES.items():
        data = make_data_dir(root, name, partitions=(partition,))
        damage(data)
        code, records = doctor(data)
        found[name] = (code, findings(records), data)
        calls.append(("load-log", [str(data / partition), mode, "--no-records", "--no-lookup"]))
    results = oracle.run_many(calls)
    return {name: (*found[name], res.one("summary")) for name, res in zip(CASES, results)}


def _own(messages, data: Path):
    """Kafka's log lines about this data dir (the JVM's log is shared by every call in the batch)."""
    return [m for m in messages if f"dir={data}]" in m or str(data) + "/" in m]


def test_crc_error_kafka_truncates_at_the_byte_doctor_names(cases):
    code, issues, data, kafka = cases["crc"]
    [f] = [i for i in issues if i["check"] == "log-corrupt-batch"]
    assert code == 1 and kafka["ok"]
    assert kafka["segments"][0]["size"] == f["position"]  # cut at the byte doctor named
    deleted = [m for m in _own(kafka["deleted_segments"], data) if "Deleting segments" in m]
    assert len(deleted) == 1 and deleted[0].count("LogSegment(") == 3 and "3 later segment(s)" in f["kafka"]


def test_log_start_beyond_end_kafka_deletes_every_segment(cases):
    code, issues, data, kafka = cases["lso"]
    [f] = [i for i in issues if i["check"] == "log-start-beyond-end"]
    assert code == 1 and "Deleting all segments" in f["kafka"]
    assert any("Deleting all segments because logEndOffset (520) is smaller than logStartOffset 900" in m
               for m in _own(kafka["deleted_segments"], data))
    assert kafka["log_end_offset"] == 900 and [s["size"] for s in kafka["segments"]] == [0]


def test_malformed_leader_epoch_checkpoint_kafka_fails_as_doctor_says(cases):
    code, issues, _data, kafka = cases["epoch-count"]
    [f] = [i for i in issues if i["check"] == "checkpoint-malformed"]
    assert code == 1 and f["kafka"].startswith("fail: KafkaStorageException 'Error while reading checkpoint file'")
    assert not kafka["ok"] and kafka["exception"].startswith(
        "org.apache.kafka.common.errors.KafkaStorageException: Error while reading checkpoint file")
    code, issues, _data, kafka = cases["epoch-number"]
    [f] = [i for i in issues if i["check"] == "checkpoint-malformed"]
    assert code == 1 and f["kafka"].startswith("fail: NumberFormatException")
    assert not kafka["ok"] and kafka["exception"] == 'java.lang.NumberFormatException: For input string: "x150"'


def test_partition_without_logs_kafka_starts_it_empty(cases):
    code, issues, _data, kafka = cases["no-logs"]
    [f] = [i for i in issues if i["check"] == "partition-without-logs"]
    assert code == 1 and "starts it empty at offset 0" in f["kafka"]
    assert kafka["ok"] and kafka["log_end_offset"] == 0 and [s["size"] for s in kafka["segments"]] == [0]


def test_leftover_swap_kafka_completes_it(cases):
    code, issues, _data, kafka = cases["swap"]
    [f] = [i for i in issues if i["check"] == "leftover-swap"]
    assert code == 1 and f["kafka"].startswith("complete")
    assert kafka["ok"] and "00000000000000000174.log.swap" in kafka["files_removed"]
    assert kafka["log_end_offset"] == 520


def test_missing_index_kafka_rebuilds_it(cases):
    code, issues, data, kafka = cases["no-index"]
    [f] = [i for i in issues if i["check"] == "missing-index"]
    assert code == 1 and f["kafka"].startswith("rebuild: 'Could not find offset index file'")
    # Kafka's CheckpointFile writes leader-epoch-checkpoint.tmp and renames it; a listing taken between
    # the two (seen once) shows the .tmp: it is Kafka's own write in flight, not a file it kept.
    added = [name for name in kafka["files_added"] if not name.endswith(".tmp")]
    assert kafka["ok"] and added == ["00000000000000000174.index"]
    assert any("Could not find offset index file" in m for m in _own(kafka["kafka_log_messages"], data))


def _time_index_after_load(kafka: dict) -> dict:
    [entry] = [i for i in kafka["indexes_after_load"] if i["file"] == "00000000000000000174.timeindex"]
    return entry


def test_missing_timeindex_beside_an_index_kafka_leaves_it_empty(cases):
    code, issues, _data, kafka = cases["no-timeindex"]
    [f] = [i for i in issues if i["check"] == "missing-timeindex"]
    assert code == 1 and f["kafka"].startswith("ignore: the .index is there")
    assert kafka["ok"] and not kafka["recovery_ran"]
    assert _time_index_after_load(kafka)["valid_bytes"] == 0  # LogSegment.sanityCheck resized it to 0


def test_missing_timeindex_and_index_kafka_recovers_the_segment_and_fills_both(cases):
    from kstore_cli.log.logdir import Partition
    from kstore_cli.log.producer_state import TxnState

    code, issues, data, kafka = cases["no-indexes"]
    [f] = [i for i in issues if i["check"] == "missing-timeindex"]
    assert code == 1 and f["kafka"].startswith("rebuild: the .index is missing too")
    # what Kafka wrote is what kstore's recovery writes for the segment: filled
    [segment] = [s for s in Partition(str(data / "v2-none-0")).segments if s.base_offset == 174]
    result, _state = segment.recover(TxnState)
    entry = _time_index_after_load(kafka)
    assert kafka["ok"] and entry["valid_bytes"] == len(result.timeindex_bytes) > 0
    assert entry["sha256"] == hashlib.sha256(result.timeindex_bytes).hexdigest()
