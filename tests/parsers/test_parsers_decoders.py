"""Key/value decoders, Java's UTF-8 decoding, control records and parser precedence."""

from __future__ import annotations

import pytest

from kstore_cli.errors import RecordParseError, UsageError
from kstore_cli.parsers import decode_control, make_parser, render_control
from kstore_cli.parsers.coordinator import OffsetsMessageParser
from kstore_cli.parsers.decoders import decode_utf8_java
from kstore_cli.parsers.metadata import ClusterMetadataMessageParser
from kstore_cli.parsers.txnlog import TransactionLogMessageParser, format_partitions, topic_partition_hash

R = "\ufffd"


@pytest.mark.parametrize("data,text", [
    (b"\xc3\xa9", "é"),
    (b"\x00\x01\x02\xff", "\x00\x01\x02" + R),
    (b"\xe2\x82", R),                    # truncated 3-byte sequence at the end: one replacement
    (b"\xe2\x82A", R + "A"),
    (b"\xc0\x80", R + R),                # overlong NUL
    (b"\xe0\x80\x80", R * 3),            # overlong 3-byte
    (b"\xed\xa0\x80", R),                # encoded surrogate: ONE replacement in Java, three in Python
    (b"\xed\xa0\x80x", R + "x"),
    (b"\xed\xa0", R),                    # truncated surrogate at the end
    (b"\xf0\x9f\x98", R),                # truncated 4-byte at the end
    (b"\xf0\x9f\x98A", R + "A"),
    (b"\xf5\x80", R + R),
    (b"\xf0\x9f\x98\x80", "\U0001F600"),
])
def test_java_utf8(data: bytes, text: str) -> None:
    assert decode_utf8_java(data) == text


def test_default_and_named_decoders() -> None:
    assert make_parser().parse(0, b"k", None) == ("k", None)
    assert make_parser(key_decoder="hex", value_decoder="base64").parse(0, b"\x01\xff", b"hi") == ("01ff", "aGk=")
    p = make_parser(key_decoder="org.apache.kafka.tools.api.IntegerDecoder",
                    value_decoder="kafka.serializer.LongDecoder")
    assert p.parse(0, b"\xff\xff\xff\xfe", b"\x00" * 7 + b"\x09") == ("-2", "9")
    with pytest.raises(RecordParseError, match="IntegerDecoder needs 4 bytes"):
        p.parse(0, b"\x01", None)


def test_unknown_decoder_is_a_usage_error_naming_the_accepted_values() -> None:
    with pytest.raises(UsageError, match="accepted: string, hex, base64, int, long"):
        make_parser(value_decoder="com.example.Nope")


def test_precedence() -> None:
    assert isinstance(make_parser(offsets=True, transaction_log=True), OffsetsMessageParser)
    assert isinstance(make_parser(transaction_log=True, cluster_metadata=True), TransactionLogMessageParser)
    assert isinstance(make_parser(cluster_metadata=True, share_group_state=True), ClusterMetadataMessageParser)


def test_control_texts() -> None:
    assert render_control(1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x07") == " endTxnMarker: COMMIT coordinatorEpoch: 7"
    assert render_control(2, b"\x00\x00\x00\x02", b"") == " controlType: LEADER_CHANGE(2)"
    assert render_control(99, b"\x00\x00\x00\x63", b"xx") == " controlType: UNKNOWN(99)"
    assert render_control(4, b"\x00\x00\x00\x04", b"\x00\x00\x00") == ' SnapshotFooter {"version":0}'
    assert decode_control(0, b"\x00\x00\xff\xff\xff\xff") == {"version": 0, "coordinatorEpoch": -1}
    with pytest.raises(RecordParseError, match="Must have at least 6 bytes, but found only 2"):
        render_control(0, b"\x00\x00\x00\x00", b"\x00\x00")


def test_offsets_parser_errors() -> None:
    p = OffsetsMessageParser()
    with pytest.raises(RecordParseError, match="^Failed to decode message at offset 4 using offset topic"):
        p.parse(4, None, b"x")
    assert p.parse(0, b"", None) == ("Error at offset 0, skipping. Could not read version from key's buffer.", None)
    assert p.parse(0, b"\x7f\xff", None) == ("Unknown record type 32767 at offset 0, skipping.", None)
    key = b"\x00\x03\x00\x05group"
    assert p.parse(0, key, b"\x00\x00\x00\x00\x00\x0a\x00") == (
        '{"type":"3","data":{"groupId":"group"}}', '{"version":"0","data":{"epoch":10}}')
    # A value version newer than validVersions: Kafka's dump-log reads and prints it (checked with the oracle).
    assert p.parse(0, key, b"\x00\x05\x00\x00\x00\x0a\x00") == (
        '{"type":"3","data":{"groupId":"group"}}', '{"version":"5","data":{"epoch":10}}')


def test_txn_partitions_follow_scala_hashset_order() -> None:
    assert topic_partition_hash("a", 0) == 31 * 31 + 97
    assert format_partitions([]) == "[]"
    assert format_partitions([("t", [5, 4, 5])]) == "[t-5,t-4]"


def test_cluster_metadata_frame_errors() -> None:
    p = ClusterMetadataMessageParser()
    assert p.parse(3, None, None) == (None, "Error at 3, skipping. Error while reading frame version")
    assert p.parse(3, None, b"\x00") == (None, "Error at 3, skipping. Could not deserialize metadata record with "
                                         "frame version 0. Note that upgrades from the preview release of KRaft "
                                         "in 2.8 to newer versions are not supported.")
    assert p.parse(3, None, b"\x01\x63\x00") == (
        None, "Error at 3, skipping. org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id 99")
    # NoOpRecord is api key 20 (MetadataRecordType.NO_OP_RECORD), not 17 (BROKER_REGISTRATION_CHANGE_RECORD).
    assert p.parse(3, None, b"\x01\x14\x00\x00\x07") == (None, "Error at 3, skipping. Found 1 byte(s) of garbage after 20")
    assert p.parse(3, None, b"\x01\x14\x00\x00") == (None, '{"type":"NO_OP_RECORD","version":0,"data":{}}')
    # BeginTransactionRecord (23) with its tagged Name: the bootstrap transaction's first record.
    assert p.parse(3, None, b"\x01\x17\x00\x01\x00\x05\x04abc") == (
        None, '{"type":"BEGIN_TRANSACTION_RECORD","version":0,"data":{"name":"abc"}}')
