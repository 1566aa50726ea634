"""Judging each data dir by the broker that wrote it (operations/broker_version.py, Survey.judge): the mode and
releases its files show, and the rules that differ between them (partition.metadata, cluster.id,
meta.properties), on the layouts 2.x ZooKeeper, 3.x ZooKeeper, 3.x KRaft and 4.x KRaft brokers leave."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.log.kafka_version import KafkaVersion
from kstore_cli.log.logdir import Partition
from kstore_cli.operations.broker_version import KRAFT, UNKNOWN, ZOOKEEPER, judge_data_dir
from kstore_cli.operations.rebuild import rebuild_partition
from kstore_cli.operations.layout_findings import layout_issues
from kstore_cli.operations.startup import survey
from tests.conftest import CORPUS, ROOT

_register_commands()

LOGS = CORPUS / "logs"
CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint")
GOLDEN_METADATA = ROOT / "fixtures" / "kafka-golden" / "inputs" / "__cluster_metadata-0"  # metadata.version 3.9-IV0
CLUSTER_40 = ROOT / "fixtures" / "kraft-cluster" / "full"  # metadata.version 4.0-IV0, node 1's dir AAAAAAAAEAoAAAAAAACryg


def _meta(data: Path, *lines: str) -> None:
    """meta.properties as java.util.Properties.store writes it (a comment, the date, then the keys)."""
    (data / "meta.properties").write_text("\n".join(["#", "#Tue Nov 24 10:00:00 UTC 2026", *lines]) + "\n")


def _partition(data: Path, name: str, source: str = "v2-none-0", topic_id: Optional[str] = None) -> Path:
    """A Kafka-written partition from the corpus under `name`, with partition.metadata naming `topic_id` (none
    when None: what a broker before 2.8, or a ZooKeeper one below inter.broker.protocol.version 2.8, leaves)."""
    part = data / name
    shutil.copytree(LOGS / source, part)
    (part / "partition.metadata").unlink()
    if topic_id is not None:
        (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")  # PartitionMetadataFile
    return part


def _data_dir(root: Path) -> Path:
    data = root / "data"
    data.mkdir(parents=True)
    for c in CHECKPOINTS:
        shutil.copy2(LOGS / c, data / c)
    return data


def zk_2x(root: Path) -> Path:
    """A 2.x ZooKeeper-mode broker's dir: meta.properties version=0 with broker.id and no cluster.id (what
    BrokerMetadataCheckpoint wrote before the cluster had an id), no partition.metadata, v2 and v1 data."""
    data = _data_dir(root)
    _meta(data, "version=0", "broker.id=1")
    _partition(data, "v2-none-0")
    _partition(data, "legacy-v1-0", source="legacy-v1-0")
    return data


def zk_3x(root: Path) -> Path:
    """A 3.x ZooKeeper-mode broker's dir: version=0 with broker.id and cluster.id; partition.metadata where the
    controller sent a topic ID (one partition without: written only once it does)."""
    data = _data_dir(root)
    _meta(data, "version=0", "broker.id=1", "cluster.id=MkU3OEVBNTcwNTJENDM2Qg")
    _partition(data, "v2-none-0", topic_id="ZacG7npp8PBwZfzuq0OGqQ")
    _partition(data, "legacy-v1-0", source="legacy-v1-0")
    return data


def kraft_3x(root: Path) -> Path:
    """A 3.9 KRaft broker's dir: version=1 with node.id, cluster.id and directory.id, the metadata log
    (metadata.version 3.9-IV0) and the one partition it assigns to node 1, with its topic ID."""
    data = _data_dir(root)
    _meta(data, "version=1", "node.id=1", "cluster.id=MkU3OEVBNTcwNTJENDM2Qg", "directory.id=n9XlzHLvQJm2Bm7I9DqT3w")
    shutil.copytree(GOLDEN_METADATA, data / "__cluster_metadata-0")
    _partition(data, "topic-2-0", topic_id="AAAAAAAAAAIAAAAAAAAAKg")
    return data


def kraft_4x(root: Path) -> Path:
    """A 4.0 KRaft broker's dir (node 1 of fixtures/kraft-cluster/full) with every partition the metadata
    assigns to it."""
    data = _data_dir(root)
    _meta(data, "version=1", "cluster.id=kstoreClusterIdTest0001", "node.id=1", "directory.id=AAAAAAAAEAoAAAAAAACryg")
    shutil.copytree(CLUSTER_40 / "__cluster_metadata-0", data / "__cluster_metadata-0")
    # the fixture's log has no indexes (kstore's builders wrote it): give it those Kafka's recovery writes
    rebuild_partition(Partition(str(data / "__cluster_metadata-0")))
    _partition(data, "__consumer_offsets-0", source="__consumer_offsets-0", topic_id="AAAAAAAAEAYAAAAAAACrxg")
    for p in range(3):
        _partition(data, f"orders-{p}", topic_id="AAAAAAAAEAEAAAAAAACrwQ")
    return data


LAYOUTS = {
    "2.x-zk": (zk_2x, ZOOKEEPER, "0.11-3.9"),
    "3.x-zk": (zk_3x, ZOOKEEPER, "2.8-3.9"),
    "3.x-kraft": (kraft_3x, KRAFT, "3.9 or newer"),
    "4.x-kraft": (kraft_4x, KRAFT, "4.0 or newer"),
}


def run(command: str, *args) -> "tuple[int, list]":
    result = CliRunner().invoke(cli, [command, "--json", *map(str, args)], catch_exceptions=False)
    return result.exit_code, [json.loads(line) for line in result.output.splitlines()]


def problems(records: list) -> list:
    return [(r["check"], r["severity"]) for r in records if r.get("type") == "finding" and r["severity"] != "note"]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_layout_is_judged_by_its_own_broker_with_no_false_finding(tmp_path, layout):
    make, mode, versions = LAYOUTS[layout]
    data = make(tmp_path)
    code, records = run("doctor", data)
    assert problems(records) == [] and code == 0, problems(records)
    [d] = [r for r in records if r["type"] == "datadir"]
    assert d["judged_as"]["mode"] == mode and d["judged_as"]["versions"] == versions
    assert d["judged_as"]["asked"] is None and d["judged_as"]["from"]
    code, records = run("verify-index", data)
    assert problems(records) == [] and code == 0, problems(records)


def test_the_judged_line_names_mode_releases_and_evidence(tmp_path):
    data = zk_3x(tmp_path)
    result = CliRunner().invoke(cli, ["doctor", str(data)], catch_exceptions=False)
    line = next(x for x in result.output.splitlines() if "judged as" in x)
    assert line.strip().startswith("judged as a ZooKeeper-mode broker, Kafka 2.8-3.9, from: meta.properties "
                                   "version=0 with broker.id; partition.metadata in 1 partition(s) (2.8+)")


def test_zookeeper_rules_no_partition_metadata_and_no_cluster_id_are_not_errors(tmp_path):
    found = survey([str(zk_2x(tmp_path))])
    checks = {(i.check, i.severity) for i in layout_issues(found)}
    assert checks == {("meta-properties-cluster-id", "note")}
    code, records = run("doctor", tmp_path / "data")
    assert [r for r in records if r.get("type") == "finding" and r.get("check") == "partition-metadata-missing"] == []


def test_kafka_version_4_judges_a_zookeeper_dir_by_kraft_rules(tmp_path):
    data = zk_2x(tmp_path)
    code, records = run("doctor", "--kafka-version", "4.0", data)
    assert code == 1
    assert sorted(set(problems(records))) == [("meta-properties-cluster-id", "error"),
                                              ("partition-metadata-missing", "error"),
                                              ("upgrade-zookeeper-metadata", "error")]
    [d] = [r for r in records if r["type"] == "datadir"]
    assert d["judged_as"]["asked"] == "4.0" and d["judged_as"]["rules_mode"] == KRAFT
    assert d["judged_as"]["mode"] == ZOOKEEPER  # what the files show is still said
    # verify-index: the same findings with the same severities
    vcode, vrecords = run("verify-index", "--kafka-version", "4.0", data)
    # (upgrade readiness is doctor's: operations/upgrade.py)
    assert vcode == 1 and sorted(set(problems(vrecords))) == sorted(
        p for p in set(problems(records)) if not p[0].startswith("upgrade-"))


def test_kafka_version_of_an_older_zookeeper_release_keeps_the_verdict(tmp_path):
    code, records = run("doctor", "--kafka-version", "3.9", zk_3x(tmp_path))
    assert code == 0 and problems(records) == []


def test_kraft_before_3_7_stops_on_a_log_without_topic_id_and_3_7_1_makes_it_stray(tmp_path):
    data = kraft_4x(tmp_path)
    (data / "orders-1" / "partition.metadata").unlink()
    _, records = run("doctor", data)
    [f] = [r for r in records if r.get("type") == "finding" and r.get("check") == "partition-metadata-missing"]
    assert f["severity"] == "error" and "isStrayKraftReplica" in f["kafka"]
    _, records = run("doctor", "--kafka-version", "3.5", data)
    [f] = [r for r in records if r.get("type") == "finding" and r.get("check") == "partition-metadata-missing"]
    assert f["severity"] == "error" and "does not have a topic ID" in f["kafka"]


def test_unknown_mode_is_a_note_not_an_error(tmp_path):
    data = _data_dir(tmp_path)
    _partition(data, "v2-none-0")
    code, records = run("doctor", data)
    [f] = [r for r in records if r.get("type") == "finding" and r.get("check") == "partition-metadata-missing"]
    assert code == 0 and f["severity"] == "note" and "--kafka-version" in f["repair"]
    [d] = [r for r in records if r["type"] == "datadir"]
    assert d["judged_as"]["mode"] == UNKNOWN


def test_a_dir_without_meta_properties_beside_zookeeper_dirs_is_a_note(tmp_path):
    a = zk_3x(tmp_path / "a")
    b = _data_dir(tmp_path / "b")
    _partition(b, "v2-none-1")
    code, records = run("doctor", a, b)
    [f] = [r for r in records if r.get("type") == "finding" and r.get("check") == "meta-properties-missing"]
    assert code == 0 and f["severity"] == "note"


def test_v1_without_cluster_id_stays_an_error(tmp_path):
    data = kraft_4x(tmp_path)
    _meta(data, "version=1", "node.id=1", "directory.id=AAAAAAAAEAoAAAAAAACryg")
    _, records = run("doctor", data)
    assert ("meta-properties-cluster-id", "error") in problems(records)


def test_evidence_bounds(tmp_path):
    data = _data_dir(tmp_path)
    _partition(data, "v2-none-0", topic_id="ZacG7npp8PBwZfzuq0OGqQ")
    found = survey([str(data)])
    info = found.data_dirs[str(data.resolve())]
    judged = judge_data_dir({"version": "1", "node.id": "1", "cluster.id": "x"}, info.partitions, info.path)
    assert judged.mode == KRAFT and str(judged.versions) == "2.8-3.6"  # no directory.id: before 3.7
    judged = judge_data_dir({"version": "0", "broker.id": "1", "directory.id": "x"}, info.partitions, info.path)
    assert judged.mode == ZOOKEEPER and str(judged.versions) == "3.7-3.9"  # migrating to KRaft
    judged = judge_data_dir(None, info.partitions, info.path)
    assert judged.mode == UNKNOWN and str(judged.versions) == "2.8 or newer"
    assert judged._replace(asked=KafkaVersion.parse("2.7")).rules_mode == ZOOKEEPER
    assert judged._replace(asked=KafkaVersion.parse("4.1")).rules_mode == KRAFT


def test_oracle_loads_the_layouts_partitions(tmp_path):
    """Kafka's own LogLoader loads every partition of each layout (the files' side of "the broker starts")."""
    from tests.oracle import require_oracle

    oracle = require_oracle()
    parts = []
    for name, (make, _mode, _versions) in sorted(LAYOUTS.items()):
        data = make(tmp_path / name)
        parts += [p for p in data.iterdir() if p.is_dir() and p.name != "__cluster_metadata-0"]
    for part, result in zip(parts, oracle.load_logs(parts, clean=True)):
        summary = result.one("summary")
        assert result.rc == 0 and summary["ok"], (part, result.stderr[-2000:])
