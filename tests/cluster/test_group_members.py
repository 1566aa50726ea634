"""Group members, state, last commit and total lag from a ``__consumer_offsets`` partition written through
Kafka's broker code (append-log): classic GroupMetadataValue v2-v4 with ConsumerProtocol subscription and
assignment bytes, KIP-848 consumer-group records, tombstones. The members are also read back through
Kafka's own --offsets-decoder (dump-log), so the expected columns are Kafka's reading of the same bytes."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import tempfile

import pytest

from kstore_cli.cluster.groups import load_groups
from kstore_cli.parsers.schema import write_message
from kstore_cli.parsers.schemas import (
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    GROUP_COORDINATOR_RECORDS,
)

LONG_TOPIC = "confluent.ksql.prod.transforms." + "x" * 150 + ".changelog"
ORDERS_ID = "b3JkZXJzLXRvcGljLWlkAA"  # a topic id (base64 of 16 bytes), written to orders-0/partition.metadata
UNNAMED_ID = "dW5uYW1lZC10b3BpYy1pZA"


def _versioned(msg, version, fields):
    return (struct.pack(">h", version) + write_message(msg, fields, version)).hex()


def _record(rtype, key, value_version=None, **value):
    key_msg, value_msg = GROUP_COORDINATOR_RECORDS[rtype]
    return {"keyHex": _versioned(key_msg, rtype, key),
            "valueHex": None if value_version is None else _versioned(value_msg, value_version, value)}


def _subscription(version, topics):
    return bytes.fromhex(_versioned(CONSUMER_PROTOCOL_SUBSCRIPTION, version, {"Topics": topics}))


def _assignment(version, parts):
    return bytes.fromhex(_versioned(CONSUMER_PROTOCOL_ASSIGNMENT, version, {
        "AssignedPartitions": [{"Topic": t, "Partitions": ps} for t, ps in parts]}))


def _member(member_id, client, host, instance, sub, assign, rebalance=60000):
    return {"memberId": member_id, "groupInstanceId": instance, "clientId": client, "clientHost": host,
            "rebalanceTimeout": rebalance, "sessionTimeout": 45000, "subscription": sub, "assignment": assign}


def _group(group, version, members, generation=5):
    return _record(2, {"group": group}, version, protocolType="consumer", generation=generation,
                   protocol="range", leader=members[0]["memberId"] if members else None,
                   currentStateTimestamp=1_700_000_000_000, members=members)


def _commit(group, topic, partition, offset, ts):
    return _record(1, {"group": group, "topic": topic, "partition": partition}, 3,
                   offset=offset, metadata="", commitTimestamp=ts)


def _modern(rtype, group, member=None, version=0, **value):
    key = {"GroupId": group} if member is None else {"GroupId": group, "MemberId": member}
    return _record(rtype, key, None if value.get("tombstone") else version,
                   **{k: v for k, v in value.items() if k != "tombstone"})


M1 = _member("m1", "c1", "/10.1.1.1", "inst-1", _subscription(1, ["orders", LONG_TOPIC]),
             _assignment(3, [("orders", [1, 0]), (LONG_TOPIC, [0])]))
M2 = _member("m2", "c2", "/10.1.1.2", None, _subscription(0, ["orders"]), _assignment(0, [("orders", [2])]))

OFFSETS_OPS = [
    # classic group "app": v3 with one member, then v4 with two (the latest record wins)
    {"op": "leader", "records": [_group("app", 3, [M1], generation=4)]},
    {"op": "leader", "records": [_group("app", 4, [M1, M2])]},
    {"op": "leader", "records": [_commit("app", "orders", 0, 15, 1000), _commit("app", "orders", 1, 18, 2000),
                                 _commit("app", LONG_TOPIC, 0, 4, 3000), _commit("app", "gone", 0, 1, 500)]},
    # "old": a v2 group with offsets, tombstoned (Dead, offsets left); "vanished": group record then tombstone
    {"op": "leader", "records": [_record(2, {"group": "old"}, 2, protocolType="consumer", generation=1,
                                         protocol="range", leader="o1", currentStateTimestamp=5,
                                         members=[_member("o1", "oc", "/10.9.9.9", None, b"", b"")]),
                                 _commit("old", "orders", 0, 3, 900)]},
    {"op": "leader", "records": [_record(2, {"group": "old"}), _group("vanished", 4, [M2]),
                                 _record(2, {"group": "vanished"})]},
    {"op": "leader", "records": [_commit("simple", "orders", 0, 20, 4000)]},
    # KIP-848 "kip": Stable; "kip2": group epoch past its assignment epoch (Assigning), topic named by no record
    {"op": "leader", "records": [
        _modern(4, "kip", Topics=[{"TopicId": ORDERS_ID, "TopicName": "orders", "NumPartitions": 3,
                                   "PartitionMetadata": []}]),
        _modern(3, "kip", Epoch=3),
        _modern(5, "kip", "ma", ClientId="ca", ClientHost="/10.2.2.2", RackId="r1", InstanceId=None,
                SubscribedTopicNames=["orders"], SubscribedTopicRegex=None, RebalanceTimeoutMs=30000,
                ServerAssignor="uniform"),
        _modern(7, "kip", "ma", TopicPartitions=[{"TopicId": ORDERS_ID, "Partitions": [0, 1]}]),
        _modern(6, "kip", AssignmentEpoch=3),
        _modern(8, "kip", "ma", MemberEpoch=3, PreviousMemberEpoch=2, State=0,
                AssignedPartitions=[{"TopicId": ORDERS_ID, "Partitions": [0, 1]}], PartitionsPendingRevocation=[]),
        _modern(3, "kip2", Epoch=4),
        _modern(5, "kip2", "mb", ClientId="cb", ClientHost="/10.2.2.3", RackId=None, InstanceId=None,
                SubscribedTopicNames=["orders"], SubscribedTopicRegex=None, RebalanceTimeoutMs=30000,
                ServerAssignor=None),
        _modern(6, "kip2", AssignmentEpoch=3),
        _modern(8, "kip2", "mb", MemberEpoch=3, PreviousMemberEpoch=2, State=0,
                AssignedPartitions=[{"TopicId": ORDERS_ID, "Partitions": [2]},
                                    {"TopicId": UNNAMED_ID, "Partitions": [0]}],
                PartitionsPendingRevocation=[]),
    ]},
]


def _spec(ops):
    f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    f.write("".join(json.dumps(op) + "\n" for op in ops))
    f.close()
    return f.name


@pytest.fixture(scope="module")
def written(oracle, tmp_path_factory):
    data = tmp_path_factory.mktemp("members") / "data"
    data.mkdir()
    calls = [("append-log", [str(data / "__consumer_offsets-0"), "--config", "cleanup.policy=compact",
                             "--checkpoints"]),
             ("append-log", [str(data / "orders-0"), "--checkpoints", "--topic-id", ORDERS_ID]),
             ("append-log", [str(data / "orders-1"), "--checkpoints"]),
             ("append-log", [str(data / f"{LONG_TOPIC}-0"), "--checkpoints"])]
    specs = [_spec(OFFSETS_OPS)] + [
        _spec([{"op": "leader", "records": [{"value": f"v{i}"} for i in range(20)]},
               {"op": "highWatermark", "offset": hw}]) for hw in (20, 20, 10)]
    segment = data / "__consumer_offsets-0" / "00000000000000000000.log"
    results = oracle.run_many(calls + [("dump-log", ["--files", str(segment), "--offsets-decoder"])],
                              stdin_files=specs + [None])
    for r in results[:-1]:
        assert r.rc == 0, r.stdout[-3000:]
    return data, results[-1].stdout


def _kafka_members(dump: str, group: str) -> list:
    """The members of `group`'s last GroupMetadataValue as Kafka's OffsetsMessageParser prints them."""
    members = None
    for line in dump.splitlines():
        m = re.search(r"key: (\{.*\}) payload: (\{.*\}|<DELETE>)$", line)
        if m and json.loads(m.group(1)) == {"type": "2", "data": {"group": group}}:
            members = None if m.group(2) == "<DELETE>" else json.loads(m.group(2))["data"]["members"]
    return members


def test_classic_members_as_kafka_reads_them(written):
    data, dump = written
    state = load_groups([str(data)], num_partitions=1)
    app = state.groups["app"]
    assert (app.kind, app.state, app.generation, app.protocol, app.leader) == ("classic", "Stable", 5, "range", "m1")
    kafka = _kafka_members(dump, "app")
    assert [m.member_id for m in app.members] == [k["memberId"] for k in kafka] == ["m1", "m2"]
    for ours, theirs in zip(app.members, kafka):
        assert (ours.client_id, ours.client_host, ours.group_instance_id, ours.session_timeout_ms,
                ours.rebalance_timeout_ms) == (theirs["clientId"], theirs["clientHost"], theirs["groupInstanceId"],
                                               theirs["sessionTimeout"], theirs["rebalanceTimeout"])
        assert ours.assignment == sorted((tp["topic"], p) for tp in theirs["assignment"]["assignedPartitions"]
                                         for p in tp["partitions"])
        assert ours.subscribed_topics == theirs["subscription"]["topics"]
    assert app.members[0].assignment == [(LONG_TOPIC, 0), ("orders", 0), ("orders", 1)]


def test_last_commit_and_total_lag(written):
    state = load_groups([str(written[0])], num_partitions=1)
    app = state.groups["app"]
    # orders HW 20: 5 + 2; the long topic HW 10: 6; "gone" is not in the dirs
    assert (app.last_commit_timestamp, app.total_lag, app.lag_unknown) == (3000, 13, 1)


def test_tombstones_dead_and_absent(written):
    state = load_groups([str(written[0])], num_partitions=1)
    old = state.groups["old"]
    assert (old.state, old.kind, old.members) == ("Dead", "offsets-only", [])
    assert {k: c.offset for k, c in old.offsets.items()} == {("orders", 0): 3}
    assert "vanished" not in state.groups and _kafka_members(written[1], "vanished") is None
    assert (state.groups["simple"].kind, state.groups["simple"].state) == ("offsets-only", "Empty")
    assert state.skipped == []


def test_consumer_groups_kip848(written):
    state = load_groups([str(written[0])], num_partitions=1)
    kip = state.groups["kip"]
    assert (kip.kind, kip.state, kip.generation, kip.assignment_epoch) == ("consumer", "Stable", 3, 3)
    [ma] = kip.members
    assert (ma.client_id, ma.client_host, ma.rack_id, ma.member_epoch, ma.member_state) == (
        "ca", "/10.2.2.2", "r1", 3, "STABLE")
    assert ma.assignment == ma.target_assignment == [("orders", 0), ("orders", 1)]
    kip2 = state.groups["kip2"]
    assert (kip2.state, kip2.generation, kip2.assignment_epoch) == ("Assigning", 4, 3)
    # orders named by kip's record; the other id by nothing: kept as the id and reported
    assert kip2.members[0].assignment == [(UNNAMED_ID, 0), ("orders", 2)]
    assert state.unresolved_topic_ids == [UNNAMED_ID]


def _kstore(*args):
    return subprocess.run([sys.executable, "-m", "kstore_cli", "groups", *args], capture_output=True, text=True)


def test_cli_members_state_and_json(written):
    data = str(written[0])
    res = _kstore(data, "--offsets-partitions", "1", "--members", "--group", "app")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "group\tconsumer_id\tgroup_instance_id\thost\tclient_id\tpartitions\tassignment",
        f"app\tm1\tinst-1\t/10.1.1.1\tc1\t3\t{LONG_TOPIC}:0 orders:0,1",
        "app\tm2\t-\t/10.1.1.2\tc2\t1\torders:2"]
    res = _kstore(data, "--offsets-partitions", "1", "--state")
    rows = [line.split("\t") for line in res.stdout.splitlines()]
    assert rows[0] == ["group", "type", "state", "generation", "members", "last_commit", "total_lag"]
    assert ["app", "classic", "Stable", "5", "2", "3000", "13"] in rows
    assert ["old", "offsets-only", "Dead", "-", "0", "900", "2"] not in rows  # orders-0 HW 20 - 3
    assert ["old", "offsets-only", "Dead", "-", "0", "900", "17"] in rows
    assert "topic ids shown as ids" in res.stderr and UNNAMED_ID in res.stderr
    res = _kstore(data, "--offsets-partitions", "1", "--json", "--group", "kip")
    group = json.loads(res.stdout.splitlines()[0])
    assert (group["state"], group["members"], group["assignment_epoch"]) == ("Stable", 1, 3)
    assert group["member_details"][0]["assignment"] == [{"topic": "orders", "partition": 0},
                                                        {"topic": "orders", "partition": 1}]
    for bad in (["--members", "--format", "reset-offsets"], ["--members", "--state"]):
        res = _kstore(data, "--offsets-partitions", "1", *bad)
        assert res.returncode == 2 and res.stderr.startswith("kstore: error:") and "go together" in res.stderr


def test_long_topic_name_gets_no_fixed_column(written):
    """TSV in a pipe: the name as it is, no padding; on a terminal the table folds to its width."""
    res = _kstore(str(written[0]), "--offsets-partitions", "1", "--group", "app", "--topics", "confluent.*")
    assert res.stdout.splitlines()[1] == f"app\t{LONG_TOPIC}\t0\t4\t20\t10\t6\t3000"
    script = (f"import sys; sys.stdout.isatty = lambda: True; sys.argv = ['kstore', 'groups', {str(written[0])!r}, "
              "'--offsets-partitions', '1', '--group', 'app']; from kstore_cli.__main__ import main; main()")
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={"COLUMNS": "100", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"})
    lines = res.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 100
    assert "last commit 1970-01-01T00:00:03Z, total lag 13 (1 of 4 partitions unknown)" in " ".join(lines)
    # the topic cell folds over several lines, whole: its pieces, read down the first column, are the name
    rows = [line for line in lines if line.startswith("  ") and not line.startswith("   ")]
    start = next(i for i, line in enumerate(rows) if line.split()[0].startswith("conflu"))
    pieces = [rows[start].split()[0]] + [line.split()[0] for line in rows[start + 1:]
                                         if len(line.split()) == 1]
    assert "".join(pieces) == LONG_TOPIC


def test_undecodable_consumer_protocol_bytes_are_said():
    """A consumer-protocol member whose assignment bytes do not parse keeps its other columns; the
    problem is named (Kafka's admin client fails describing such a group)."""
    from kstore_cli.cluster.group_members import classic_members

    good = _member("m1", "c1", "/h", None, _subscription(3, ["t"]), _assignment(1, [("t", [0])]))
    bad = _member("m2", "c2", "/h", None, b"", b"\x00\x00\x00")  # version 0, then a truncated array length
    members, problems = classic_members({"protocolType": "consumer", "members": [good, bad]})
    assert [(m.member_id, m.assignment, m.subscribed_topics) for m in members] == [
        ("m1", [("t", 0)], ["t"]), ("m2", None, None)]
    assert len(problems) == 1 and problems[0].startswith("member m2: consumer protocol bytes not decoded")
    # another protocol type (Kafka Connect): bytes not ours to read, assignment unknown, no problem
    members, problems = classic_members({"protocolType": "connect", "members": [bad]})
    assert members[0].assignment is None and problems == []
    # a newer assignment version is read as the highest known (ConsumerProtocol.checkAssignmentVersion)
    newer = bytes.fromhex("0009") + _assignment(3, [("t", [4])])[2:]
    members, _ = classic_members({"protocolType": "consumer",
                                  "members": [_member("m3", "c", "/h", None, b"", newer)]})
    assert members[0].assignment == [("t", 4)]
