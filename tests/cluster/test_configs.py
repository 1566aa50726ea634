"""Topic configs from the cluster itself: the KRaft metadata log in the data dirs, in Kafka's order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.cluster.configs import resolver_from_files
from kstore_cli.errors import KstoreError
from kstore_cli.record.reader import read_batches
from tests.conftest import CORPUS, json_lines_summary
from tests.make_metadata_cluster import uid, write_config_log

_register_commands()
TOPIC, BROKER = 2, 4
HOUR = 3_600_000


TOPIC_IDS = {"time-roll": uid(1), "orders": uid(2), "cache": uid(3)}


def _cluster(data: Path, configs, node_id: int = 1):
    """The metadata log, and the partition dirs in `data` made its topics' current incarnations."""
    for part in data.glob("*-[0-9]*"):
        topic = part.name.rsplit("-", 1)[0]
        if topic in TOPIC_IDS:
            (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_IDS[topic]}\n")
    return write_config_log(data, TOPIC_IDS, configs, node_id)


def test_kafkas_order_topic_over_dynamic_broker_over_static(tmp_path: Path) -> None:
    data = tmp_path / "data"
    at = _cluster(data, [(TOPIC, "orders", "retention.ms", str(2 * HOUR)),
                         (BROKER, "", "log.retention.hours", "5"),           # dynamic cluster default
                         (BROKER, "1", "log.retention.bytes", "1048576"),    # this node's dynamic config
                         (BROKER, "2", "log.retention.bytes", "7"),          # another node's: not ours
                         (TOPIC, "cache", "cleanup.policy", "compact"),
                         (TOPIC, "orders", "x.newer.kafka.config", "1")])    # unknown keys are LogConfig's to ignore
    props = tmp_path / "server.properties"
    props.write_text("log.retention.hours=1000\nlog.segment.bytes=1048576\n")
    resolver = resolver_from_files(str(props), data_dirs=[str(data)])
    orders = resolver.for_topic("orders", str(data))
    assert orders.retention_ms == 2 * HOUR
    assert orders.source("retention.ms") == f"cluster metadata @ offset {at[(TOPIC, 'orders', 'retention.ms')]}"
    assert orders.retention_bytes == 1048576 and "(broker 1): log.retention.bytes" in orders.source("retention.bytes")
    other = resolver.for_topic("time-roll", str(data))
    assert other.retention_ms == 5 * HOUR  # the dynamic default beats server.properties' log.retention.hours
    assert "(cluster default): log.retention.hours" in other.source("retention.ms")
    assert other.get("segment.bytes") == 1048576 and other.source("segment.bytes").startswith(str(props))
    assert resolver.for_topic("cache", str(data)).compact
    # The synonyms are resolved on the merged broker config, as KafkaConfig does: a static log.retention.ms
    # still beats a dynamic log.retention.hours.
    props.write_text("log.retention.ms=60000\n")
    merged = resolver_from_files(str(props), data_dirs=[str(data)]).for_topic("time-roll", str(data))
    assert merged.retention_ms == 60000
    # Flags stay on top; --no-cluster-metadata leaves the log out.
    flagged = resolver_from_files(flags={"retention.ms": (1, "--retention-ms")}, data_dirs=[str(data)])
    assert flagged.for_topic("orders", str(data)).retention_ms == 1
    assert resolver_from_files(data_dirs=[str(data)], cluster_metadata=False).for_topic(
        "orders", str(data)).retention_ms == 7 * 24 * HOUR


def test_a_later_record_deletes_an_override_and_a_removed_topic_takes_its_configs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _cluster(data, [(TOPIC, "orders", "retention.ms", "5"), (TOPIC, "orders", "retention.ms", None)])
    config = resolver_from_files(data_dirs=[str(data)]).for_topic("orders", str(data))
    assert config.retention_ms == 7 * 24 * HOUR and config.source("retention.ms") == "Kafka default"


def test_an_unreadable_metadata_log_is_an_error_not_a_silent_default(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _cluster(data, [(TOPIC, "orders", "retention.ms", "5")])
    log = data / "__cluster_metadata-0" / f"{0:020d}.log"
    raw = bytearray(log.read_bytes())
    second = [b.position for b in read_batches(str(log))][1]
    raw[second + 70] ^= 0xFF  # intact batches after it: damage, not a crash's torn tail
    log.write_bytes(bytes(raw))
    with pytest.raises(KstoreError, match="--no-cluster-metadata"):
        resolver_from_files(data_dirs=[str(data)])
    assert resolver_from_files(data_dirs=[str(data)], cluster_metadata=False).cluster == {}


def _torn_cluster(data: Path, configs) -> Dict[Tuple[int, str, str], int]:
    """A metadata log whose last batch a crash cut short by 5 bytes."""
    at = _cluster(data, configs)
    log = data / "__cluster_metadata-0" / f"{0:020d}.log"
    log.write_bytes(log.read_bytes()[:-5])
    return at


def test_retain_and_compact_read_a_torn_metadata_log_as_kafka_loads_it_and_warn(tmp_path: Path) -> None:
    # The normal state after a controller crash: Kafka's recovery cuts the torn last batch and loads the
    # rest, so its configs hold (the torn batch's retention.ms=1 is not one of them).
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / "time-roll-0", data / "time-roll-0")
    shutil.copytree(CORPUS / "logs" / "v2-compact-0", data / "cache-0")
    (data / "cache-0" / "partition.metadata").unlink(missing_ok=True)
    at = _torn_cluster(data, [(TOPIC, "time-roll", "retention.ms", "15000"),
                              (TOPIC, "cache", "cleanup.policy", "compact"),
                              (TOPIC, "time-roll", "retention.ms", "1")])
    first_retention = at[(TOPIC, "cache", "cleanup.policy")] - 1  # the batch before the cleanup.policy one
    result = _retain("--now", str(1_700_000_000_000 + 200_000), str(data))
    assert result.exit_code == 0, result.output
    (row,) = [p for p in json_lines_summary(result.stdout)["partitions"] if p["partition"].endswith("time-roll-0")]
    assert row["config"]["retention.ms"] == {"value": 15000, "source": f"cluster metadata @ offset {first_retention}"}
    assert "kstore: warning: " in result.stderr and "a torn tail" in result.stderr
    done = CliRunner().invoke(cli, ["compact", "--dry-run", "--json", str(data / "cache-0")])
    assert done.exit_code == 0, done.output
    (row,) = json_lines_summary(done.stdout)["partitions"]
    policy_at = at[(TOPIC, "cache", "cleanup.policy")]
    assert row["settings"]["cleanup.policy"]["source"] == f"cluster metadata @ offset {policy_at}"
    assert "a torn tail" in done.stderr


def _retain(*args: str):
    return CliRunner().invoke(cli, ["retain", "--dry-run", "--json", *args])


def test_retain_takes_retention_ms_from_the_metadata_log_with_no_flag_and_says_so(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / "time-roll-0", data / "time-roll-0")
    at = _cluster(data, [(TOPIC, "time-roll", "retention.ms", "15000")])
    now = str(1_700_000_000_000 + 200_000)
    result = _retain("--now", now, str(data))
    assert result.exit_code == 0, result.output
    (row,) = [p for p in json_lines_summary(result.output)["partitions"] if p["partition"].endswith("time-roll-0")]
    assert row["config"]["retention.ms"] == {"value": 15000,
                                             "source": f"cluster metadata @ offset {at[(TOPIC, 'time-roll', 'retention.ms')]}"}
    assert row["segments_deleted"] > 0
    text = CliRunner().invoke(cli, ["retain", "--dry-run", "--now", now, str(data)])
    assert f"retention.ms=15000 (cluster metadata @ offset {at[(TOPIC, 'time-roll', 'retention.ms')]})" in text.output
    flagged = _retain("--now", now, "--retention-ms", "-1", str(data))
    (row,) = [p for p in json_lines_summary(flagged.output)["partitions"] if p["partition"].endswith("time-roll-0")]
    assert row["config"]["retention.ms"]["source"] == "--retention-ms" and row["segments_deleted"] == 0
    # Without the metadata log (and no flag or file) retain still refuses to guess a policy.
    shutil.rmtree(data / "__cluster_metadata-0")
    assert CliRunner().invoke(cli, ["retain", "--dry-run", str(data)]).exception.exit_status == 2


def test_compact_takes_cleanup_policy_from_the_metadata_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / "v2-compact-0", data / "cache-0")
    (data / "cache-0" / "partition.metadata").unlink(missing_ok=True)
    part = str(data / "cache-0")
    refused = CliRunner().invoke(cli, ["compact", "--dry-run", "--json", "--no-cluster-metadata", part])
    assert refused.exception.exit_status == 2 and "cleanup.policy=delete" in str(refused.exception)
    at = _cluster(data, [(TOPIC, "cache", "cleanup.policy", "compact")])
    done = CliRunner().invoke(cli, ["compact", "--dry-run", "--json", part])
    assert done.exit_code == 0, done.output
    (row,) = json_lines_summary(done.output)["partitions"]
    assert row["settings"]["cleanup.policy"]["source"] == f"cluster metadata @ offset {at[(TOPIC, 'cache', 'cleanup.policy')]}"


# --------------------------------------------------------------------------- issue 29: incarnations, defaults, ConfigDef

OLD_INCARNATION = "AL81rix7FaZY79THUhFduw"  # the corpus partitions' own topic ID, not the image's uid(1)


def _recreated(tmp_path: Path, topic: str, source: str, configs) -> Path:
    """A data dir whose `topic`-0 holds the log of an older incarnation of the topic: its partition.metadata
    names another topic ID than the metadata log, which has the new topic's configs."""
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / source, data / f"{topic}-0")
    _cluster(data, configs)
    (data / f"{topic}-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {OLD_INCARNATION}\n")
    return data


def _tree(root: Path) -> dict:
    from tests.log.partition_factory import tree_state

    return tree_state(root)


def test_retain_leaves_an_older_incarnation_of_a_recreated_topic_alone(tmp_path: Path) -> None:
    """The recreated topic's retention.ms=15000 used to delete every segment of the old topic's log."""
    data = _recreated(tmp_path, "time-roll", "time-roll-0", [(TOPIC, "time-roll", "retention.ms", "15000")])
    before = _tree(tmp_path)
    now = str(1_700_000_000_000 + 200_000)
    result = CliRunner().invoke(cli, ["retain", "--json", "--now", now, str(data)])
    assert result.exit_code == 1, result.output
    (row,) = [p for p in json_lines_summary(result.stdout)["partitions"] if p["partition"].endswith("time-roll-0")]
    assert row["problem"].startswith(f"partition.metadata has topic ID {OLD_INCARNATION} and the cluster metadata")
    assert f"has topic ID {uid(1)} for time-roll" in row["problem"] and "isStrayKraftReplica" in row["problem"]
    assert "config" not in row  # the new topic's settings are not shown as this log's
    assert _tree(tmp_path) == before
    text = CliRunner().invoke(cli, ["retain", "--dry-run", "--now", now, str(data)])
    assert text.exit_code == 1 and f"time-roll-0: not handled: partition.metadata has topic ID {OLD_INCARNATION}" in text.output
    # No partition.metadata at all: no topic ID, stray for a KRaft broker too.
    (data / "time-roll-0" / "partition.metadata").unlink()
    result = CliRunner().invoke(cli, ["retain", "--json", "--now", now, str(data)])
    assert result.exit_code == 1 and "no partition.metadata (no topic ID)" in result.output
    # --no-cluster-metadata: the operator's own flags apply (the metadata log's configs are left out).
    flagged = CliRunner().invoke(cli, ["retain", "--dry-run", "--json", "--now", now, "--no-cluster-metadata",
                                       "--retention-ms", "-1", str(data)])
    assert flagged.exit_code == 0, flagged.output


def test_compact_leaves_an_older_incarnation_of_a_recreated_topic_alone(tmp_path: Path) -> None:
    """The recreated topic is compacted; the old topic's log (a plain delete topic) must not be."""
    data = _recreated(tmp_path, "cache", "v2-compact-0", [(TOPIC, "cache", "cleanup.policy", "compact")])
    before = _tree(tmp_path)
    for target in (data, data / "cache-0"):
        result = CliRunner().invoke(cli, ["compact", "--json", "--force-clean", str(target)])
        assert result.exit_code == 1, result.output
        (row,) = [p for p in json_lines_summary(result.stdout)["partitions"] if p["partition"].endswith("cache-0")]
        assert row["cleaned"] is False and f"topic ID {OLD_INCARNATION}" in row["problem"]
        assert _tree(tmp_path) == before


def test_a_kraft_node_with_no_flags_deletes_nothing_on_kafkas_7_day_default(tmp_path: Path) -> None:
    """The metadata log is a policy source, but it sets no retention for this topic: Kafka's built-in 7 days
    used to delete every segment of a month-old copy."""
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / "time-roll-0", data / "time-roll-0")
    _cluster(data, [(TOPIC, "orders", "retention.ms", "5")])  # another topic's override only
    before = _tree(tmp_path)
    now = str(1_700_000_000_000 + 30 * 24 * HOUR)
    result = CliRunner().invoke(cli, ["retain", "--json", "--now", now, str(data)])
    assert result.exit_code == 0, result.output
    (row,) = [p for p in json_lines_summary(result.stdout)["partitions"] if p["partition"].endswith("time-roll-0")]
    assert row["segments_deleted"] == 0
    assert row["config"]["retention.ms"] == {"value": 7 * 24 * HOUR,
                                             "source": "Kafka default, not applied without --kafka-defaults"}
    assert any(n.startswith("retention.ms=604800000 is only Kafka's default: not applied") for n in row["notes"])
    assert _tree(tmp_path) == before
    # The operator asks for Kafka's defaults: they apply, and the source says so.
    applied = CliRunner().invoke(cli, ["retain", "--dry-run", "--json", "--kafka-defaults", "--now", now, str(data)])
    (row,) = [p for p in json_lines_summary(applied.stdout)["partitions"] if p["partition"].endswith("time-roll-0")]
    assert row["segments_deleted"] > 0 and row["config"]["retention.ms"]["source"] == "Kafka default, applied: --kafka-defaults"


def test_compact_delete_retention_after_cleaning_ignores_the_default_retention_ms(tmp_path: Path) -> None:
    """cleanup.policy=compact,delete from the metadata log: the cleaner thread's retention after the pass
    used to apply Kafka's 7-day retention.ms, which nothing set."""
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / "v2-compact-0", data / "cache-0")
    _cluster(data, [(TOPIC, "cache", "cleanup.policy", "compact,delete")])
    now = str(1_700_000_000_000 + 365 * 24 * HOUR)
    result = CliRunner().invoke(cli, ["compact", "--json", "--force-clean", "--now", now, str(data)])
    assert result.exit_code == 0, result.output
    (row,) = [p for p in json_lines_summary(result.stdout)["partitions"] if p["partition"].endswith("cache-0")]
    assert row["cleaned"] and (row["retention"] is None or row["retention"]["segments_deleted"] == 0)
    assert row["settings"]["retention.ms"]["source"] == "Kafka default, not applied without --kafka-defaults"


@pytest.mark.parametrize("key, value, message", [
    ("cleanup.policy", "Compact",
     "Invalid value Compact for configuration cleanup.policy: String must be one of: compact, delete"),
    ("cleanup.policy", "compact,Delete",
     "Invalid value Delete for configuration cleanup.policy: String must be one of: compact, delete"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("retention.ms", "1_000", "Invalid value 1_000 for configuration retention.ms: Not a number of type LONG"),
])
def test_a_metadata_log_value_kafka_rejects_refuses_the_partition(tmp_path: Path, key: str, value: str,
                                                                 message: str) -> None:
    """LogConfig's ConfigDef would not build this topic's config; kstore used to read Compact as compact
    (and 1_000 as 1000) and act on it."""
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / "v2-compact-0", data / "cache-0")
    at = _cluster(data, [(TOPIC, "cache", key, value)])
    before = _tree(tmp_path)
    for command in (["compact", "--force-clean"], ["retain", "--now", str(1_700_000_000_000 + 365 * 24 * HOUR)]):
        result = CliRunner().invoke(cli, [*command, "--json", str(data)])
        assert result.exit_code == 1, result.output
        (row,) = [p for p in json_lines_summary(result.stdout)["partitions"] if p["partition"].endswith("cache-0")]
        assert row["problem"].startswith(f"{message} (cluster metadata @ offset {at[(TOPIC, 'cache', key)]})")
        assert _tree(tmp_path) == before


def _drop_indexes(part: Path) -> None:
    for index in part.glob("*.index"):
        index.unlink()


def test_rebuild_index_refuses_only_the_partition_whose_metadata_config_kafka_rejects(tmp_path: Path) -> None:
    """An index.interval.bytes Kafka's ConfigDef rejects in the metadata log used to stop the whole run (exit 2,
    nothing rebuilt); now that partition alone is not handled (exit 1) and the others are rebuilt."""
    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs" / "v2-compact-0", data / "cache-0")
    shutil.copytree(CORPUS / "logs" / "time-roll-0", data / "time-roll-0")
    at = _cluster(data, [(TOPIC, "cache", "index.interval.bytes", "-1")])
    message = (f"Invalid value -1 for configuration index.interval.bytes: Value must be at least 0 "
               f"(cluster metadata @ offset {at[(TOPIC, 'cache', 'index.interval.bytes')]})")
    for part in (data / "cache-0", data / "time-roll-0"):
        _drop_indexes(part)
    result = CliRunner().invoke(cli, ["rebuild-index", "--json", str(data)])
    assert result.exit_code == 1, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    (refused,) = [r for r in rows if r["partition"].endswith("cache-0")]
    assert refused["type"] == "config" and refused["status"] == "refused"
    assert refused["message"].startswith(message)
    assert not list((data / "cache-0").glob("*.index"))  # left alone
    assert {r["status"] for r in rows if r["partition"].endswith("time-roll-0")} == {"rebuilt"}
    assert len(list((data / "time-roll-0").glob("*.index"))) == 4
    text = CliRunner().invoke(cli, ["rebuild-index", str(data)])
    assert text.exit_code == 1 and f"cache-0: not handled: {message}" in text.output


def test_rebuild_index_gives_an_older_incarnation_no_setting_of_the_recreated_topic(tmp_path: Path) -> None:
    """The recreated topic's index.interval.bytes=100 from the metadata log used to be applied to the old
    topic's log; it is rebuilt with the value from elsewhere (Kafka's default here), and the output says so."""
    data = _recreated(tmp_path, "time-roll", "time-roll-0", [(TOPIC, "time-roll", "index.interval.bytes", "100")])
    part = data / "time-roll-0"
    _drop_indexes(part)
    reference = tmp_path / "reference"
    for interval in ("4096", "100"):
        shutil.copytree(part, reference / interval / "time-roll-0")
        done = CliRunner().invoke(cli, ["rebuild-index", "--no-cluster-metadata", "--index-interval-bytes", interval,
                                        str(reference / interval / "time-roll-0")])
        assert done.exit_code == 0, done.output
    result = CliRunner().invoke(cli, ["rebuild-index", "--json", str(data)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    (note,) = [r for r in rows if r["type"] == "config"]
    assert note["status"] == "applied" and note["index_interval_bytes"] == 4096 and note["source"] == "Kafka default"
    assert note["message"].startswith(f"partition.metadata has topic ID {OLD_INCARNATION}")
    for index in part.glob("*.index"):
        assert index.read_bytes() == (reference / "4096" / "time-roll-0" / index.name).read_bytes(), index.name
    assert any(index.read_bytes() != (reference / "100" / "time-roll-0" / index.name).read_bytes()
               for index in part.glob("*.index"))
    _drop_indexes(part)
    text = CliRunner().invoke(cli, ["rebuild-index", "--index-interval-bytes", "200", str(part)])
    assert text.exit_code == 0, text.output
    assert (f"time-roll-0: index.interval.bytes 200 from --index-interval-bytes, not from the cluster metadata: "
            f"partition.metadata has topic ID {OLD_INCARNATION}") in text.output
