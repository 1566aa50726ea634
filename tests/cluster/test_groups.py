"""kstore groups: committed offsets as the group coordinator loads them (core + CLI)."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import tempfile

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.cluster.groups import load_groups, partition_for, reset_offsets_csv
from kstore_cli.record.text import java_string_hash
from kstore_cli.parsers.schema import write_message
from kstore_cli.parsers.schemas import GROUP_COORDINATOR
from tests.conftest import CORPUS, json_lines_summary

LOGS = CORPUS / "logs"
_register_commands()


def test_java_string_hash_and_partition_for():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("\u00e9t\u00e9") == (233 * 31 * 31 + 116 * 31 + 233)
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE: Utils.abs maps it to 0, not a negative number
    assert java_string_hash("polygenelubricants") == -(2 ** 31)
    assert partition_for("polygenelubricants", 50) == 0
    assert all(0 <= partition_for(g, 7) < 7 for g in ("a", "orders-app", "x" * 40))


def test_kafka_written_consumer_offsets():
    """The corpus partition (written by Kafka's own serde): repeated commits, tombstones, COMMIT and ABORT."""
    state = load_groups([str(LOGS / "__consumer_offsets-0")], num_partitions=1)
    assert sorted(state.groups) == ["eos-app", "orders-app"]  # 'analytics': offsets and group tombstoned
    orders = state.groups["orders-app"]
    assert (orders.kind, orders.protocol_type, orders.generation, orders.state) == ("classic", "consumer", 4, "Stable")
    # the members of its last GroupMetadataValue, their ConsumerProtocol assignments decoded
    assert [(m.client_id, m.client_host, m.group_instance_id, m.assignment) for m in orders.members] == [
        ("consumer-orders-app-0", "/10.0.0.10", None, [("orders", 0), ("orders", 2), ("payments", 0), ("payments", 2)]),
        ("consumer-orders-app-1", "/10.0.0.11", "static-1", [("orders", 1), ("payments", 1)])]
    assert orders.members[0].subscribed_topics == ["orders", "payments"]
    assert orders.last_commit_timestamp == 1700000195100
    assert state.groups["eos-app"].state == "Empty"  # a simple group: offsets, no group record
    got = {k: c.offset for k, c in orders.offsets.items()}
    assert got == {("orders", 0): 3929, ("orders", 1): 3915, ("orders", 2): 3926,
                   ("payments", 0): 3725, ("payments", 1): 3919, ("payments", 2): 3815}
    # txn at 50-52 committed (512..514); txn at 106-108 (525..527) aborted and discarded
    eos = state.groups["eos-app"]
    assert {k: c.offset for k, c in eos.offsets.items()} == {("orders", 0): 512, ("orders", 1): 513,
                                                             ("orders", 2): 514}
    assert state.missing_partitions == [] and state.skipped == []


def test_missing_partitions_and_unknown_group(tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    shutil.copytree(LOGS / "__consumer_offsets-0", data / "__consumer_offsets-0")
    state = load_groups([str(data)], num_partitions=3, groups=["orders-app", "polygenelubricants", "zz"])
    assert state.missing_partitions == [1, 2]
    assert "orders-app" in state.groups
    # a group whose partition is present but has no records is simply absent; one in a missing partition is unknown
    expected_unknown = {g: partition_for(g, 3) for g in ("polygenelubricants", "zz") if partition_for(g, 3) != 0}
    assert state.unknown_groups == expected_unknown
    res = CliRunner().invoke(cli, ["groups", str(data), "--offsets-partitions", "3", "--group", "zz"])
    assert res.exit_code == 1
    assert "missing from the given paths (of 3): 1, 2" in res.stderr
    assert "abs(javaStringHashCode(group)) % 3" in res.stderr


def _kstore(*args):
    return subprocess.run([sys.executable, "-m", "kstore_cli", *args], capture_output=True, text=True)


def test_bad_partition_count_is_usage_error(tmp_path):
    res = _kstore("groups", str(LOGS), "--offsets-partitions", "0")
    assert res.returncode == 2 and res.stderr.startswith("kstore: error:") and len(res.stderr.splitlines()) == 1
    shutil.copytree(LOGS / "__consumer_offsets-0", tmp_path / "__consumer_offsets-4")
    res = _kstore("groups", str(tmp_path), "--offsets-partitions", "3")
    assert res.returncode == 2 and "__consumer_offsets-4 found but the topic has 3 partitions" in res.stderr


def test_no_offsets_partition_is_not_silent():
    res = _kstore("groups", str(LOGS / "v2-none-0"))
    assert res.returncode == 1 and "no __consumer_offsets partition found" in res.stderr


def test_cli_reset_offsets_csv_and_json():
    res = CliRunner().invoke(cli, ["groups", str(LOGS / "__consumer_offsets-0"), "--offsets-partitions", "1",
                                   "--format", "reset-offsets", "--group", "orders-app", "--topic", "payments"])
    assert res.exit_code == 0, res.output
    # kafka-consumer-groups.sh --from-file: one TOPIC,PARTITION,OFFSET per line, no header
    assert res.stdout == "payments,0,3725\npayments,1,3919\npayments,2,3815\n"
    res = CliRunner().invoke(cli, ["groups", str(LOGS / "__consumer_offsets-0"), "--offsets-partitions", "1",
                                   "--json"])
    assert res.exit_code == 0
    doc = json_lines_summary(res.stdout)
    assert [g["group"] for g in doc["groups"]] == ["eos-app", "orders-app"]
    assert doc["missing_partitions"] == []


def test_reset_offsets_csv_sorted():
    state = load_groups([str(LOGS / "__consumer_offsets-0")], num_partitions=1)
    assert reset_offsets_csv([state.groups["eos-app"]], single_group=True) == "orders,0,512\norders,1,513\norders,2,514\n"
    # several groups: ConsumerGroupCommand's CsvRecordWithGroup layout, group first
    both = reset_offsets_csv(list(state.groups.values()), single_group=False).splitlines()
    assert both[:3] == ["eos-app,orders,0,512", "eos-app,orders,1,513", "eos-app,orders,2,514"]
    assert both[3] == "orders-app,orders,0,3929" and len(both) == 9
    # one group found but none named (the plan is for --all-groups): the group column stays
    assert reset_offsets_csv([state.groups["eos-app"]], single_group=False).startswith("eos-app,orders,0,512\n")


# ---- partitions written by Kafka's broker code (append-log), keys/values from the generated schemas ----

def _key(rtype, **fields):
    return (struct.pack(">h", rtype) + write_message(GROUP_COORDINATOR[_KEYS[rtype]], fields, rtype)).hex()


def _value(name, version, **fields):
    return (struct.pack(">h", version) + write_message(GROUP_COORDINATOR[name], fields, version)).hex()


_KEYS = {1: "OffsetCommitKey", 2: "GroupMetadataKey", 3: "ConsumerGroupMetadataKey", 11: "ShareGroupMetadataKey"}


def _commit(group, topic, part, offset, version=3):
    return {"keyHex": _key(1, group=group, topic=topic, partition=part),
            "valueHex": _value("OffsetCommitValue", version, offset=offset, metadata="", commitTimestamp=1)}


def _tomb(group, topic, part):
    return {"keyHex": _key(1, group=group, topic=topic, partition=part), "valueHex": None}


@pytest.fixture(scope="module")
def broker_written(oracle, tmp_path_factory):
    data = tmp_path_factory.mktemp("groups") / "data"
    data.mkdir()
    offsets_ops = [
        {"op": "leader", "records": [_commit("g1", "orders", 0, 5), _commit("g1", "orders", 1, 7),
                                      _commit("g2", "orders", 0, 1, version=1)]},
        {"op": "leader", "records": [_commit("g1", "orders", 0, 9), _tomb("g1", "orders", 1)]},
        {"op": "leader", "records": [{"keyHex": _key(2, group="g1"),
                                      "valueHex": _value("GroupMetadataValue", 4, protocolType="consumer",
                                                         generation=3, protocol="range", leader=None,
                                                         members=[])}]},
        {"op": "leader", "records": [{"keyHex": _key(3, GroupId="kip848"),
                                      "valueHex": _value("ConsumerGroupMetadataValue", 0, Epoch=12)},
                                     _commit("kip848", "orders", 0, 4)]},
        {"op": "leader", "transactional": True, "producerId": 100, "producerEpoch": 0, "baseSequence": 0,
         "records": [_commit("txg", "orders", 0, 3)]},
        {"op": "leader", "transactional": True, "producerId": 101, "producerEpoch": 0, "baseSequence": 0,
         "records": [_commit("txg", "orders", 1, 30)]},
        {"op": "marker", "producerId": 100, "producerEpoch": 0, "coordinatorEpoch": 1, "type": "commit"},
        {"op": "marker", "producerId": 101, "producerEpoch": 0, "coordinatorEpoch": 1, "type": "abort"},
        {"op": "leader", "records": [{"keyHex": _key(11, GroupId="share1"),
                                      "valueHex": _value("ShareGroupMetadataValue", 0, Epoch=2)}]},
        # an open transaction: never applied
        {"op": "leader", "transactional": True, "producerId": 102, "producerEpoch": 0, "baseSequence": 0,
         "records": [_commit("txg", "orders", 0, 99)]},
    ]
    orders_ops = [{"op": "leader", "records": [{"value": f"v{i}"} for i in range(12)]},
                  {"op": "highWatermark", "offset": 10}]

    specs = []
    for ops in (offsets_ops, orders_ops):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        f.write("".join(json.dumps(op) + "\n" for op in ops))
        f.close()
        specs.append(f.name)
    results = oracle.run_many([("append-log", [str(data / "__consumer_offsets-1"), "--config",
                                               "cleanup.policy=compact", "--checkpoints"]),
                               ("append-log", [str(data / "orders-0"), "--checkpoints"])], stdin_files=specs)
    for r in results:
        assert r.rc == 0, r.stdout[-3000:]
    return data


def test_broker_written_state(broker_written):
    state = load_groups([str(broker_written)], num_partitions=2)
    assert state.missing_partitions == [0] and state.skipped == []
    g1 = state.groups["g1"]
    assert (g1.kind, g1.generation, g1.members, g1.state) == ("classic", 3, [], "Empty")
    assert {k: c.offset for k, c in g1.offsets.items()} == {("orders", 0): 9}
    assert {k: c.offset for k, c in state.groups["g2"].offsets.items()} == {("orders", 0): 1}
    k = state.groups["kip848"]
    assert (k.kind, k.generation) == ("consumer", 12)
    assert (state.groups["share1"].kind, state.groups["share1"].generation) == ("share", 2)
    assert {k: c.offset for k, c in state.groups["txg"].offsets.items()} == {("orders", 0): 3}
    c = g1.offsets[("orders", 0)]
    assert (c.log_end_offset, c.high_watermark, c.lag) == (12, 10, 1)


def test_broker_written_cli_exit_reports_missing(broker_written):
    res = subprocess.run([sys.executable, "-m", "kstore_cli", "groups", str(broker_written),
                          "--offsets-partitions", "2", "--format", "reset-offsets", "--group", "g1"],
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert res.stdout == "orders,0,9\n"
    assert "missing from the given paths (of 2): 0" in res.stderr


def test_damaged_offsets_partition_fails_with_one_line(tmp_path):
    part = tmp_path / "__consumer_offsets-0"
    shutil.copytree(LOGS / "__consumer_offsets-0", part)
    log = part / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    log.write_bytes(bytes(data))
    res = _kstore("groups", str(part), "--offsets-partitions", "1")
    assert res.returncode == 1 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith(f"kstore: error: {log} at byte 0:")


def test_reset_offsets_csv_quotes_group_ids_as_jacksons_csv_reader_reads_them():
    from kstore_cli.errors import UsageError
    from kstore_cli.cluster.groups import CommittedOffset, Group

    def group(name):
        g = Group(name, 0)
        g.offsets[("orders", 0)] = CommittedOffset("orders", 0, 42, -1, "", 0)
        return g

    csv_text = reset_offsets_csv([group('a,b "x"'), group("plain")], single_group=False)
    assert csv_text == '"a,b ""x""",orders,0,42\nplain,orders,0,42\n'
    import csv
    import io
    assert list(csv.reader(io.StringIO(csv_text))) == [['a,b "x"', "orders", "0", "42"], ["plain", "orders", "0", "42"]]
    with pytest.raises(UsageError, match="line break"):
        reset_offsets_csv([group("two\nlines"), group("x")], single_group=False)
