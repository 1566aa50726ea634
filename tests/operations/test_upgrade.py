"""Upgrade readiness (operations.upgrade): 2.x and 3.x ZooKeeper data dirs and 3.x KRaft ones judged for
Kafka 4.0, and the reverse (a target older than the files): each finding with its check and command."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.codecs import GZIP
from kstore_cli.log.kafka_version import KafkaVersion
from kstore_cli.log.writer import PartitionWriter
from kstore_cli.operations.startup import ERROR, NOTE, WARNING, survey
from kstore_cli.operations.upgrade import max_metadata_level, max_value_version, upgrade_issues
from kstore_cli.parsers.schema import write_message
from kstore_cli.parsers.schemas import GROUP_COORDINATOR
from kstore_cli.record.builder import RecordSpec, build_legacy_batch, build_v2_batch
from tests.make_metadata_cluster import CLUSTER_ID, _batches, partition, rec, uid

TS = 1_700_000_000_000
V4_0 = KafkaVersion.parse("4.0")
TOPIC_ID = uid(1)


def _specs(first: int, n: int, key: bytes = b"k", value: bytes = b"v") -> List[RecordSpec]:
    return [RecordSpec(first + i, TS + first + i, key + b"%d" % (first + i), value) for i in range(n)]


def _partition(directory: Path, batches: List[bytes], topic_id: Optional[str] = None) -> Path:
    directory.mkdir(parents=True)
    writer = PartitionWriter(str(directory), suffix="", index_interval_bytes=100)
    writer.start_segment(0)
    for data in batches:
        writer.append_bytes(data)
    writer.close()
    if topic_id:
        (directory / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    return directory


def _coordinator(key_type: int, value_name: Optional[str], value_version: int, **fields):
    """A group coordinator record: key (its version is the record type) and value of `value_version`."""
    key_name = {0: "OffsetCommitKey", 1: "OffsetCommitKey", 2: "GroupMetadataKey",
                3: "ConsumerGroupMetadataKey"}[key_type]
    key_fields = ({"group": "g", "topic": "orders", "partition": 0} if key_type < 2 else
                  {"group": "g"} if key_type == 2 else {"GroupId": "g"})
    key = struct.pack(">h", key_type) + write_message(GROUP_COORDINATOR[key_name], key_fields, key_type)
    if value_name is None:
        return key, None
    return key, struct.pack(">h", value_version) + write_message(GROUP_COORDINATOR[value_name], fields, value_version)


def _commit(version: int) -> Tuple[bytes, Optional[bytes]]:
    fields = {"offset": 42, "metadata": "", "commitTimestamp": TS}
    if version == 1:
        fields["expireTimestamp"] = TS + 1
    return _coordinator(1 if version else 0, "OffsetCommitValue", version, **fields)


def zk_data_dir(root: Path, *, magic: int, cluster_id: Optional[str] = "zkCluster") -> Path:
    """A ZooKeeper-mode broker's data dir: meta.properties version 0, a data topic and __consumer_offsets
    in message format `magic` (old offset-commit and group-metadata value versions)."""
    data = root / "data"
    data.mkdir(parents=True)
    meta = "version=0\nbroker.id=1\n" + (f"cluster.id={cluster_id}\n" if cluster_id else "")
    (data / "meta.properties").write_text(meta)
    if magic < 2:
        _partition(data / "orders-0", [build_legacy_batch(_specs(0, 3), magic=magic),
                                       build_legacy_batch(_specs(3, 2), magic=magic, codec=GZIP)])
        k1, v1 = _commit(1)
        gk, gv = _coordinator(2, "GroupMetadataValue", 1, protocolType="consumer", generation=1, protocol="range",
                              leader="m", members=[])
        _partition(data / "__consumer_offsets-0", [build_legacy_batch([RecordSpec(0, TS, k1, v1),
                                                                      RecordSpec(1, TS, gk, gv)], magic=magic)])
    else:
        _partition(data / "orders-0", [build_v2_batch(_specs(0, 5))], topic_id=TOPIC_ID)
        k3, v3 = _commit(3)
        _partition(data / "__consumer_offsets-0", [build_v2_batch([RecordSpec(0, TS, k3, v3)])], topic_id=uid(2))
    return data


def kraft_data_dir(root: Path, *, level: int = 21, configs: Tuple[Tuple[str, str], ...] = (),
                   batches: Optional[List[bytes]] = None) -> Path:
    """A KRaft broker's data dir (meta.properties version 1) with its __cluster_metadata-0 at metadata.version
    `level`, topic orders (its topic configs `configs`) and orders-0 holding `batches` (v2 by default)."""
    data = root / "kraft"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id=1\ndirectory.id={uid(98)}\n")
    H = [("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=level)]),
         ("data", [rec("RegisterBrokerRecord", 0, BrokerId=1, IncarnationId=uid(97), BrokerEpoch=1,
                       EndPoints=[], Features=[], Rack=None, Fenced=False)]),
         ("data", [rec("TopicRecord", 0, Name="orders", TopicId=TOPIC_ID), partition(TOPIC_ID, 0, [1], [], version=0)])]
    for key, value in configs:
        H.append(("data", [rec("ConfigRecord", 0, ResourceType=2, ResourceName="orders", Name=key, Value=value)]))
    log, _ = _batches(H)
    (data / "__cluster_metadata-0").mkdir()
    (data / "__cluster_metadata-0" / f"{0:020d}.log").write_bytes(log)
    _partition(data / "orders-0", batches if batches is not None else [build_v2_batch(_specs(0, 5))], TOPIC_ID)
    return data


def checks(path: Path, target: str) -> List[Tuple[str, str, Optional[str]]]:
    """(severity, check, partition dir name) of each upgrade finding."""
    found = survey([str(path)])
    return sorted((i.severity, i.check, Path(i.partition).name if i.partition else None)
                  for i in upgrade_issues(found, KafkaVersion.parse(target)))


def _issues(path: Path, target: str):
    return upgrade_issues(survey([str(path)]), KafkaVersion.parse(target))


# --------------------------------------------------------------------------- ZooKeeper dirs judged for 4.0


def test_2x_zookeeper_dir_with_v0_v1_data(tmp_path):
    data = zk_data_dir(tmp_path, magic=1)
    assert checks(data, "4.0") == [
        (ERROR, "upgrade-zookeeper-metadata", None),
        (NOTE, "upgrade-message-format", "orders-0"),
        # __consumer_offsets is compacted: 4.0's cleaner rewrites its v1 batches as v2
        (WARNING, "upgrade-message-format", "__consumer_offsets-0"),
    ]
    by_check = {(i.check, i.partition and Path(i.partition).name): i for i in _issues(data, "4.0")}
    zk = by_check[("upgrade-zookeeper-metadata", None)]
    assert "KIP-833" in zk.kafka and "KIP-866" in zk.repair and "kafka-storage.sh format" in zk.repair
    assert "message.format.version" in zk.kafka  # the configs kstore cannot see are named, not skipped silently
    fmt = by_check[("upgrade-message-format", "orders-0")]
    assert fmt.repair.startswith(f"`kstore convert-format --to-magic 2 --in-place {data / 'orders-0'}`")
    assert "4 batch(es) in message format v1" in fmt.message and "offsets 0-4" in fmt.message and fmt.offset == 0
    assert "KIP-724" in fmt.kafka
    assert "KAFKA-13093" in by_check[("upgrade-message-format", "__consumer_offsets-0")].kafka


def test_010_zookeeper_dir_without_cluster_id_says_so(tmp_path):
    data = zk_data_dir(tmp_path, magic=0, cluster_id=None)
    zk = [i for i in _issues(data, "4.0") if i.check == "upgrade-zookeeper-metadata"]
    assert len(zk) == 1 and "no cluster.id" in zk[0].message
    assert any(i.check == "upgrade-message-format" and "v0" in i.message for i in _issues(data, "4.0"))


def test_3x_zookeeper_dir_with_v2_data_needs_only_the_migration(tmp_path):
    data = zk_data_dir(tmp_path, magic=2)
    assert checks(data, "4.0") == [(ERROR, "upgrade-zookeeper-metadata", None)]
    # the old offset-commit value versions (v1 in the 2.x dir, v3 here) are read by 4.0: no finding
    assert checks(data, "3.9") == []


def test_not_an_upgrade_finding_for_a_release_that_still_runs_zookeeper(tmp_path):
    assert checks(zk_data_dir(tmp_path, magic=1), "3.9") == []


# --------------------------------------------------------------------------- KRaft dirs


def test_39_kraft_dir_with_v2_data_is_ready_for_40(tmp_path):
    assert checks(kraft_data_dir(tmp_path, level=21), "4.0") == []
    assert checks(kraft_data_dir(tmp_path / "b", level=7), "4.1") == []


def test_metadata_version_below_33_iv3_is_refused_by_40(tmp_path):
    data = kraft_data_dir(tmp_path, level=6)
    assert checks(data, "4.0") == [(ERROR, "upgrade-metadata-version", "__cluster_metadata-0")]
    (issue,) = _issues(data, "4.0")
    assert "3.3-IV2 (feature level 6)" in issue.message and "kafka-features.sh" in issue.repair
    assert "MetadataVersion.MINIMUM_VERSION" in issue.kafka
    assert checks(data, "3.9") == []


def test_removed_topic_configs_in_the_metadata_log(tmp_path):
    data = kraft_data_dir(tmp_path, configs=(("message.format.version", "2.8"),
                                             ("message.timestamp.difference.max.ms", "60000"),
                                             ("retention.ms", "1000")))
    found = _issues(data, "4.0")
    assert sorted((i.severity, i.check) for i in found) == [(WARNING, "upgrade-removed-config")] * 2
    mfv = next(i for i in found if "message.format.version=2.8" in i.message)
    assert "offset 4" in mfv.message  # where the metadata log set it
    assert "--entity-name orders --delete-config message.format.version" in mfv.repair
    assert "Unknown topic config name: message.format.version" in mfv.kafka
    assert checks(data, "3.9") == []


def test_legacy_data_in_a_kraft_topic_is_judged_by_its_cleanup_policy(tmp_path):
    legacy = [build_legacy_batch(_specs(0, 2), magic=1)]
    plain = kraft_data_dir(tmp_path / "a", batches=legacy)
    assert checks(plain, "4.0") == [(NOTE, "upgrade-message-format", "orders-0")]
    assert "if the topic is compacted" not in _issues(plain, "4.0")[0].kafka  # its policy is known: delete
    compacted = kraft_data_dir(tmp_path / "b", batches=legacy, configs=(("cleanup.policy", "compact"),))
    assert checks(compacted, "4.0") == [(WARNING, "upgrade-message-format", "orders-0")]


def test_the_recommended_convert_format_run_clears_the_finding(tmp_path):
    from kstore_cli.cli import cli

    data = zk_data_dir(tmp_path, magic=1)
    (fmt,) = [i for i in _issues(data, "4.0") if i.partition and i.partition.endswith("orders-0")]
    command = fmt.repair.split("`")[1].split()
    assert command[:2] == ["kstore", "convert-format"]
    result = CliRunner().invoke(cli, command[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert checks(data, "4.0") == [(ERROR, "upgrade-zookeeper-metadata", None),
                                   (WARNING, "upgrade-message-format", "__consumer_offsets-0")]


# --------------------------------------------------------------------------- downgrades


def test_kraft_dir_judged_for_a_zookeeper_only_release(tmp_path):
    assert (ERROR, "downgrade-kraft-metadata", None) in checks(kraft_data_dir(tmp_path), "2.7")


def test_metadata_version_newer_than_the_target_knows(tmp_path):
    data = kraft_data_dir(tmp_path, level=22)
    assert checks(data, "3.9") == [(ERROR, "downgrade-metadata-version", "__cluster_metadata-0")]
    assert checks(data, "4.0") == []
    assert max_metadata_level(KafkaVersion.parse("3.9")) == 21 and max_metadata_level(KafkaVersion.parse("3.3")) == 7
    assert max_metadata_level(KafkaVersion.parse("9.0")) is None  # newer than kstore's table: not judged


def test_v2_data_judged_for_a_release_before_011(tmp_path):
    data = zk_data_dir(tmp_path, magic=2)
    found = checks(data, "0.10.2")
    assert (ERROR, "downgrade-message-format", "orders-0") in found
    issue = next(i for i in _issues(data, "0.10.2") if i.check == "downgrade-message-format")
    assert "--to-magic 1" in issue.repair


def test_internal_topic_record_versions_older_releases_cannot_read(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=c\n")
    k4, v4 = _commit(4)
    ck, cv = _coordinator(3, "ConsumerGroupMetadataValue", 0, Epoch=1)
    _partition(data / "__consumer_offsets-0", [build_v2_batch([RecordSpec(0, TS, k4, v4), RecordSpec(1, TS, ck, cv)])])
    assert checks(data, "2.8") == [(ERROR, "downgrade-internal-topic-record-version", "__consumer_offsets-0")] * 2
    assert checks(data, "3.5") == [(WARNING, "downgrade-internal-topic-record-version", "__consumer_offsets-0")]
    (offsets,) = [i for i in _issues(data, "2.8") if "OffsetCommitValue" in i.message]
    assert "version 4 at offset 0" in offsets.message and "up to 3" in offsets.message


@pytest.mark.parametrize("schema,target,expected", [
    ("OffsetCommitValue", "2.0", 1), ("OffsetCommitValue", "2.1", 3), ("OffsetCommitValue", "3.0", 4),
    ("GroupMetadataValue", "0.10.0", 0), ("GroupMetadataValue", "2.2", 2), ("GroupMetadataValue", "2.3", 3),
    ("TransactionLogValue", "0.10.2", None), ("TransactionLogValue", "2.8", 0), ("TransactionLogValue", "4.0", 1),
])
def test_value_versions_each_release_reads(schema, target, expected):
    assert max_value_version(schema, KafkaVersion.parse(target)) == expected
