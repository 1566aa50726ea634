"""Topic config resolution: Kafka's defaults, server.properties synonyms and their precedence,
the per-topic override file (exact names, globs, JSON), flags on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstore_cli.errors import FileUnreadableError, UsageError
from kstore_cli.log.config import (
    DEFAULT_SOURCE,
    CleanerSettings,
    ConfigResolver,
    broker_settings,
    load_broker_config,
    load_topic_overrides,
    compaction_flags,
    parse_topic_overrides,
    parse_value,
    retention_flags,
)

WEEK_MS = 7 * 24 * 3600 * 1000


def test_kafka_defaults() -> None:
    config = ConfigResolver().for_topic("orders")
    assert config.retention_ms == WEEK_MS
    assert config.retention_bytes == -1
    assert config.cleanup_policy == ("delete",)
    assert config.delete and not config.compact
    assert config.get("file.delete.delay.ms") == 60000
    assert config.get("segment.bytes") == 1 << 30
    assert config.source("retention.ms") == DEFAULT_SOURCE


@pytest.mark.parametrize("props, expected", [
    ({"log.retention.hours": "48"}, 48 * 3600_000),
    ({"log.retention.hours": "48", "log.retention.minutes": "30"}, 30 * 60_000),
    ({"log.retention.hours": "48", "log.retention.minutes": "30", "log.retention.ms": "1234"}, 1234),
    ({"log.retention.ms": "-5"}, -1),
    ({"log.retention.hours": "-1"}, -1),
    ({}, WEEK_MS),
])
def test_broker_retention_time_precedence(props: dict, expected: int) -> None:
    config = ConfigResolver(broker=broker_settings(props)).for_topic("t")
    assert config.retention_ms == expected


def test_broker_file_synonyms(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a broker\n"
        "broker.id=1\n"
        "log.dirs=/var/lib/kafka\n"
        "log.retention.hours=168\n"
        "log.retention.bytes = 1073741824\n"
        "log.cleanup.policy=compact, delete\n"
        "log.segment.delete.delay.ms=1000\n"
        "log.roll.hours=1\n"
        "log.cleaner.min.cleanable.ratio=0.25\n"
    )
    config = ConfigResolver(broker=load_broker_config(path)).for_topic("t")
    assert config.retention_bytes == 1073741824
    assert config.cleanup_policy == ("compact", "delete") and config.delete and config.compact
    assert config.get("file.delete.delay.ms") == 1000
    assert config.get("segment.ms") == 3600_000
    assert config.get("min.cleanable.dirty.ratio") == 0.25
    assert config.source("retention.bytes") == f"{path}: log.retention.bytes"


def test_bad_broker_value_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="log.retention.bytes"):
        broker_settings({"log.retention.bytes": "lots"})
    with pytest.raises(UsageError, match="cleanup.policy"):
        broker_settings({"log.cleanup.policy": "delete,shred"})


TOPICS_INI = """
# per-topic overrides
[orders]
retention.ms = 1000

[ord*]
retention.ms = 2000
retention.bytes = 300

[*]
retention.bytes = 400
cleanup.policy = compact
"""


def test_exact_section_then_globs_in_file_order() -> None:
    overrides = parse_topic_overrides(TOPICS_INI, "topics.ini")
    resolver = ConfigResolver(overrides=overrides, broker=broker_settings({"log.retention.ms": "5"}))
    orders = resolver.for_topic("orders")
    assert (orders.retention_ms, orders.retention_bytes, orders.cleanup_policy) == (1000, 300, ("compact",))
    assert orders.source("retention.ms") == "topics.ini [orders]"
    assert orders.source("retention.bytes") == "topics.ini [ord*]"
    ordinal = resolver.for_topic("ordinal")
    assert (ordinal.retention_ms, ordinal.retention_bytes) == (2000, 300)
    other = resolver.for_topic("payments")
    assert (other.retention_ms, other.retention_bytes) == (5, 400)
    assert other.source("retention.ms") == "server.properties: log.retention.ms"


def test_flags_win_over_everything() -> None:
    flags = retention_flags(minutes=3, retention_bytes=7)
    resolver = ConfigResolver(overrides=parse_topic_overrides(TOPICS_INI), flags=flags,
                              broker=broker_settings({"log.retention.ms": "5"}))
    config = resolver.for_topic("orders")
    assert (config.retention_ms, config.retention_bytes) == (180_000, 7)
    assert config.source("retention.ms") == "--retention-minutes"
    assert config.cleanup_policy == ("compact",)  # no flag for the policy


def test_flag_forms() -> None:
    assert retention_flags(hours=2)["retention.ms"][0] == 7_200_000
    assert retention_flags(ms=-1)["retention.ms"][0] == -1
    assert retention_flags() == {}
    with pytest.raises(UsageError, match="only one"):
        retention_flags(ms=1, hours=1)
    with pytest.raises(UsageError):
        retention_flags(ms=-2)


def test_internal_topics_are_compacted_unless_overridden() -> None:
    resolver = ConfigResolver(broker=broker_settings({"log.cleanup.policy": "delete"}))
    assert resolver.for_topic("__consumer_offsets").cleanup_policy == ("compact",)
    assert resolver.for_topic("__transaction_state").compact
    overridden = ConfigResolver(overrides=parse_topic_overrides("[__consumer_offsets]\ncleanup.policy=delete\n"))
    assert overridden.for_topic("__consumer_offsets").cleanup_policy == ("delete",)


def test_json_overrides() -> None:
    overrides = parse_topic_overrides('{"orders": {"retention.ms": 10, "cleanup.policy": ["compact", "delete"]},'
                                      ' "logs.*": {"retention.bytes": "20", "preallocate": true}}')
    resolver = ConfigResolver(overrides=overrides)
    assert resolver.for_topic("orders").retention_ms == 10
    assert resolver.for_topic("orders").cleanup_policy == ("compact", "delete")
    assert resolver.for_topic("logs.app").retention_bytes == 20
    assert resolver.for_topic("logs.app").get("preallocate") is True
    assert resolver.for_topic("logsXapp").retention_bytes == -1  # '.' is literal in a glob


@pytest.mark.parametrize("text, match", [
    ("[orders]\nretention.msec = 5\n", "unknown topic config 'retention.msec'"),
    ("[orders]\nretention.ms = soon\n", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
    ("[orders]\nretention.ms = -2\n", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("[orders]\ncleanup.policy = shred\n", "Invalid value shred for configuration cleanup.policy: String must be one of: compact, delete"),
    ("[orders]\npreallocate = maybe\n", "Invalid value maybe for configuration preallocate: Expected value to be either true or false"),
    ("retention.ms = 5\n", "not a valid topic config file"),
    ("[orders]\nretention.ms = 1\n[orders]\nretention.ms = 2\n", "not a valid topic config file"),
    ('{"orders": 5}', "expected a JSON object"),
    ('{"orders": {"retention.ms": 1.5}}', "Invalid value 1.5 for configuration retention.ms: Not a number of type LONG"),
    ("{nope", "not valid JSON"),
])
def test_bad_override_files_are_usage_errors(text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_topic_overrides(text, "topics.ini")


def test_missing_files_are_unreadable(tmp_path: Path) -> None:
    with pytest.raises(FileUnreadableError):
        load_topic_overrides(tmp_path / "nope.ini")
    with pytest.raises(FileUnreadableError):
        load_broker_config(tmp_path / "server.properties")
    path = tmp_path / "topics.ini"
    path.write_text("[a-topic]\nretention.bytes=1\n")
    assert ConfigResolver.from_files(topic_config=str(path)).for_topic("a-topic").retention_bytes == 1


# --------------------------------------------------------------------------- LogConfig's ConfigDef (issue 29)
# Each message is what Kafka's LogConfig (the oracle's commit) throws for the value: ConfigException's text.


@pytest.mark.parametrize("key, raw, reason", [
    ("cleanup.policy", "Compact", "Invalid value Compact for configuration cleanup.policy: String must be one of: "
                                  "compact, delete"),
    ("cleanup.policy", "[compact]", "Invalid value [compact] for configuration cleanup.policy: String must be one "
                                    "of: compact, delete"),
    ("cleanup.policy", "compact,,delete", "Invalid value  for configuration cleanup.policy: String must be one of: "
                                          "compact, delete"),
    ("retention.ms", "0x10", "Invalid value 0x10 for configuration retention.ms: Not a number of type LONG"),
    ("retention.ms", "9223372036854775808", "Invalid value 9223372036854775808 for configuration retention.ms: "
                                            "Not a number of type LONG"),
    ("segment.bytes", "99999999999", "Invalid value 99999999999 for configuration segment.bytes: Not a number of "
                                     "type INT"),
    ("segment.bytes", "13", "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
    ("segment.index.bytes", "3", "Invalid value 3 for configuration segment.index.bytes: Value must be at least 4"),
    ("max.compaction.lag.ms", "0", "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at "
                                   "least 1"),
    ("delete.retention.ms", "-1", "Invalid value -1 for configuration delete.retention.ms: Value must be at least 0"),
    ("min.cleanable.dirty.ratio", "1.5", "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must "
                                         "be no more than 1"),
    ("min.cleanable.dirty.ratio", "x", "Invalid value x for configuration min.cleanable.dirty.ratio: Not a number of "
                                       "type DOUBLE"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: Expected value to be either true or "
                           "false"),
    ("compression.type", "GZIP", "Invalid value GZIP for configuration compression.type: String must be one of: "
                                 "uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("message.timestamp.type", "createtime", "Invalid value createtime for configuration message.timestamp.type: "
                                             "String must be one of: CreateTime, LogAppendTime"),
    ("compression.gzip.level", "0", "Invalid value 0 for configuration compression.gzip.level: Value must be "
                                    "between 1 and 9 or equal to -1"),
    ("compression.zstd.level", "-131073", "Invalid value -131073 for configuration compression.zstd.level: Value "
                                          "must be at least -131072"),
    ("leader.replication.throttled.replicas", "*,1:2", "Invalid value [*, 1:2] for configuration "
     "leader.replication.throttled.replicas: leader.replication.throttled.replicas must be the literal '*' or a "
     "list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
])
def test_values_kafkas_configdef_rejects_are_refused_with_its_message(key: str, raw: str, reason: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_value(key, raw, "topics.ini [orders]")
    assert info.value.message == f"{reason} (topics.ini [orders])"


@pytest.mark.parametrize("key, raw, value", [
    ("cleanup.policy", " compact , delete ", ("compact", "delete")),
    ("cleanup.policy", "", ()),
    ("retention.ms", " +5 ", 5),
    ("preallocate", "TRUE", True),
    ("min.cleanable.dirty.ratio", "1e-1", 0.1),
    ("compression.gzip.level", "-1", -1),
    ("leader.replication.throttled.replicas", " 1:2 , 3:4", ("1:2", "3:4")),
    ("segment.bytes", "14", 14),
])
def test_values_kafkas_configdef_accepts(key: str, raw: str, value) -> None:
    assert parse_value(key, raw, "here") == value


def test_broker_synonyms_are_checked_under_their_own_name() -> None:
    with pytest.raises(UsageError, match="^Invalid value Delete for configuration log.cleanup.policy: String must"):
        broker_settings({"log.cleanup.policy": "Delete"})
    with pytest.raises(UsageError, match="^Invalid value 0 for configuration log.roll.hours: Value must be at least 1"):
        broker_settings({"log.roll.hours": "0"})
    assert broker_settings({"log.retention.hours": "-5"})["retention.ms"][0] == -1  # negative: unlimited


@pytest.mark.parametrize("flag, value, reason", [
    ("max_compaction_lag_ms", 0, "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1 "
                                 "(--max-compaction-lag-ms)"),
    ("segment_bytes", 13, "Invalid value 13 for configuration segment.bytes: Value must be at least 14 "
                          "(--segment-bytes)"),
    ("segment_bytes", 1 << 31, f"Invalid value {1 << 31} for configuration segment.bytes: Not a number of type INT "
                               "(--segment-bytes)"),
])
def test_invalid_compaction_flags_are_usage_errors_with_kafkas_message(flag: str, value: int, reason: str) -> None:
    with pytest.raises(UsageError) as info:
        compaction_flags(**{flag: value})
    assert info.value.message == reason and info.value.exit_status == 2


# --------------------------------------------------------------------------- the cleaner's broker settings (issue 29)
# KafkaConfig's ConfigDef for them: CleanerConfig.CONFIG_DEF, ServerConfigs (message.max.bytes), TransactionLogConfig
# (producer.id.expiration.ms). They used to be read with Python's int()/float(), which take what Kafka rejects.


@pytest.mark.parametrize("key, raw, reason", [
    ("log.cleaner.dedupe.buffer.size", "1_000_000", "Not a number of type LONG"),
    ("log.cleaner.dedupe.buffer.size", "64m", "Not a number of type LONG"),
    ("log.cleaner.threads", "-1", "Value must be at least 0"),
    ("log.cleaner.threads", "2.0", "Not a number of type INT"),
    ("log.cleaner.io.buffer.size", "-1", "Value must be at least 0"),
    ("log.cleaner.io.buffer.size", "4294967296", "Not a number of type INT"),
    ("log.cleaner.io.buffer.load.factor", "infinity", "Not a number of type DOUBLE"),
    ("log.cleaner.io.buffer.load.factor", "0_5", "Not a number of type DOUBLE"),
    ("message.max.bytes", "99999999999", "Not a number of type INT"),
    ("message.max.bytes", "-1", "Value must be at least 0"),
    ("producer.id.expiration.ms", "0", "Value must be at least 1"),
])
def test_cleaner_settings_kafkas_configdef_rejects_are_refused_with_its_message(key: str, raw: str,
                                                                               reason: str) -> None:
    with pytest.raises(UsageError) as info:
        CleanerSettings.from_properties({key: raw}, source="server.properties")
    assert info.value.message == f"Invalid value {raw} for configuration {key}: {reason} (server.properties: {key})"


def test_cleaner_settings_kafkas_configdef_accepts() -> None:
    """Java's Double.parseDouble takes a trailing d/f; a value is trimmed; threads=0 (the broker runs no cleaner)
    sizes the buffers as for one; a dedupe buffer past 2 GiB per thread is capped as LogCleaner caps it, and
    the source says so."""
    settings = CleanerSettings.from_properties({"log.cleaner.io.buffer.load.factor": "0.75d",
                                                "log.cleaner.io.buffer.size": " +1024 ", "log.cleaner.threads": "0",
                                                "producer.id.expiration.ms": "1"})
    assert settings.load_factor == 0.75 and settings.io_buffer_bytes == 512
    assert settings.producer_id_expiration_ms == 1
    big = CleanerSettings.from_properties({"log.cleaner.dedupe.buffer.size": str(6 << 30),
                                           "log.cleaner.threads": "2"}, source="s.properties")
    assert big.dedupe_buffer_bytes == (1 << 31) - 1
    assert big.sources["log.cleaner.dedupe.buffer.size"] == ("s.properties: log.cleaner.dedupe.buffer.size, capped "
                                                             "at 2147483647 per cleaner thread as LogCleaner caps it")
