"""``dump-segment --json`` with a decoder: keys and values come out decoded, as JSON values (issue 15)."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import main
from kstore_cli.parsers import RAW, make_parser
from kstore_cli.parsers.remote import REMOTE_RECORDS
from kstore_cli.parsers.schema import write_message
from kstore_cli.parsers.schemas import (
    GROUP_COORDINATOR_RECORDS,
    TRANSACTION_LOG_KEY,
    TRANSACTION_LOG_VALUE,
)
from tests.parsers.metadata_factory import LogWriter, frame, write_metadata_log


def run_json(args: List[str]) -> Tuple[int, List[dict]]:
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        try:
            main(["dump-segment", "--json", *args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        assert b"Traceback" not in err.getvalue()
        return code, [json.loads(line) for line in out.getvalue().decode().splitlines()]


def records(lines: List[dict]) -> List[dict]:
    return [r for r in lines if r["type"] == "record"]


def _log(tmp_path: Path, topic: str, pairs: List[Tuple[Optional[bytes], Optional[bytes]]]) -> str:
    part = tmp_path / topic
    part.mkdir(parents=True)
    w = LogWriter()
    for pair in pairs:
        w.batch([pair])
    path = part / "00000000000000000000.log"
    path.write_bytes(bytes(w.data))
    return str(path)


def _coordinator(record_type: int, key: dict, version: Optional[int], value: Optional[dict]) -> Tuple[bytes, Any]:
    key_msg, value_msg = GROUP_COORDINATOR_RECORDS[record_type]
    k = struct.pack(">h", record_type) + write_message(key_msg, key, record_type)
    if value is None:
        return k, None
    return k, struct.pack(">h", version) + write_message(value_msg, value, version)


def _commit(group: str, topic: str, partition: int, offset: int) -> Tuple[bytes, Any]:
    # field names as Kafka's OffsetCommitKey/Value.json spell them (lower case)
    return _coordinator(1, {"group": group, "topic": topic, "partition": partition}, 3,
                        {"offset": offset, "leaderEpoch": 4, "metadata": "m", "commitTimestamp": 1700000000000})


def test_offsets_decoder_answers_which_offsets_group_x_committed(tmp_path: Path) -> None:
    path = _log(tmp_path, "__consumer_offsets-0", [
        _commit("X", "orders", 0, 42),
        _commit("Y", "orders", 0, 7),
        _commit("X", "orders", 1, 99),
        (_commit("X", "orders", 1, 0)[0], None),  # tombstone
        _coordinator(3, {"GroupId": "X"}, 0, {"Epoch": 5}),
        (struct.pack(">h", 77), b"\x00\x00"),  # a record type this build does not know: skipped
    ])
    code, lines = run_json(["--offsets-decoder", path])
    recs = records(lines)
    # jq: select(.key.data.group == "X") | [.key.data.topic, .key.data.partition, .value.data.offset]
    x = [(r["key"]["data"]["topic"], r["key"]["data"]["partition"], r["value"] and r["value"]["data"]["offset"])
         for r in recs if isinstance(r["key"], dict) and r["key"]["data"].get("group") == "X"]
    assert x == [("orders", 0, 42), ("orders", 1, 99), ("orders", 1, None)]
    assert recs[0]["decoder"] == "offsets"
    assert recs[0]["key"] == {"type": "1", "data": {"group": "X", "topic": "orders", "partition": 0}}
    assert recs[0]["value"] == {"version": "3", "data": {"offset": 42, "leaderEpoch": 4, "metadata": "m",
                                                         "commitTimestamp": 1700000000000}}
    assert recs[4]["value"] == {"version": "0", "data": {"epoch": 5}}
    assert recs[5]["decodeError"] == "Unknown record type 77 at offset 5, skipping."
    assert recs[5]["key"] == "AE0="  # base64 of the bytes it could not decode
    assert code == 1  # a skipped record is a problem the exit status reports
    code, lines = run_json(["--offsets-decoder", "--max-bytes", str(5 * 80), path])
    assert all("decodeError" not in r for r in records(lines))


def test_no_decoder_keeps_base64_and_no_decoder_field(tmp_path: Path) -> None:
    path = _log(tmp_path, "t-0", [(b"k", b"\x00\xff")])
    code, lines = run_json(["--print-data-log", path])
    (r,) = records(lines)
    assert (code, r["key"], r["value"], "decoder" in r) == (0, "aw==", "AP8=", False)


@pytest.mark.parametrize("opts, key, value", [
    (["--key-decoder", "int", "--value-decoder", "long"], 7, -2),
    (["--key-decoder", "hex", "--value-decoder", "string"], "00000007", "\u00e9t\u00e9"),
    (["--value-decoder-class", "IntegerDecoder"], "\x00\x00\x00\x07", struct.unpack(">i", "\u00e9t\u00e9".encode()[:4])[0]),
])
def test_key_and_value_decoders(tmp_path: Path, opts: List[str], key: Any, value: Any) -> None:
    raw_value = struct.pack(">q", -2) if opts[-1] == "long" else "\u00e9t\u00e9".encode()
    path = _log(tmp_path, "t-0", [(struct.pack(">i", 7), raw_value)])
    code, lines = run_json([*opts, path])
    (r,) = records(lines)
    assert (code, r["key"], r["value"]) == (0, key, value)
    assert r["decoder"].startswith("key=")


def test_transaction_log_decoder(tmp_path: Path) -> None:
    key = struct.pack(">h", 0) + write_message(TRANSACTION_LOG_KEY, {"TransactionalId": "tx-1"}, 0)
    value = struct.pack(">h", 1) + write_message(TRANSACTION_LOG_VALUE, {
        "ProducerId": 1000, "ProducerEpoch": 3, "TransactionTimeoutMs": 60000, "TransactionStatus": 1,
        "TransactionPartitions": [{"Topic": "orders", "PartitionIds": [2, 0]}],
        "TransactionLastUpdateTimestampMs": 5, "TransactionStartTimestampMs": 4, "ClientTransactionVersion": 2}, 1)
    path = _log(tmp_path, "__transaction_state-0", [(key, value), (key, None), (struct.pack(">h", 3), b"")])
    code, lines = run_json(["--transaction-log-decoder", path])
    r, tomb, unknown = records(lines)
    assert r["key"] == {"version": 0, "data": {"transactionalId": "tx-1"}}
    assert r["value"]["state"] == "Ongoing" and r["value"]["version"] == 1
    assert r["value"]["data"]["transactionPartitions"] == [{"topic": "orders", "partitionIds": [2, 0]}]
    assert r["value"]["data"]["producerId"] == 1000 and r["value"]["data"]["clientTransactionVersion"] == 2
    assert tomb["value"] is None and tomb["key"]["data"]["transactionalId"] == "tx-1"
    assert unknown["decodeError"] == "unknown::version=3"
    assert code == 1


def test_remote_log_metadata_decoder_decodes_every_record_type(tmp_path: Path) -> None:
    tip = {"Name": "orders", "Id": "AAECAwQFBgcICQoLDA0ODw", "Partition": 3}
    delete = frame(2, 0, write_message(REMOTE_RECORDS[2][1], {"TopicIdPartition": tip, "BrokerId": 1,
                                                              "EventTimestampMs": 9, "RemotePartitionDeleteState": 1}, 0))
    segment = frame(0, 0, write_message(REMOTE_RECORDS[0][1], {
        "RemoteLogSegmentId": {"TopicIdPartition": tip, "Id": "AAAAAAAAAAAAAAAAAAAAAQ"}, "StartOffset": 0,
        "EndOffset": 99, "BrokerId": 1, "MaxTimestampMs": 7, "EventTimestampMs": 8,
        "SegmentLeaderEpochs": [{"LeaderEpoch": 0, "Offset": 0}], "SegmentSizeInBytes": 1024,
        "CustomMetadata": b"\x01", "RemoteLogSegmentState": 0}, 0))
    path = _log(tmp_path, "__remote_log_metadata-0", [(None, delete), (None, segment)])
    code, lines = run_json(["--remote-log-metadata-decoder", path])
    d, s = records(lines)
    assert d["value"]["type"] == "RemotePartitionDeleteMetadata"
    assert d["value"]["data"]["topicIdPartition"] == {"name": "orders", "id": tip["Id"], "partition": 3}
    assert s["value"]["type"] == "RemoteLogSegmentMetadata"
    assert s["value"]["data"]["customMetadata"] == "AQ==" and s["value"]["data"]["segmentSizeInBytes"] == 1024
    assert code == 0


def test_cluster_metadata_json_is_the_text_payload_parsed(tmp_path: Path) -> None:
    """Every decoded value is exactly the JSON Kafka's text shows (the text is checked against Kafka's
    dump-log in tests/parsers/test_metadata_dump_oracle.py), as a JSON value rather than a string."""
    path = write_metadata_log(tmp_path)
    code, lines = run_json(["--cluster-metadata-decoder", str(path)])
    parser = make_parser(cluster_metadata=True)
    from kstore_cli.record.reader import read_batches
    from kstore_cli.dump.dumplog import records_as_iterated

    data = path.read_bytes()
    expected = []
    for batch in read_batches(data, end=len(data), path=str(path), check_crc=True):
        if batch.is_control:
            continue
        for rec in records_as_iterated(batch)[0]:
            expected.append((rec.offset, parser.parse(rec.offset, rec.key, rec.value)[1]))
    got = {r["offset"]: r for r in records(lines) if "control" not in r}
    assert len(got) == len(expected) > 150
    skipped = 0
    for offset, text in expected:
        r = got[offset]
        assert r["decoder"] == "cluster-metadata"
        if text.startswith("Error at"):
            skipped += 1
            assert r["decodeError"] == text
        else:
            assert "decodeError" not in r
            assert r["value"] == json.loads(text), offset
    assert skipped == 9 and code == 1
    begin = [r for r in got.values() if isinstance(r["value"], dict) and r["value"]["type"] == "BEGIN_TRANSACTION_RECORD"]
    assert begin and all(isinstance(r["value"]["data"], dict) for r in begin)
    assert any(r["value"]["data"].get("value") == "NaN" for r in got.values()
               if isinstance(r["value"], dict) and r["value"]["type"] == "CLIENT_QUOTA_RECORD")


def test_decode_json_protocol_marks_undecoded_parts_raw() -> None:
    d = make_parser(cluster_metadata=True).decode_json(0, b"k", frame(20, 0, b"\x00"))
    assert d.key is RAW and d.value == {"type": "NO_OP_RECORD", "version": 0, "data": {}} and d.error is None


@pytest.mark.parametrize("decoder", ["offsets", "share_group_state", "cluster_metadata"])
def test_json_values_are_the_text_payloads_parsed_for_every_record_type(decoder: str) -> None:
    """For the decoders whose text is JSON, decode_json gives exactly that JSON (or Kafka's skip text)."""
    from kstore_cli.parsers.schemas import GROUP_COORDINATOR_RECORDS, SHARE_COORDINATOR_RECORDS
    from tests.parsers.metadata_factory import damaged_values, metadata_values
    from tests.parsers.test_coordinator_dump_oracle import consumer_group_metadata, coordinator_pairs, skipped_pairs

    if decoder == "cluster_metadata":
        pairs = [(None, v) for _, _, v in metadata_values()] + [(None, v) for v in damaged_values()]
    else:
        table = GROUP_COORDINATOR_RECORDS if decoder == "offsets" else SHARE_COORDINATOR_RECORDS
        pairs = coordinator_pairs(table) + skipped_pairs(table)
        if decoder == "offsets":
            pairs += consumer_group_metadata()
    parser = make_parser(**{decoder: True})
    for offset, (key, value) in enumerate(pairs):
        key_text, payload = parser.parse(offset, key, value)
        d = parser.decode_json(offset, key, value)
        skip = key_text if decoder != "cluster_metadata" else payload
        if skip is not None and ("skipping." in skip):
            assert (d.key, d.value, d.error) == (RAW, RAW, skip)
            continue
        assert d.error is None
        if decoder == "cluster_metadata":
            assert d.key is RAW and d.value == json.loads(payload)
        else:
            assert d.key == json.loads(key_text)
            assert d.value == (None if payload == "<DELETE>" else json.loads(payload))
