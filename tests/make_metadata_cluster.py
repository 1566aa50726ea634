"""Writes fixtures/kraft-cluster/: KRaft metadata logs of a small cluster's history, as a controller writes them.

Run from the repository root: ``python -m tests.make_metadata_cluster``. The records are written by kstore's
own builders (``write_message`` + ``build_v2_batch``); tests/cluster/test_metadata_image_oracle.py checks that
Kafka's own loader (the oracle's ``metadata-image``) reads every one of them and builds the same image.

Cases (each a data dir holding ``meta.properties`` and ``__cluster_metadata-0``):

* ``full``: one segment from offset 0 with the whole history (below), plus a snapshot at ``SNAPSHOT_END``
  holding the records before it; the log ends inside an unfinished metadata transaction.
* ``trimmed``: the same snapshot, and only the log after it (the older segment deleted, as a controller
  does once a snapshot covers it).
* ``newer``: ``full`` with a FeatureLevelRecord of a version Kafka 4.0 does not know before the open transaction.
* ``levels``: every metadata.version feature level Kafka 4.0 knows and every ZK migration state, a batch each.
* ``bootstrap``: only ``bootstrap.checkpoint`` in the log dir, no ``__cluster_metadata-0`` (a freshly formatted
  node).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from kstore_cli.parsers.metadata import METADATA_RECORD_TYPES
from kstore_cli.parsers.schema import write_message
from kstore_cli.parsers.schemas import LEADER_CHANGE_MESSAGE, SNAPSHOT_FOOTER_RECORD, SNAPSHOT_HEADER_RECORD
from kstore_cli.record.builder import RecordSpec, build_v2_batch

ROOT = Path(__file__).resolve().parent.parent / "fixtures" / "kraft-cluster"
BASE_TS = 1_700_000_000_000
CLUSTER_ID = "kstoreClusterIdTest0001"
#: SCRAM and delegation-token secrets written into the log: no kstore output may show them
SCRAM_SALT = b"SALT-must-not-leak-0123456789"
SCRAM_STORED_KEY = b"STOREDKEY-must-not-leak-abcdef"
SCRAM_SERVER_KEY = b"SERVERKEY-must-not-leak-ghijkl"


def uid(n: int) -> str:
    """A fixed, readable Kafka Uuid (base64 of 16 bytes)."""
    import base64

    return base64.urlsafe_b64encode(struct.pack(">QQ", 0x1000 + n, 0xABC0 + n)).decode().rstrip("=")


TOPIC_ORDERS, TOPIC_LEGACY, TOPIC_TXN, TOPIC_ABORTED, TOPIC_OPEN, TOPIC_OFFSETS = (uid(i) for i in range(1, 7))
DIR_A, DIR_B, DIR_C = uid(10), uid(11), uid(12)


def rec(name: str, version: int, **values: Any) -> Tuple[Optional[bytes], bytes]:
    """A metadata record (no key, framed value) of the type whose message is ``name``."""
    for api_key, t in METADATA_RECORD_TYPES.items():
        if t.message.name == name:
            body = write_message(t.message, values, version)
            return None, bytes([1]) + _uv(api_key) + _uv(version) + body
    raise KeyError(name)


def _uv(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def control(type_id: int, msg, values: Dict[str, Any]) -> Tuple[bytes, bytes]:
    return struct.pack(">hh", 0, type_id), write_message(msg, values, 0)


def broker(bid: int, epoch: int, dirs: List[str], rack: Optional[str]) -> Tuple[Optional[bytes], bytes]:
    return rec("RegisterBrokerRecord", 3, BrokerId=bid, IncarnationId=uid(100 + bid), BrokerEpoch=epoch,
               EndPoints=[{"Name": "PLAINTEXT", "Host": f"broker{bid}.example", "Port": 9092, "SecurityProtocol": 0},
                          {"Name": "SSL", "Host": f"broker{bid}.example", "Port": 9093, "SecurityProtocol": 1}],
               Features=[{"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": 21}],
               Rack=rack, Fenced=True, LogDirs=dirs)


def partition(topic: str, p: int, replicas: List[int], dirs: List[str], version: int = 2) -> Tuple[Optional[bytes], bytes]:
    extra = {"Directories": dirs} if version >= 1 else {}
    return rec("PartitionRecord", version, PartitionId=p, TopicId=topic, Replicas=replicas, Isr=replicas,
               RemovingReplicas=[], AddingReplicas=[], Leader=replicas[0], LeaderEpoch=0, PartitionEpoch=0, **extra)


#: The history, batch by batch (each a list of records; ("control", ...) marks a control batch).
def history() -> List[Tuple[str, List[Tuple[Optional[bytes], bytes]]]]:
    H: List[Tuple[str, List[Tuple[Optional[bytes], bytes]]]] = []
    H.append(("control", [control(2, LEADER_CHANGE_MESSAGE, {"Version": 0, "LeaderId": 3000,
                                                              "Voters": [{"VoterId": 3000}],
                                                              "GrantingVoters": [{"VoterId": 3000}]})]))
    H.append(("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=21),
                       rec("FeatureLevelRecord", 0, Name="group.version", FeatureLevel=1)]))
    H.append(("data", [rec("RegisterControllerRecord", 0, ControllerId=3000, IncarnationId=uid(300),
                           ZkMigrationReady=False,
                           EndPoints=[{"Name": "CONTROLLER", "Host": "ctl.example", "Port": 9094, "SecurityProtocol": 0}],
                           Features=[{"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": 21}]),
                       broker(1, 10, [DIR_A], "rack-a"), broker(2, 11, [DIR_B], "rack-b"),
                       broker(3, 12, [DIR_C], None)]))
    H.append(("data", [rec("UnfenceBrokerRecord", 0, Id=1, Epoch=10), rec("UnfenceBrokerRecord", 0, Id=2, Epoch=11),
                       rec("UnfenceBrokerRecord", 0, Id=3, Epoch=12),
                       rec("ProducerIdsRecord", 0, BrokerId=1, BrokerEpoch=10, NextProducerId=1000)]))
    H.append(("data", [rec("TopicRecord", 0, Name="orders", TopicId=TOPIC_ORDERS),
                       partition(TOPIC_ORDERS, 0, [1, 2, 3], [DIR_A, DIR_B, DIR_C]),
                       partition(TOPIC_ORDERS, 1, [2, 3, 1], [DIR_B, DIR_C, DIR_A]),
                       partition(TOPIC_ORDERS, 2, [3, 1, 2], [DIR_C, DIR_A, DIR_B]),
                       rec("ConfigRecord", 0, ResourceType=2, ResourceName="orders", Name="cleanup.policy",
                           Value="compact,delete"),
                       rec("ConfigRecord", 0, ResourceType=2, ResourceName="orders", Name="retention.ms", Value="86400000"),
                       rec("ConfigRecord", 0, ResourceType=2, ResourceName="orders", Name="min.insync.replicas",
                           Value="2")]))
    H.append(("data", [rec("TopicRecord", 0, Name="legacy", TopicId=TOPIC_LEGACY),
                       partition(TOPIC_LEGACY, 0, [1], [], version=0),
                       rec("ConfigRecord", 0, ResourceType=2, ResourceName="legacy", Name="retention.ms", Value="1000"),
                       rec("TopicRecord", 0, Name="__consumer_offsets", TopicId=TOPIC_OFFSETS),
                       partition(TOPIC_OFFSETS, 0, [1, 2], [DIR_A, DIR_B]),
                       partition(TOPIC_OFFSETS, 1, [2], [DIR_B])]))
    H.append(("data", [rec("ConfigRecord", 0, ResourceType=4, ResourceName="", Name="log.retention.hours", Value="100"),
                       rec("ConfigRecord", 0, ResourceType=4, ResourceName="1", Name="log.cleaner.threads", Value="2"),
                       rec("ConfigRecord", 0, ResourceType=4, ResourceName="", Name="num.io.threads", Value="16"),
                       rec("ConfigRecord", 0, ResourceType=2, ResourceName="orders", Name="retention.ms", Value=None),
                       rec("ConfigRecord", 0, ResourceType=4, ResourceName="", Name="num.io.threads", Value=None)]))
    H.append(("data", [rec("PartitionChangeRecord", 2, PartitionId=0, TopicId=TOPIC_ORDERS, Isr=[1, 2], Leader=2,
                           EligibleLeaderReplicas=[3], LastKnownElr=[]),
                       rec("PartitionChangeRecord", 1, PartitionId=1, TopicId=TOPIC_ORDERS,
                           Directories=[DIR_B, DIR_A, DIR_A]),
                       rec("PartitionChangeRecord", 1, PartitionId=2, TopicId=TOPIC_ORDERS, Replicas=[3, 1],
                           Isr=[3, 1], LeaderRecoveryState=1, Directories=[DIR_C, DIR_A]),
                       rec("PartitionChangeRecord", 0, PartitionId=2, TopicId=TOPIC_ORDERS, Leader=3,
                           LeaderRecoveryState=0)]))
    H.append(("data", [rec("AccessControlEntryRecord", 0, Id=uid(200), ResourceType=2, ResourceName="orders",
                           PatternType=3, Principal="User:alice", Host="*", Operation=3, PermissionType=3),
                       rec("AccessControlEntryRecord", 0, Id=uid(201), ResourceType=3, ResourceName="app-",
                           PatternType=4, Principal="User:bob", Host="10.0.0.1", Operation=2, PermissionType=2),
                       rec("AccessControlEntryRecord", 0, Id=uid(202), ResourceType=4, ResourceName="kafka-cluster",
                           PatternType=3, Principal="User:admin", Host="*", Operation=2, PermissionType=3),
                       rec("RemoveAccessControlEntryRecord", 0, Id=uid(202))]))
    H.append(("data", [rec("ClientQuotaRecord", 0, Entity=[{"EntityType": "user", "EntityName": "alice"}],
                           Key="producer_byte_rate", Value=1048576.0, Remove=False),
                       rec("ClientQuotaRecord", 0, Entity=[{"EntityType": "user", "EntityName": None}],
                           Key="consumer_byte_rate", Value=2048.5, Remove=False),
                       rec("ClientQuotaRecord", 0, Entity=[{"EntityType": "user", "EntityName": "alice"},
                                                           {"EntityType": "client-id", "EntityName": "app"}],
                           Key="request_percentage", Value=50.0, Remove=False),
                       rec("ClientQuotaRecord", 0, Entity=[{"EntityType": "user", "EntityName": "alice"}],
                           Key="consumer_byte_rate", Value=1.0, Remove=False),
                       rec("ClientQuotaRecord", 0, Entity=[{"EntityType": "user", "EntityName": "alice"}],
                           Key="consumer_byte_rate", Value=0.0, Remove=True)]))
    H.append(("data", [rec("UserScramCredentialRecord", 0, Name="alice", Mechanism=1, Salt=SCRAM_SALT,
                           StoredKey=SCRAM_STORED_KEY, ServerKey=SCRAM_SERVER_KEY, Iterations=4096),
                       rec("UserScramCredentialRecord", 0, Name="bob", Mechanism=2, Salt=SCRAM_SALT + b"b",
                           StoredKey=SCRAM_STORED_KEY + b"b", ServerKey=SCRAM_SERVER_KEY + b"b", Iterations=8192),
                       rec("UserScramCredentialRecord", 0, Name="carol", Mechanism=2, Salt=SCRAM_SALT + b"c",
                           StoredKey=SCRAM_STORED_KEY + b"c", ServerKey=SCRAM_SERVER_KEY + b"c", Iterations=8192),
                       rec("DelegationTokenRecord", 0, Owner="User:alice", Requester="User:alice", Renewers=["User:bob"],
                           IssueTimestamp=BASE_TS, MaxTimestamp=BASE_TS + 10**9, ExpirationTimestamp=BASE_TS + 10**8,
                           TokenId="token-one"),
                       rec("DelegationTokenRecord", 0, Owner="User:bob", Requester="User:bob", Renewers=[],
                           IssueTimestamp=BASE_TS, MaxTimestamp=BASE_TS + 10**9, ExpirationTimestamp=BASE_TS + 10**8,
                           TokenId="token-two"),
                       rec("RemoveDelegationTokenRecord", 0, TokenId="token-two")]))
    # ---- SNAPSHOT_END: the snapshot covers the batches above ----
    H.append(("data", [rec("BeginTransactionRecord", 0, Name="create txn-topic"),
                       rec("TopicRecord", 0, Name="txn-topic", TopicId=TOPIC_TXN)]))
    H.append(("data", [partition(TOPIC_TXN, 0, [2], [DIR_B]), rec("EndTransactionRecord", 0)]))
    H.append(("data", [rec("BeginTransactionRecord", 0, Name="create aborted"),
                       rec("TopicRecord", 0, Name="aborted", TopicId=TOPIC_ABORTED),
                       partition(TOPIC_ABORTED, 0, [1], [DIR_A])]))
    H.append(("data", [rec("AbortTransactionRecord", 0, Reason="test")]))
    # carol's removal comes after the snapshot: in one delta with bob's first credential, Kafka 4.0's
    # ScramDelta.apply loses bob (it drops the mechanism's map when a removal empties it, then puts bob into
    # the dropped map, depending on HashMap order) -- a Kafka bug kstore does not copy
    H.append(("data", [rec("RemoveUserScramCredentialRecord", 0, Name="carol", Mechanism=2),
                       rec("FenceBrokerRecord", 0, Id=3, Epoch=12),
                       rec("BrokerRegistrationChangeRecord", 1, BrokerId=2, BrokerEpoch=11, Fenced=0,
                           InControlledShutdown=1),
                       broker(4, 40, [uid(14)], None),
                       rec("UnregisterBrokerRecord", 0, BrokerId=4, BrokerEpoch=40),
                       rec("ProducerIdsRecord", 0, BrokerId=2, BrokerEpoch=11, NextProducerId=2000)]))
    H.append(("control", [control(2, LEADER_CHANGE_MESSAGE, {"Version": 0, "LeaderId": 3000,
                                                              "Voters": [{"VoterId": 3000}],
                                                              "GrantingVoters": [{"VoterId": 3000}]})]))
    H.append(("data", [rec("RemoveTopicRecord", 0, TopicId=TOPIC_LEGACY),
                       rec("FeatureLevelRecord", 0, Name="group.version", FeatureLevel=0),
                       rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=22),
                       rec("NoOpRecord", 0)]))
    H.append(("data", [rec("BeginTransactionRecord", 0, Name="unfinished"),
                       rec("TopicRecord", 0, Name="unfinished", TopicId=TOPIC_OPEN)]))
    return H


SNAPSHOT_BATCHES = 11  # the batches the snapshot covers (up to the ClientQuota/SCRAM/token batch)


def _batches(H, start_offset: int = 0) -> Tuple[bytes, List[Tuple[int, int]]]:
    """The log bytes from ``start_offset`` and every batch's (base offset, last offset)."""
    data, spans, offset = bytearray(), [], 0
    for kind, pairs in H:
        # the raft layer requires one timestamp per batch (a record timestamp delta of 0)
        specs = [RecordSpec(offset + i, BASE_TS + offset * 1000, k, v) for i, (k, v) in enumerate(pairs)]
        if offset >= start_offset:
            data += build_v2_batch(specs, is_control=kind == "control", partition_leader_epoch=1)
        spans.append((offset, offset + len(pairs) - 1))
        offset += len(pairs)
    return bytes(data), spans


def snapshot_bytes(H, end_offset: int) -> bytes:
    """A ``.checkpoint``: header, the data records below ``end_offset`` (no transaction records), footer."""
    records = []
    offset = 0
    for kind, pairs in H:
        for pair in pairs:
            if offset < end_offset and kind == "data":
                records.append(pair)
            offset += 1
    data = bytearray()
    hdr = control(3, SNAPSHOT_HEADER_RECORD, {"Version": 0, "LastContainedLogTimestamp": BASE_TS})
    data += build_v2_batch([RecordSpec(0, BASE_TS, *hdr)], is_control=True, partition_leader_epoch=1)
    # data records in batches of 8, offsets continuing after the header, as RecordsSnapshotWriter appends them
    pos = 1
    for i in range(0, len(records), 8):
        chunk = records[i:i + 8]
        data += build_v2_batch([RecordSpec(pos + j, BASE_TS, k, v) for j, (k, v) in enumerate(chunk)],
                               partition_leader_epoch=1)
        pos += len(chunk)
    ftr = control(4, SNAPSHOT_FOOTER_RECORD, {"Version": 0})
    data += build_v2_batch([RecordSpec(pos, BASE_TS, *ftr)], is_control=True, partition_leader_epoch=1)
    return bytes(data)


def _data_dir(name: str) -> Path:
    d = ROOT / name
    if d.exists():
        shutil.rmtree(d)
    (d / "__cluster_metadata-0").mkdir(parents=True)
    (d / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=3000\n"
                                       f"directory.id={uid(99)}\n")
    return d / "__cluster_metadata-0"


def write_config_log(data_dir: Path, topics: Dict[str, str], configs: List[Tuple[int, str, str, Optional[str]]],
                     node_id: int = 1) -> Dict[Tuple[int, str, str], int]:
    """A data dir's ``meta.properties`` (node.id) and a ``__cluster_metadata-0`` log holding TopicRecords for
    `topics` (name -> topic id) and one ConfigRecord a batch for each (resource type, resource name, key,
    value) of `configs`; returns each config's offset (the source kstore names)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id={node_id}\n"
                                              f"directory.id={uid(98)}\n")
    H: List[Tuple[str, List[Tuple[Optional[bytes], bytes]]]] = [
        ("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=21)]),
        ("data", [rec("TopicRecord", 0, Name=name, TopicId=tid) for name, tid in topics.items()]),
    ]
    offsets: Dict[Tuple[int, str, str], int] = {}
    offset = 1 + len(topics)
    for rtype, name, key, value in configs:
        H.append(("data", [rec("ConfigRecord", 0, ResourceType=rtype, ResourceName=name, Name=key, Value=value)]))
        offsets[(rtype, name, key)] = offset
        offset += 1
    log, _spans = _batches(H)
    (data_dir / "__cluster_metadata-0").mkdir(exist_ok=True)
    (data_dir / "__cluster_metadata-0" / f"{0:020d}.log").write_bytes(log)
    return offsets


#: The finalized features a Kafka 4.2 controller bootstraps at 4.2-IV1 besides metadata.version (each feature's
#: level that MetadataVersion IBP_4_2_IV1 turns on: Feature.java's EligibleLeaderReplicasVersion, GroupVersion,
#: TransactionVersion, ShareVersion, StreamsVersion)
KAFKA_42_FEATURES = {"eligible.leader.replicas.version": 1, "group.version": 1, "transaction.version": 2,
                     "share.version": 1, "streams.version": 1}


def write_kafka42_log(data_dir: Path, topics: Dict[str, str], configs: List[Tuple[int, str, str, Optional[str]]],
                      node_id: int = 1, level: int = 29,
                      extra: List[Tuple[Optional[bytes], bytes]] = ()) -> Dict[Tuple[int, str, str], int]:
    """:func:`write_config_log` as a Kafka 4.1/4.2 KRaft node's log holds it: metadata.version `level` (29 =
    4.2-IV1) and the 4.2 features, a controller and this node (a broker, RegisterBrokerRecord v3 with its
    directory, unfenced by BrokerRegistrationChangeRecord v2), each topic with partition 0 on this node
    (PartitionRecord v2 with an ELR), the configs, a PartitionChangeRecord v2 and a ClearElrRecord (4.0+, not
    in the oracle's Kafka), then the `extra` records (e.g. one of a newer Kafka). Returns each config's offset."""
    data_dir.mkdir(parents=True, exist_ok=True)
    directory = uid(98)
    (data_dir / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id={node_id}\n"
                                              f"directory.id={directory}\n")
    features = [{"Name": "metadata.version", "MinSupportedVersion": 7, "MaxSupportedVersion": level}]
    H: List[Tuple[str, List[Tuple[Optional[bytes], bytes]]]] = [
        ("control", [control(2, LEADER_CHANGE_MESSAGE, {"Version": 0, "LeaderId": 3000, "Voters": [{"VoterId": 3000}],
                                                        "GrantingVoters": [{"VoterId": 3000}]})]),
        ("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=level)]
         + [rec("FeatureLevelRecord", 0, Name=n, FeatureLevel=v) for n, v in KAFKA_42_FEATURES.items()]),
        ("data", [rec("RegisterControllerRecord", 0, ControllerId=3000, IncarnationId=uid(300), ZkMigrationReady=False,
                      EndPoints=[{"Name": "CONTROLLER", "Host": "ctl", "Port": 9093, "SecurityProtocol": 0}],
                      Features=features),
                  rec("RegisterBrokerRecord", 3, BrokerId=node_id, IncarnationId=uid(301), BrokerEpoch=5,
                      EndPoints=[{"Name": "PLAINTEXT", "Host": "b", "Port": 9092, "SecurityProtocol": 0}],
                      Features=features, Rack=None, Fenced=True, LogDirs=[directory]),
                  rec("BrokerRegistrationChangeRecord", 2, BrokerId=node_id, BrokerEpoch=5, Fenced=-1,
                      LogDirs=[directory])]),
        ("data", [rec("TopicRecord", 0, Name=name, TopicId=tid) for name, tid in topics.items()]
         + [rec("PartitionRecord", 2, PartitionId=0, TopicId=tid, Replicas=[node_id], Isr=[node_id],
                RemovingReplicas=[], AddingReplicas=[], Leader=node_id, LeaderEpoch=0, PartitionEpoch=0,
                Directories=[directory], EligibleLeaderReplicas=[], LastKnownElr=[node_id])
            for tid in topics.values()]),
    ]
    offset = 1 + len(H[1][1]) + len(H[2][1]) + len(H[3][1])
    offsets: Dict[Tuple[int, str, str], int] = {}
    for rtype, name, key, value in configs:
        H.append(("data", [rec("ConfigRecord", 0, ResourceType=rtype, ResourceName=name, Name=key, Value=value)]))
        offsets[(rtype, name, key)] = offset
        offset += 1
    first = next(iter(topics.values()))
    H.append(("data", [rec("PartitionChangeRecord", 2, PartitionId=0, TopicId=first, EligibleLeaderReplicas=[],
                           LastKnownElr=[node_id]),
                       rec("ClearElrRecord", 0, TopicName=""), rec("NoOpRecord", 0), *extra]))
    log, _spans = _batches(H)
    (data_dir / "__cluster_metadata-0").mkdir(exist_ok=True)
    (data_dir / "__cluster_metadata-0" / f"{0:020d}.log").write_bytes(log)
    return offsets


def main() -> int:
    H = history()
    log, spans = _batches(H)
    snapshot_end = spans[SNAPSHOT_BATCHES - 1][1] + 1
    snap_name = f"{snapshot_end:020d}-{1:010d}.checkpoint"
    snap = snapshot_bytes(H, snapshot_end)

    d = _data_dir("full")
    (d / f"{0:020d}.log").write_bytes(log)
    (d / snap_name).write_bytes(snap)

    d = _data_dir("trimmed")
    tail, _ = _batches(H, snapshot_end)
    (d / f"{snapshot_end:020d}.log").write_bytes(tail)
    (d / snap_name).write_bytes(snap)

    d = _data_dir("newer")
    # a FeatureLevelRecord of version 1 (unknown to Kafka 4.0) before the unfinished transaction
    newer = H[:-1] + [("data", [rec("FeatureLevelRecord", 0, Name="x.feature", FeatureLevel=1)])] + H[-1:]
    nlog, nspans = _batches(newer)
    before, _ = _batches(H[:-1])
    i = nlog.index(b"\x01\x0c\x00", len(before))  # frame 1, api key 12, version 0: the version byte -> 1
    body = bytearray(nlog[len(before):])
    body[i - len(before) + 2] = 1
    from kstore_cli.record.crc import crc32c
    end = 12 + struct.unpack_from(">i", body, 8)[0]  # the changed batch only
    struct.pack_into(">I", body, 17, crc32c(bytes(body[21:end])))
    (d / f"{0:020d}.log").write_bytes(before + bytes(body))
    (d / snap_name).write_bytes(snap)

    d = _data_dir("levels")
    levels = [("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=level),
                        rec("ZkMigrationStateRecord", 0, ZkMigrationState=level % 5)]) for level in range(1, 26)]
    (d / f"{0:020d}.log").write_bytes(_batches(levels)[0])

    d = _data_dir("bootstrap")
    boot = snapshot_bytes([("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=21)])], 1)
    (d.parent / "bootstrap.checkpoint").write_bytes(boot)  # where BootstrapDirectory keeps it: the log dir
    d.rmdir()
    (ROOT / "SPANS.txt").write_text(f"snapshot_end={snapshot_end}\n" + "".join(f"{a} {b}\n" for a, b in spans))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
