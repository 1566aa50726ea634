"""kstore_cli.dump.dumplog: JSON Lines against Kafka's corpus, line formatting, and Kafka's iteration rules."""

from __future__ import annotations

import base64
import io
import json
import os
import struct
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from kstore_cli.dump.dumplog import (
    DumpOptions,
    dump_files,
    file_suffix,
    format_batch_line,
    format_record_line,
    java_absolute_path,
    java_file_path,
    optional_long,
    records_as_iterated,
    split_files_option,
)
from kstore_cli.errors import ExitStatus, KstoreError, UsageError
from kstore_cli.parsers import make_parser
from kstore_cli.record.reader import read_batches
from kstore_cli.record.builder import RecordSpec, build_control_batch, build_v2_batch
from tests.conftest import CORPUS, load_manifest

FILES = load_manifest()["files"]


def _names(*kinds: str) -> List[str]:
    return sorted(name for name, f in FILES.items() if f.get("kind") in kinds)


def dump_json(name: str, monkeypatch: pytest.MonkeyPatch, **options: Any) -> Tuple[int, List[Dict[str, Any]]]:
    """dump-segment --json on a corpus file (relative to the corpus dir, as Kafka's messages name it)."""
    monkeypatch.chdir(CORPUS)
    out, err = io.StringIO(), io.StringIO()
    status = dump_files([name], out, err, DumpOptions(json_lines=True, **options))
    assert err.getvalue() == ""
    return status, [json.loads(line) for line in out.getvalue().splitlines()]


def dump_text(files: List[str], **options: Any) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = dump_files(files, out, err, DumpOptions(**options))
    return status, out.getvalue(), err.getvalue()


def _b64_of_hex(value: Any) -> Any:
    return None if value is None else base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _java_message(error: dict) -> str:
    message = error["message"]
    prefix = "java.io.IOException: "
    return message[len(prefix):] if message.startswith(prefix) else message


BATCH_FIELDS = [
    "lastOffset", "count", "position", "size", "magic", "compression", "timestampType", "maxTimestamp",
    "producerId", "producerEpoch", "baseSequence", "lastSequence", "isTransactional", "isControl",
    "partitionLeaderEpoch", "crc", "isValid",
]


# ------------------------------------------------------------------------------------------ JSON vs corpus


@pytest.mark.parametrize("name", _names("log"))
def test_json_log_reproduces_every_batch_and_record(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = FILES[name]
    status, lines = dump_json(name, monkeypatch, deep_iteration=True, print_data=True)
    assert lines[0] == {"type": "file", "file": name}
    batches = [line for line in lines if line["type"] == "batch"]
    errors = [line for line in lines if line["type"] == "error"]
    assert len(batches) == len(want["batches"])
    expected_errors: List[Tuple[Any, str]] = []

    # Split the stream into (batch, its records) groups.
    groups: List[Tuple[dict, List[dict]]] = []
    for line in lines[1:]:
        if line["type"] == "batch":
            groups.append((line, []))
        elif line["type"] == "record":
            groups[-1][1].append(line)

    for (got, records), exp in zip(groups, want["batches"]):
        assert got["file"] == name
        for field in BATCH_FIELDS:
            assert got[field] == exp[field], (field, exp["position"])
        if "deleteHorizonMs" in exp:
            assert got["deleteHorizonMs"] == exp["deleteHorizonMs"]
        field_errors = exp.get("fieldErrors", {})
        if "baseOffset" in field_errors:
            assert got["baseOffset"] is None
            expected_errors.append((exp["position"], _java_message(field_errors["baseOffset"])))
        else:
            assert got["baseOffset"] == exp["baseOffset"]
        if not exp["isValid"]:
            expected_errors.append((exp["position"], "batch is not valid (CRC mismatch or size below the batch overhead)"))
        if "recordIterationError" in exp:
            assert records == []
            expected_errors.append((exp["position"], _java_message(exp["recordIterationError"])))
            continue
        assert len(records) == len(exp["records"]), exp["position"]
        for rec, want_rec in zip(records, exp["records"]):
            assert rec["offset"] == want_rec["offset"]
            assert rec["timestamp"] == want_rec["timestamp"]
            assert rec["sequence"] == want_rec["sequence"]
            assert rec["key"] == _b64_of_hex(want_rec["key"])
            assert rec["value"] == _b64_of_hex(want_rec["value"])
            assert rec["keySize"] == (-1 if want_rec["key"] is None else len(want_rec["key"]) // 2)
            assert rec["valueSize"] == (-1 if want_rec["value"] is None else len(want_rec["value"]) // 2)
            assert rec["headers"] == [{"key": k, "value": _b64_of_hex(v)} for k, v in want_rec["headers"]]
            assert rec["headerKeys"] == [k for k, _v in want_rec["headers"]]
            if "legacyCrc" in want_rec:
                assert rec["crc"] == want_rec["legacyCrc"]
                assert rec["isValid"] == want_rec["legacyIsValid"]
            else:
                assert "crc" not in rec
            if got["isControl"]:
                assert rec["control"]["type"] in ("ABORT", "COMMIT", "LEADER_CHANGE", "SNAPSHOT_HEADER",
                                                  "SNAPSHOT_FOOTER", "KRAFT_VERSION", "KRAFT_VOTERS", "UNKNOWN")
            else:
                assert "control" not in rec

    if "batchIterationError" in want:
        expected_errors.append((want["bytesCoveredByBatches"],
                                want["batchIterationError"]["message"]))
    elif want.get("trailingBytesNotReturnedAsBatch"):
        trailing = want["trailingBytesNotReturnedAsBatch"]
        expected_errors.append((want["bytesCoveredByBatches"],
                                f"Found {trailing} invalid bytes at the end of {os.path.basename(name)}"))
    assert sorted((e["position"], e["message"]) for e in errors) == sorted(expected_errors)
    assert all(e["file"] == name for e in errors)
    assert status == (ExitStatus.PROBLEMS if expected_errors else ExitStatus.OK)


def _first_log_with_control() -> str:
    for name in _names("log"):
        for batch in FILES[name]["batches"]:
            if batch["isControl"] and batch["records"]:
                return name
    raise AssertionError("the corpus has control batches")


def test_json_control_records_carry_marker_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    name = _first_log_with_control()
    _status, lines = dump_json(name, monkeypatch, deep_iteration=True)
    controls = [line["control"] for line in lines if line["type"] == "record" and "control" in line]
    assert controls
    for control in controls:
        if control["type"] in ("COMMIT", "ABORT"):
            assert isinstance(control["coordinatorEpoch"], int)
    # Without --print-data-log there are no key/value fields.
    assert all("key" not in line for line in lines if line["type"] == "record")


@pytest.mark.parametrize("name", _names("offset-index", "time-index"))
def test_json_index_lists_every_entry(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    want = FILES[name]
    _status, lines = dump_json(name, monkeypatch)
    kind = "index" if want["kind"] == "offset-index" else "timeindex"
    entries = [line for line in lines if line["type"] == kind]
    if kind == "index":
        got = [[e["offset"], e["position"]] for e in entries]
    else:
        got = [[e["timestamp"], e["offset"]] for e in entries]
    assert got == [list(e) for e in want["entries"]]
    notes = [line for line in lines if line["type"] == "note"]
    # Kafka's dump stops at the first unused (zero) slot after slot 0; JSON says how many it left out.
    if want.get("trailingZeroSlots"):
        assert len(notes) == 1
        assert notes[0]["message"].startswith(f"{want['trailingZeroSlots']} unused slot(s) from slot {len(want['entries'])} ")
    else:
        assert notes == []
    for error in (line for line in lines if line["type"] == "error"):
        # Only verification findings (Kafka's expected false positives for multi-batch appends).
        assert error["message"].startswith(("Index offset:", "Indexed offset:", "Index timestamp:")), error


@pytest.mark.parametrize("name", _names("transaction-index"))
def test_json_txnindex(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    status, lines = dump_json(name, monkeypatch)
    got = [{k: v for k, v in line.items() if k != "type"} for line in lines if line["type"] == "txnindex"]
    assert got == FILES[name]["abortedTxns"]
    assert status == 0


@pytest.mark.parametrize("name", _names("producer-state-snapshot"))
def test_json_snapshot(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    status, lines = dump_json(name, monkeypatch)
    got = [line for line in lines if line["type"] == "snapshot"]
    want = FILES[name]["producers"]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["producerId"] == w["producerId"]
        assert g["producerEpoch"] == w["producerEpoch"]
        assert g["coordinatorEpoch"] == w["coordinatorEpoch"]
        assert g["currentTxnFirstOffset"] == w["currentTxnFirstOffset"]
        assert g["lastTimestamp"] == w["lastTimestamp"]
        if w["lastOffset"] >= 0:
            assert (g["firstSequence"], g["lastSequence"], g["lastOffset"], g["offsetDelta"], g["timestamp"]) == (
                w["firstSequence"], w["lastSequence"], w["lastOffset"], w["offsetDelta"], w["lastTimestamp"])
        else:
            assert g["firstSequence"] is g["lastOffset"] is g["timestamp"] is None
    assert status == 0


def test_json_reports_problems_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "00000000000000000000.log"
    good = build_v2_batch([RecordSpec(0, 1, b"k", b"v")])
    bad = bytearray(build_v2_batch([RecordSpec(1, 2, b"k", b"v")]))
    bad[-1] ^= 0xFF  # CRC no longer matches
    log.write_bytes(good + bytes(bad) + b"\x00" * 10)
    missing = tmp_path / "00000000000000000099.log"
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    status = dump_files([str(missing), str(log)], out, err, DumpOptions(json_lines=True))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    kinds = [line["type"] for line in lines]
    assert kinds == ["file", "error", "file", "batch", "batch", "error", "error"]
    assert lines[1]["message"] == "no such file"
    assert lines[4]["isValid"] is False
    assert lines[6]["message"] == "Found 10 invalid bytes at the end of 00000000000000000000.log"
    assert status == ExitStatus.UNREADABLE


# ------------------------------------------------------------------------------------------ formatting


def _one_batch(data: bytes):
    (batch,) = list(read_batches(data))
    return batch


def test_batch_line_shape() -> None:
    batch = _one_batch(build_v2_batch([RecordSpec(5, 1700000000000, b"k", b"v")], partition_leader_epoch=3,
                                      producer_id=7, producer_epoch=1, base_sequence=2147483647,
                                      delete_horizon_ms=1700000001000))
    line = format_batch_line(batch)
    assert line.startswith("baseOffset: 5 lastOffset: 5 count: 1 baseSequence: 2147483647 lastSequence: 2147483647 "
                           "producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 3 isTransactional: false "
                           "isControl: false deleteHorizonMs: OptionalLong[1700000001000] position: 0 CreateTime: ")
    assert line.endswith(f" size: {batch.size} magic: 2 compresscodec: none crc: {batch.crc} isvalid: true")
    words = line.split(" ")
    assert all(w.endswith(":") for w in words[0::2]) and not any(w.endswith(":") for w in words[1::2])


def test_record_line_variants() -> None:
    batch = _one_batch(build_v2_batch([RecordSpec(0, 10, None, b"v", [("h", b"1"), ("", None)]),
                                       RecordSpec(1, 11, b"", b"")]))
    no_key, empty = batch.records()
    parser = make_parser()
    assert format_record_line(batch, no_key) == (
        "| offset: 0 CreateTime: 10 keySize: -1 valueSize: 1 sequence: -1 headerKeys: [h,]")
    assert format_record_line(batch, no_key, parser=parser, skip_record_metadata=True) == " payload: v"
    assert format_record_line(batch, empty, parser=parser, skip_record_metadata=True) == "| key:  payload: "
    assert format_record_line(batch, empty, parser=parser).endswith("headerKeys: [] key:  payload: ")
    assert format_record_line(batch, empty, skip_record_metadata=True) == ""


def test_control_record_never_prints_key_or_payload() -> None:
    batch = _one_batch(build_control_batch(10, 5, commit=True, coordinator_epoch=100, producer_id=98323,
                                           producer_epoch=99, partition_leader_epoch=7))
    (record,) = batch.records()
    line = format_record_line(batch, record, parser=make_parser())
    assert line == ("| offset: 10 CreateTime: 5 keySize: 4 valueSize: 6 sequence: -1 headerKeys: []"
                    " endTxnMarker: COMMIT coordinatorEpoch: 100")
    assert format_record_line(batch, record, parser=make_parser(), skip_record_metadata=True) == ""


def test_java_isms() -> None:
    assert split_files_option("a,b,,") == ["a", "b"]
    assert split_files_option("a,,b") == ["a", "", "b"]
    assert split_files_option("") == [""]
    assert java_file_path("dir//x.log") == "dir/x.log"
    assert java_file_path("dir/") == "dir"
    assert optional_long(None) == "OptionalLong.empty" and optional_long(3) == "OptionalLong[3]"
    assert java_absolute_path("a/./b") == os.getcwd() + "/a/./b"
    assert file_suffix("x/00.tar.log") == ".log"
    with pytest.raises(UsageError):
        file_suffix("dir.d/leader-epoch-checkpoint")


# ------------------------------------------------------------------------------------------ Kafka's iteration


def _uncompressed_batch_with_broken_record(break_at: int, count: int = 4) -> bytes:
    data = bytearray(build_v2_batch([RecordSpec(i, 100 + i, b"k%d" % i, b"v") for i in range(count)]))
    # Walk to record `break_at` and give it a negative header count (InvalidRecordException).
    pos = 61
    for _ in range(break_at):
        pos += 1 + data[pos] // 2  # single-byte varint length (records are tiny)
    length = data[pos] // 2
    assert data[pos + length] == 0  # header count 0 is the record's last byte
    data[pos + length] = 0x01  # zigzag -1
    return bytes(data)


@pytest.mark.parametrize("break_at", [0, 1, 3])
def test_uncompressed_batch_prints_records_before_the_bad_one(break_at: int) -> None:
    batch = _one_batch(_uncompressed_batch_with_broken_record(break_at))
    records, failure = records_as_iterated(batch)
    assert [r.offset for r in records] == list(range(break_at))
    assert failure is not None and "record headers -1" in failure.message


def test_leftover_bytes_fail_before_the_last_record_is_returned() -> None:
    data = bytearray(build_v2_batch([RecordSpec(i, 100, b"k", b"v") for i in range(3)]))
    struct.pack_into(">i", data, 57, 2)  # declare 2 records: the third one is left over
    batch = _one_batch(bytes(data))
    records, failure = records_as_iterated(batch)
    assert [r.offset for r in records] == [0]
    assert failure is not None and "records still remaining" in failure.message


def test_text_dump_of_partial_batch_then_error(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(_uncompressed_batch_with_broken_record(2))
    with pytest.raises(KstoreError) as info:
        dump_text([str(log)], deep_iteration=True)
    assert info.value.path == str(log) and info.value.position == 0


def test_non_consecutive_offsets_reported_most_recent_first(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"".join(build_v2_batch([RecordSpec(o, 1, b"k", b"v")]) for o in (0, 1, 4, 9, 10)))
    status, out, err = dump_text([str(log)], deep_iteration=True)
    assert err == f"Non-consecutive offsets in {log}\n  4 is followed by 9\n  1 is followed by 4\n"
    assert status == 0  # gaps are normal in compacted topics
    assert out.count("| offset: ") == 5


def test_max_bytes_cuts_at_the_first_batch_that_does_not_fit(tmp_path: Path) -> None:
    batches = [build_v2_batch([RecordSpec(o, 1, b"k", b"v")]) for o in range(3)]
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"".join(batches))
    status, out, _err = dump_text([str(log)], max_bytes=len(batches[0]) + len(batches[1]) + 5)
    assert out.count("baseOffset:") == 2 and "invalid bytes" not in out
    assert status == 0
    status, out, _err = dump_text([str(log)], max_bytes=len(batches[0]) - 1)
    assert out.count("baseOffset:") == 0 and status == 0


def test_unknown_codec_id_stops_mid_line_like_kafka(tmp_path: Path) -> None:
    data = bytearray(build_v2_batch([RecordSpec(0, 1, b"k", b"v")]))
    data[22] |= 0x06  # codec id 6
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(bytes(data))
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(KstoreError) as info:
        dump_files([str(log)], out, err, DumpOptions())
    assert "Unknown compression type id: 6" in info.value.message
    assert out.getvalue().endswith("deleteHorizonMs: OptionalLong.empty")  # no newline, as Kafka


def test_missing_sibling_index_for_timeindex_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000.log").write_bytes(build_v2_batch([RecordSpec(0, 1, b"k", b"v")]))
    (tmp_path / "00000000000000000000.timeindex").write_bytes(struct.pack(">qi", 1, 0))
    with pytest.raises(KstoreError) as info:
        dump_text([str(tmp_path / "00000000000000000000.timeindex")])
    assert info.value.exit_status == ExitStatus.UNREADABLE
    assert not (tmp_path / "00000000000000000000.index").exists()  # Kafka would create it; we never write


def test_library_does_not_import_click() -> None:
    import subprocess
    import sys

    code = ("import sys, kstore_cli.dump.dumplog\n"
            "print(','.join(m for m in sys.modules if m.split('.')[0] in ('click', 'rich')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_options_from_kafkas_flags() -> None:
    """kafka-dump-log's flag rules: any decoder implies --print-data-log (and deep iteration); --json names the
    decoder given; a class and a friendly decoder for one side is a usage error; the decoder-class deprecation
    lines are for text output only."""
    from kstore_cli.errors import UsageError
    from kstore_cli.dump.dumplog import MESSAGE_DECODERS, DumpOptions

    none = {name: False for name in MESSAGE_DECODERS}
    plain = DumpOptions.from_command_line(message_decoders=none)
    assert not plain.print_data and not plain.deep_iteration and plain.json_decoder is None
    offsets = DumpOptions.from_command_line(message_decoders={**none, "offsets": True}, json_lines=True)
    assert offsets.print_data and offsets.deep_iteration and offsets.json_decoder == "offsets"
    keys = DumpOptions.from_command_line(message_decoders=none, key_decoder="long", json_lines=True)
    assert keys.print_data and keys.json_decoder == "key=long,value=string"
    with pytest.raises(UsageError, match="not both"):
        DumpOptions.from_command_line(message_decoders=none, value_decoder="hex",
                                      value_decoder_class="org.apache.kafka.tools.api.StringDecoder")
    cls = "kafka.serializer.StringDecoder"
    text = DumpOptions.from_command_line(message_decoders=none, value_decoder_class=cls)
    assert len(text.decoder_notices) == 1 and "deprecated" in text.decoder_notices[0]
    both = DumpOptions.from_command_line(message_decoders=none, value_decoder_class=cls, key_decoder_class=cls)
    assert both.decoder_notices == text.decoder_notices * 2  # Kafka builds both decoders, value first
    assert DumpOptions.from_command_line(message_decoders=none, value_decoder_class=cls, json_lines=True).decoder_notices == ()
