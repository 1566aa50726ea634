"""A Kafka 4.1/4.2 KRaft node (issue 33): metadata, doctor, retain and compact on the metadata log its
controller writes (metadata.version 29 = 4.2-IV1, records at their newest versions, ClearElrRecord), and a
newer Kafka's log (an unknown level, an unknown record type) named in text, JSON and exit status."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from tests.commands.test_doctor import doctor, findings
from tests.conftest import CORPUS, ROOT, json_lines_summary
from tests.make_metadata_cluster import KAFKA_42_FEATURES, uid, write_kafka42_log

_register_commands()
TOPIC = 2
TOPIC_IDS = {"time-roll": uid(1), "cache": uid(2), "elsewhere": uid(3)}
NOW = str(1_700_000_000_000 + 200_000)
#: a record of api key 99 (frame version 1, version 0): a type no Kafka kstore knows has
UNKNOWN_TYPE = (None, b"\x01\x63\x00\x00")


def _node(tmp_path: Path, level: int = 29, extra=()) -> Tuple[Path, Dict[Tuple[int, str, str], int]]:
    """A 4.2 broker's data dir: the metadata log, time-roll-0 and cache-0 (elsewhere-0, assigned to this node
    too, is missing)."""
    data = tmp_path / "data"
    at = write_kafka42_log(data, TOPIC_IDS, [(TOPIC, "time-roll", "retention.ms", "15000"),
                                             (TOPIC, "cache", "cleanup.policy", "compact")],
                           level=level, extra=list(extra))
    shutil.copytree(CORPUS / "logs" / "time-roll-0", data / "time-roll-0")
    shutil.copytree(CORPUS / "logs" / "v2-compact-0", data / "cache-0")
    for topic in ("time-roll", "cache"):
        (data / f"{topic}-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_IDS[topic]}\n")
    return data, at


def _metadata(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kstore_cli", "metadata", *args], capture_output=True, text=True,
                          cwd=ROOT)


def test_metadata_reads_a_kafka_42_log_whole(tmp_path: Path) -> None:
    data, _ = _node(tmp_path)
    proc = _metadata("--json", str(data))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    src = lines[0]
    assert src["problems"] == [] and src["newer"] == [] and src["skipped_records"] == 0
    features = next(o for o in lines if o["type"] == "features")
    assert (features["metadata_version"], features["metadata_version_level"]) == ("4.2-IV1", 29)
    assert features["finalized_versions"] == KAFKA_42_FEATURES
    # ClearElrRecord (empty name: every topic) emptied the last known ELRs, bumping each partition's epoch
    # (TopicDelta.maybeClearElr merges a PartitionChangeRecord); time-roll's took a PartitionChangeRecord first
    parts = {o["name"]: o["partitions"][0] for o in lines if o["type"] == "topic"}
    assert {n: (p["elr"], p["lastKnownElr"], p["partitionEpoch"]) for n, p in parts.items()} == {
        "time-roll": ([], [], 2), "cache": ([], [], 1), "elsewhere": ([], [], 1)}
    text = _metadata(str(data)).stdout
    assert "metadata.version: 4.2-IV1 (level 29)" in text


def test_metadata_names_every_level_of_kafkas_table(tmp_path: Path) -> None:
    for level, name in ((7, "3.3-IV3"), (26, "4.1-IV0"), (27, "4.1-IV1"), (28, "4.2-IV0")):
        data, _ = _node(tmp_path / str(level), level=level)
        proc = _metadata(str(data))
        assert proc.returncode == 0 and f"metadata.version: {name} (level {level})" in proc.stdout, proc.stderr


def test_doctor_checks_assigned_partitions_on_a_kafka_42_node(tmp_path: Path) -> None:
    data, _ = _node(tmp_path)
    code, records = doctor(data)
    [missing] = findings(records, "assigned-partition-missing")
    assert "elsewhere-0" in missing["message"] and missing["severity"] == "error" and code == 1
    assert findings(records, "metadata-log-incomplete") == findings(records, "metadata-newer-than-kstore") == []


def test_retain_and_compact_take_topic_configs_from_a_kafka_42_log(tmp_path: Path) -> None:
    data, at = _node(tmp_path)
    result = CliRunner().invoke(cli, ["retain", "--dry-run", "--json", "--now", NOW, str(data)])
    assert result.exit_code == 0, result.output
    (row,) = [p for p in json_lines_summary(result.stdout)["partitions"] if p["partition"].endswith("time-roll-0")]
    assert row["config"]["retention.ms"] == {
        "value": 15000, "source": f"cluster metadata @ offset {at[(TOPIC, 'time-roll', 'retention.ms')]}"}
    assert row["segments_deleted"] > 0
    done = CliRunner().invoke(cli, ["compact", "--dry-run", "--json", str(data / "cache-0")])
    assert done.exit_code == 0, done.output
    (row,) = json_lines_summary(done.stdout)["partitions"]
    assert row["settings"]["cleanup.policy"]["source"] == (
        f"cluster metadata @ offset {at[(TOPIC, 'cache', 'cleanup.policy')]}")


def test_an_unknown_newer_level_is_named_everywhere(tmp_path: Path) -> None:
    data, _ = _node(tmp_path, level=99)
    proc = _metadata("--json", str(data))
    assert proc.returncode == 1
    want = "metadata.version level 99 is newer than kstore knows (newest: 4.2-IV1 = level 29"
    assert f"kstore: problem: {want}" in proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["newer"][0].startswith(want) and lines[0]["newer"][0] in lines[0]["problems"]
    features = next(o for o in lines if o["type"] == "features")
    assert (features["metadata_version"], features["metadata_version_level"]) == ("unknown to kstore", 99)
    # every record was read: doctor still checks the assigned partitions, and says what it judged by
    code, records = doctor(data)
    [newer] = findings(records, "metadata-newer-than-kstore")
    assert code == 1 and newer["severity"] == "warning" and newer["message"].startswith(want)
    assert "are checked against the image as kstore reads it" in newer["message"]
    assert [f["message"].split(" assigns ")[1].split(" ")[0] for f in findings(records, "assigned-partition-missing")
            ] == ["elsewhere-0"]
    # retain refuses to delete by configs of a metadata log it does not fully know, and says why
    refused = CliRunner().invoke(cli, ["retain", "--dry-run", "--now", NOW, str(data)])
    assert refused.exception.exit_status == 2 and want in str(refused.exception)
    assert "--no-cluster-metadata" in str(refused.exception)


def test_level_30_is_named_but_not_production_in_kstores_kafka(tmp_path: Path) -> None:
    data, _ = _node(tmp_path, level=30)
    proc = _metadata(str(data))
    assert proc.returncode == 1 and "metadata.version: 4.3-IV0 (level 30)" in proc.stdout
    assert "metadata.version level 30 (4.3-IV0, not yet production in that Kafka) is newer" in proc.stderr


def test_an_unknown_record_type_is_skipped_and_named_everywhere(tmp_path: Path) -> None:
    data, _ = _node(tmp_path, extra=[UNKNOWN_TYPE])
    proc = _metadata("--json", str(data))
    assert proc.returncode == 1
    want = "1 record(s) of type 99 (version 0) in the log (first at offset 21) skipped"
    assert f"kstore: problem: {want}" in proc.stderr
    src = json.loads(proc.stdout.splitlines()[0])
    assert src["skipped_records"] == 1 and src["newer"][0].startswith(want) and src["end_offset"] == 22
    # doctor: the image may lack what the skipped record changes: no assigned-partition verdict, said why
    code, records = doctor(data)
    [newer] = findings(records, "metadata-newer-than-kstore")
    assert code == 1 and newer["severity"] == "warning" and newer["message"].startswith(want)
    assert "partitions assigned to this node are not checked" in newer["message"]
    assert findings(records, "assigned-partition-missing") == []
    refused = CliRunner().invoke(cli, ["compact", "--dry-run", str(data / "cache-0")])
    assert refused.exception.exit_status == 2 and want in str(refused.exception)
    # --no-cluster-metadata leaves the log out (a policy must then come from elsewhere)
    done = CliRunner().invoke(cli, ["compact", "--dry-run", "--json", "--no-cluster-metadata", "--policy", "compact",
                                    str(data / "cache-0")])
    assert done.exit_code == 0, done.output
