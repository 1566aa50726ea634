"""Topic configuration for offline maintenance (retain now, compact later): Kafka's
``LogConfig`` defaults, the broker-level synonyms of a ``server.properties``, per-topic
overrides from a file, and command-line flags.

Resolution, per key, highest first (Kafka's own order, with flags on top)::

    1. flags                      (--retention-ms ..., given to ConfigResolver as topic-level keys)
    2. --topic-config FILE        a section naming the topic exactly, then glob sections in file order
    3. the topic's overrides      ConfigRecords of the TOPIC in the cluster metadata log found in
                                  the data dirs (what kafka-configs --alter --entity-type topics set)
    4. internal-topic overrides   what Kafka sets when it creates __consumer_offsets and
                                  __transaction_state (cleanup.policy=compact), where no metadata says
    5. broker settings            broker keys merged as DynamicBrokerConfig merges them: this node's
                                  dynamic config (BROKER <node.id>) > the dynamic cluster default
                                  (BROKER "") > --config server.properties; then the synonyms:
                                  log.retention.ms > log.retention.minutes > log.retention.hours, ...
    6. Kafka's defaults           retention.ms 7 days, retention.bytes -1 (unlimited), ...; a retention
                                  setting that only a default sets deletes nothing unless --kafka-defaults
                                  (TopicConfig.enforced)

The metadata log's configs (3, and its dynamic broker configs in 5) apply only to a partition directory
whose partition.metadata topic ID is the image's for its topic (ConfigResolver.incarnation_problem).
Every value is read as Kafka's ConfigDef.parse reads it (type, then LogConfig's validator), and one Kafka
rejects is refused with ConfigException's message.

A setting from the metadata log names its source as ``cluster metadata @ offset N`` (the ConfigRecord
that set it) or ``cluster metadata snapshot <file>``.

The topic-config file is INI, one section per topic name or glob (``fnmatch``: ``*``, ``?``,
``[seq]``; topic names cannot contain these characters, so a section is a glob exactly when
it has one), keys being Kafka's topic-level config names::

    # kstore topic overrides
    [orders]
    retention.ms = 86400000

    [logs.*]
    retention.bytes = 1073741824
    cleanup.policy = delete

    [*-changelog]
    cleanup.policy = compact

A JSON object of the same shape (``{"orders": {"retention.ms": 86400000}, ...}``) is accepted
too. Unknown keys and bad values are errors (Kafka rejects them as well), so a typo cannot
silently leave a topic on the defaults.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

from kstore_cli.errors import FileUnreadableError, InvalidConfigError, KstoreError, UsageError
from kstore_cli.log.checkpoint import PARTITION_METADATA, read_partition_metadata, read_properties
from kstore_cli.log.names import METADATA_LOG_TOPIC, REPLICA_DIR_SUFFIXES

if TYPE_CHECKING:
    from kstore_cli.log.logdir import Partition

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE
LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

# Value kinds.
LONG = "long"
INT = "int"
DOUBLE = "double"
BOOLEAN = "boolean"
LIST = "list"
STRING = "string"

#: Kafka's topic-level configs (LogConfig / TopicConfig): kind and default.
TOPIC_CONFIGS: Dict[str, Tuple[str, Any]] = {
    "cleanup.policy": (LIST, ("delete",)),
    "compression.type": (STRING, "producer"),
    "compression.gzip.level": (INT, -1),
    "compression.lz4.level": (INT, 9),
    "compression.zstd.level": (INT, 3),
    "delete.retention.ms": (LONG, 86400000),
    "file.delete.delay.ms": (LONG, 60000),
    "flush.messages": (LONG, LONG_MAX),
    "flush.ms": (LONG, LONG_MAX),
    "follower.replication.throttled.replicas": (LIST, ()),
    "index.interval.bytes": (INT, 4096),
    "leader.replication.throttled.replicas": (LIST, ()),
    "local.retention.bytes": (LONG, -2),
    "local.retention.ms": (LONG, -2),
    "max.compaction.lag.ms": (LONG, LONG_MAX),
    "max.message.bytes": (INT, 1048588),
    "message.downconversion.enable": (BOOLEAN, True),
    "message.format.version": (STRING, "3.0-IV1"),
    "message.timestamp.after.max.ms": (LONG, LONG_MAX),
    "message.timestamp.before.max.ms": (LONG, LONG_MAX),
    "message.timestamp.difference.max.ms": (LONG, LONG_MAX),
    "message.timestamp.type": (STRING, "CreateTime"),
    "min.cleanable.dirty.ratio": (DOUBLE, 0.5),
    "min.compaction.lag.ms": (LONG, 0),
    "min.insync.replicas": (INT, 1),
    "preallocate": (BOOLEAN, False),
    "remote.log.copy.disable": (BOOLEAN, False),
    "remote.log.delete.on.disable": (BOOLEAN, False),
    "remote.storage.enable": (BOOLEAN, False),
    "retention.bytes": (LONG, -1),
    "retention.ms": (LONG, 7 * 24 * MS_PER_HOUR),
    "segment.bytes": (INT, 1024 * 1024 * 1024),
    "segment.index.bytes": (INT, 10 * 1024 * 1024),
    "segment.jitter.ms": (LONG, 0),
    "segment.ms": (LONG, 7 * 24 * MS_PER_HOUR),
    "unclean.leader.election.enable": (BOOLEAN, False),
}

#: Broker-level synonyms (ServerTopicConfigSynonyms): topic key -> [(broker key, multiplier)],
#: highest precedence first.
BROKER_SYNONYMS: Dict[str, List[Tuple[str, int]]] = {
    "segment.bytes": [("log.segment.bytes", 1)],
    "segment.ms": [("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR)],
    "segment.jitter.ms": [("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", MS_PER_HOUR)],
    "segment.index.bytes": [("log.index.size.max.bytes", 1)],
    "flush.messages": [("log.flush.interval.messages", 1)],
    "flush.ms": [("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)],
    "retention.bytes": [("log.retention.bytes", 1)],
    "retention.ms": [("log.retention.ms", 1), ("log.retention.minutes", MS_PER_MINUTE),
                     ("log.retention.hours", MS_PER_HOUR)],
    "max.message.bytes": [("message.max.bytes", 1)],
    "index.interval.bytes": [("log.index.interval.bytes", 1)],
    "delete.retention.ms": [("log.cleaner.delete.retention.ms", 1)],
    "min.compaction.lag.ms": [("log.cleaner.min.compaction.lag.ms", 1)],
    "max.compaction.lag.ms": [("log.cleaner.max.compaction.lag.ms", 1)],
    "file.delete.delay.ms": [("log.segment.delete.delay.ms", 1)],
    "min.cleanable.dirty.ratio": [("log.cleaner.min.cleanable.ratio", 1)],
    "cleanup.policy": [("log.cleanup.policy", 1)],
    "unclean.leader.election.enable": [("unclean.leader.election.enable", 1)],
    "min.insync.replicas": [("min.insync.replicas", 1)],
    "compression.type": [("compression.type", 1)],
    "compression.gzip.level": [("compression.gzip.level", 1)],
    "compression.lz4.level": [("compression.lz4.level", 1)],
    "compression.zstd.level": [("compression.zstd.level", 1)],
    "preallocate": [("log.preallocate", 1)],
    "message.format.version": [("log.message.format.version", 1)],
    "message.timestamp.type": [("log.message.timestamp.type", 1)],
    "message.timestamp.difference.max.ms": [("log.message.timestamp.difference.max.ms", 1)],
    "message.timestamp.before.max.ms": [("log.message.timestamp.before.max.ms", 1)],
    "message.timestamp.after.max.ms": [("log.message.timestamp.after.max.ms", 1)],
    "message.downconversion.enable": [("log.message.downconversion.enable", 1)],
    "local.retention.ms": [("log.local.retention.ms", 1)],
    "local.retention.bytes": [("log.local.retention.bytes", 1)],
}

#: Topic configs Kafka sets when it creates its internal topics.
INTERNAL_TOPIC_OVERRIDES: Dict[str, Dict[str, Any]] = {
    "__consumer_offsets": {"cleanup.policy": ("compact",)},
    "__transaction_state": {"cleanup.policy": ("compact",)},
}

CLEANUP_POLICIES = ("compact", "delete")
DEFAULT_SOURCE = "Kafka default"

#: Settings whose value alone makes retention delete segments: one that comes only from Kafka's built-in
#: default deletes nothing unless the operator asks for the defaults (--kafka-defaults).
DELETING_SETTINGS = ("retention.ms", "retention.bytes")


# --------------------------------------------------------------------------- ConfigDef validation
# The validators of LogConfig's ConfigDef (and KafkaConfig's for the broker synonyms) at the Kafka commit
# of the oracle and the corpus; each returns ConfigException's reason, or None when the value is valid.

Validator = Callable[[Any], Optional[str]]


def _at_least(low: float) -> Validator:
    """ConfigDef.Range.atLeast (NaN passes, as Java's comparisons let it)."""
    return lambda v: f"Value must be at least {low}" if v < low else None


def _between(low: float, high: float) -> Validator:
    """ConfigDef.Range.between."""
    return lambda v: (f"Value must be at least {low}" if v < low else
                      f"Value must be no more than {high}" if v > high else None)


def _valid_string(*valid: str) -> Validator:
    """ConfigDef.ValidString.in: case-sensitive."""
    return lambda v: None if v in valid else f"String must be one of: {', '.join(valid)}"


def _gzip_level(v: int) -> Optional[str]:
    """GzipCompression.LevelValidator: Deflater's levels 1-9 or its default -1."""
    return None if v == -1 or 1 <= v <= 9 else "Value must be between 1 and 9 or equal to -1"


_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+")


def _throttled_replicas(name: str) -> Validator:
    """ThrottledReplicaListValidator: '*' alone or partitionId:brokerId items."""
    def check(v: Tuple[str, ...]) -> Optional[str]:
        if v == ("*",) or all(_THROTTLED_REPLICA.fullmatch(item) for item in v):
            return None
        return (f"{name} must be the literal '*' or a list of replicas in the following format: "
                "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return check


#: Topic key -> validator (LogConfig's CONFIG); keys without one take any value of their type.
TOPIC_VALIDATORS: Dict[str, Validator] = {
    "segment.bytes": _at_least(14),  # LegacyRecord.RECORD_OVERHEAD_V0
    "segment.ms": _at_least(1),
    "segment.jitter.ms": _at_least(0),
    "segment.index.bytes": _at_least(4),
    "flush.messages": _at_least(1),
    "flush.ms": _at_least(0),
    "retention.ms": _at_least(-1),
    "max.message.bytes": _at_least(0),
    "index.interval.bytes": _at_least(0),
    "delete.retention.ms": _at_least(0),
    "min.compaction.lag.ms": _at_least(0),
    "max.compaction.lag.ms": _at_least(1),
    "file.delete.delay.ms": _at_least(0),
    "min.cleanable.dirty.ratio": _between(0, 1),
    "min.insync.replicas": _at_least(1),
    "compression.type": _valid_string("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "compression.gzip.level": _gzip_level,
    "compression.lz4.level": _between(1, 17),
    "compression.zstd.level": _between(-131072, 22),
    "message.timestamp.type": _valid_string("CreateTime", "LogAppendTime"),
    "message.timestamp.difference.max.ms": _at_least(0),
    "message.timestamp.before.max.ms": _at_least(0),
    "message.timestamp.after.max.ms": _at_least(0),
    "leader.replication.throttled.replicas": _throttled_replicas("leader.replication.throttled.replicas"),
    "follower.replication.throttled.replicas": _throttled_replicas("follower.replication.throttled.replicas"),
    "local.retention.ms": _at_least(-2),
    "local.retention.bytes": _at_least(-2),
}

#: Broker keys whose type or validator differs from their topic key's (KafkaConfig's ConfigDef): the
#: hours and minutes synonyms are INTs; log.retention.* and the flush scheduler take any number (a
#: negative retention time means unlimited, KafkaConfig.logRetentionTimeMillis).
BROKER_KEY_DEFS: Dict[str, Tuple[str, Optional[Validator]]] = {
    "log.retention.ms": (LONG, None),
    "log.retention.minutes": (INT, None),
    "log.retention.hours": (INT, None),
    "log.roll.hours": (INT, _at_least(1)),
    "log.roll.jitter.hours": (INT, _at_least(0)),
    "log.flush.scheduler.interval.ms": (LONG, None),
}

_INTEGER = re.compile(r"[+-]?[0-9]+")
# Java's Double.parseDouble, less its hexadecimal form.
_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_BITS = {LONG: 63, INT: 31}


def _parse_type(kind: str, raw: Any) -> Any:
    """ConfigDef.parseType: the value of `kind`, or raise ValueError with ConfigException's reason."""
    text = raw.strip() if isinstance(raw, str) else raw
    if kind in (LONG, INT):
        if isinstance(text, bool) or not isinstance(text, (int, str)) or (
                isinstance(text, str) and not _INTEGER.fullmatch(text)):
            raise ValueError(f"Not a number of type {kind.upper()}")
        value = int(text)
        if not -(1 << _BITS[kind]) <= value < (1 << _BITS[kind]):
            raise ValueError(f"Not a number of type {kind.upper()}")
        return value
    if kind == DOUBLE:
        if isinstance(text, bool) or not isinstance(text, (int, float, str)) or (
                isinstance(text, str) and not _DOUBLE.fullmatch(text)):
            raise ValueError("Not a number of type DOUBLE")
        return float(text.rstrip("fFdD") if isinstance(text, str) else text)
    if kind == BOOLEAN:
        if isinstance(text, bool):
            return text
        if isinstance(text, str) and text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError("Expected value to be either true or false")
    if kind == LIST:
        if isinstance(text, list):
            return tuple(str(item) for item in text)
        text = str(text).strip()
        return tuple(re.split(r"\s*,\s*", text)) if text else ()
    return str(text)


def _invalid(name: str, raw: Any, reason: str, where: str) -> InvalidConfigError:
    """ConfigException(name, value, reason)'s message, and where the value came from."""
    shown = raw.strip() if isinstance(raw, str) else raw
    return InvalidConfigError(f"Invalid value {shown} for configuration {name}: {reason} ({where})")


def parse_value(key: str, raw: Any, where: str, multiplier: int = 1, name: Optional[str] = None) -> Any:
    """A topic config value as Kafka's ConfigDef.parse reads it (type, then validator), from properties
    text or a JSON scalar; `name` is the broker key it was given as (a synonym), `multiplier` its unit.

    Raises :class:`InvalidConfigError` with ConfigException's message where Kafka rejects the value."""
    if key not in TOPIC_CONFIGS:
        raise UsageError(f"unknown topic config {key!r} ({where})")
    name = name or key
    kind, validator = BROKER_KEY_DEFS.get(name, (TOPIC_CONFIGS[key][0], TOPIC_VALIDATORS.get(key)))
    if kind == LIST and key == "cleanup.policy":  # ValidList.in(compact, delete), element by element
        value = _parse_def(name, kind, None, raw, where)
        bad = next((item for item in value if item not in CLEANUP_POLICIES), None)
        if bad is not None:
            raise _invalid(name, bad, f"String must be one of: {', '.join(CLEANUP_POLICIES)}", where)
    else:
        value = _parse_def(name, kind, validator, raw, where)
    return value * multiplier if multiplier != 1 else value


def _parse_def(name: str, kind: str, validator: Optional[Validator], raw: Any, where: str) -> Any:
    """ConfigDef.parseValue of one definition: the value of `kind`, then its validator."""
    try:
        value = _parse_type(kind, raw)
    except ValueError as exc:
        raise _invalid(name, raw, str(exc), where) from None
    reason = validator(value) if validator is not None else None
    if reason is not None:
        raise _invalid(name, f"[{', '.join(value)}]" if kind == LIST else raw, reason, where)
    return value


def broker_settings(props: Mapping[str, str], source: str = "server.properties",
                    sources: Optional[Mapping[str, str]] = None) -> Dict[str, Tuple[Any, str]]:
    """Topic-level values implied by broker properties: {topic key: (value, where it came from)}.

    For each key the first synonym present wins (log.retention.ms before .minutes before .hours,
    as KafkaConfig.logRetentionTimeMillis). A negative retention time means unlimited (-1).
    `sources` names where each broker key came from (merged configs); else `source` for all.
    """
    out: Dict[str, Tuple[Any, str]] = {}
    for key, synonyms in BROKER_SYNONYMS.items():
        for name, multiplier in synonyms:
            raw = props.get(name)
            if raw is None or not raw.strip():
                continue
            where = f"{(sources or {}).get(name, source)}: {name}"
            value = parse_value(key, raw, where, multiplier, name)
            if key == "retention.ms" and value < 0:
                value = -1  # any negative retention means unlimited (KafkaConfig.logRetentionTimeMillis)
            out[key] = (value, where)
            break
    return out


def load_broker_config(path: "str | os.PathLike[str]") -> Dict[str, Tuple[Any, str]]:
    """:func:`broker_settings` of a server.properties file; each source names the file as given
    (which file decided a setting is what an operator checks)."""
    path = os.fspath(path)
    return broker_settings(read_properties(path), path)


class TopicOverrides:
    """Per-topic overrides: exact names and globs, each a {topic key: value} mapping."""

    def __init__(self, sections: List[Tuple[str, Dict[str, Any]]], source: str = "topic config") -> None:
        self.source = source
        self.exact: Dict[str, Dict[str, Any]] = {}
        self.globs: List[Tuple[str, Dict[str, Any]]] = []
        for name, values in sections:
            if is_glob(name):
                self.globs.append((name, values))
            else:
                self.exact.setdefault(name, {}).update(values)

    def lookup(self, topic: str) -> Dict[str, Tuple[Any, str]]:
        """{key: (value, where)} for a topic: its exact section first, then matching globs in order."""
        out: Dict[str, Tuple[Any, str]] = {}
        for key, value in self.exact.get(topic, {}).items():
            out[key] = (value, f"{self.source} [{topic}]")
        for pattern, values in self.globs:
            if fnmatch.fnmatchcase(topic, pattern):
                for key, value in values.items():
                    out.setdefault(key, (value, f"{self.source} [{pattern}]"))
        return out


def is_glob(name: str) -> bool:
    return any(c in name for c in "*?[")


def parse_topic_overrides(text: str, source: str = "topic config") -> TopicOverrides:
    """Overrides from INI text (or a JSON object); raises UsageError on unknown keys or bad values."""
    sections: List[Tuple[str, Dict[str, Any]]] = []
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"not valid JSON: {exc}", path=source) from None
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise UsageError("expected a JSON object of topic name or glob -> {config: value}", path=source)
        for name, values in data.items():
            sections.append((name, {k: parse_value(k, v, f"{source} [{name}]") for k, v in values.items()}))
        return TopicOverrides(sections, source)
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=", ":"),
                                       comment_prefixes=("#", ";"), inline_comment_prefixes=None,
                                       default_section="\x00kstore-no-default")
    parser.optionxform = str  # type: ignore[assignment, method-assign]  # keep keys as written
    try:
        parser.read_string(text, source=source)
    except configparser.Error as exc:
        message = str(exc).splitlines()[0]
        raise UsageError(f"not a valid topic config file: {message}", path=source) from None
    for name in parser.sections():
        values = {}
        for key, raw in parser.items(name):
            values[key] = parse_value(key, raw, f"{source} [{name}]")
        sections.append((name, values))
    return TopicOverrides(sections, source)


def load_topic_overrides(path: "str | os.PathLike[str]") -> TopicOverrides:
    path = os.fspath(path)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise FileUnreadableError("no such file", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FileUnreadableError(f"cannot be read: {exc}", path=path) from None
    return parse_topic_overrides(text, path)


class TopicConfig:
    """The resolved configuration of one topic, by Kafka's topic-level names."""

    __slots__ = ("topic", "_values", "_sources", "kafka_defaults")

    def __init__(self, topic: str, values: Dict[str, Any], sources: Dict[str, str],
                 kafka_defaults: bool = False) -> None:
        self.topic = topic
        self._values = values
        self._sources = sources
        #: Whether Kafka's built-in defaults may delete data (--kafka-defaults).
        self.kafka_defaults = kafka_defaults

    def get(self, key: str) -> Any:
        if key not in TOPIC_CONFIGS:
            raise KeyError(key)
        return self._values.get(key, TOPIC_CONFIGS[key][1])

    def source(self, key: str) -> str:
        """Where the value of `key` came from (a flag, a file and section, or Kafka's default)."""
        return self._sources.get(key, DEFAULT_SOURCE)

    def enforced(self, key: str) -> bool:
        """Whether `key`'s value may delete data: a deleting setting (retention.ms, retention.bytes) whose
        only source is Kafka's built-in default deletes nothing unless --kafka-defaults was given."""
        return key not in DELETING_SETTINGS or key in self._sources or self.kafka_defaults

    def describe_source(self, key: str) -> str:
        """:meth:`source`, saying whether a default deleting setting is applied (for the dry run's settings)."""
        if key in DELETING_SETTINGS and key not in self._sources and self.get(key) >= 0:  # -1: no limit anyway
            applied = "applied: --kafka-defaults" if self.kafka_defaults else "not applied without --kafka-defaults"
            return f"{DEFAULT_SOURCE}, {applied}"
        return self.source(key)

    @property
    def retention_ms(self) -> int:
        return self.get("retention.ms")

    @property
    def retention_bytes(self) -> int:
        return self.get("retention.bytes")

    @property
    def cleanup_policy(self) -> Tuple[str, ...]:
        return self.get("cleanup.policy")

    @property
    def delete(self) -> bool:
        """LogConfig.delete: the policy includes delete (time and size retention apply)."""
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def remote_storage_enable(self) -> bool:
        return bool(self.get("remote.storage.enable"))

    def to_dict(self, keys: Optional[List[str]] = None) -> Dict[str, Any]:
        keys = keys if keys is not None else sorted(TOPIC_CONFIGS)
        out: Dict[str, Any] = {}
        for key in keys:
            value = self.get(key)
            out[key] = ",".join(value) if isinstance(value, tuple) else value
        return out

    def __repr__(self) -> str:
        return (f"TopicConfig({self.topic!r}, retention.ms={self.retention_ms}, "
                f"retention.bytes={self.retention_bytes}, cleanup.policy={','.join(self.cleanup_policy)})")


class ClusterLayer(Protocol):
    """What the resolver reads of a cluster's metadata log: :class:`kstore_cli.cluster.configs.ClusterConfigs`
    (the cluster layer sits above the log; it loads them)."""

    metadata_dir: str
    topic_ids: Dict[str, str]
    warnings: List[str]

    def topic(self, topic: str) -> Dict[str, Tuple[Any, str]]: ...

    def broker(self, node_id: Optional[str]) -> Tuple[Dict[str, str], Dict[str, str]]: ...


#: data dir -> (its cluster metadata, its node id)
ClusterMapping = Mapping[str, Tuple[ClusterLayer, Optional[str]]]


class ConfigResolver:
    """Resolves a topic's configuration from flags, overrides, the cluster metadata, internal-topic
    settings, broker settings and defaults (see the module docstring for the order)."""

    def __init__(self, *, broker: Optional[Mapping[str, Tuple[Any, str]]] = None,
                 overrides: Optional[TopicOverrides] = None,
                 flags: Optional[Mapping[str, Tuple[Any, str]]] = None,
                 static_props: Optional[Mapping[str, str]] = None, static_source: str = "server.properties",
                 cluster: Optional[ClusterMapping] = None,
                 kafka_defaults: bool = False) -> None:
        self.broker = dict(broker or {})
        self.overrides = overrides
        self.flags = dict(flags or {})
        self.static_props = dict(static_props or {})
        self.static_source = static_source
        #: data dir -> (its cluster metadata, its node id): what that broker's log manager sees.
        self.cluster = dict(cluster or {})
        #: Kafka's built-in defaults may delete data (--kafka-defaults): see TopicConfig.enforced.
        self.kafka_defaults = kafka_defaults

    @classmethod
    def from_files(cls, config: Optional[str] = None, topic_config: Optional[str] = None,
                   flags: Optional[Mapping[str, Tuple[Any, str]]] = None, *, kafka_defaults: bool = False,
                   cluster: Optional[Callable[[Mapping[str, str]], ClusterMapping]] = None) -> "ConfigResolver":
        """The resolver for these files and flags; `cluster`, given the --config file's properties, loads the
        cluster layer (:func:`kstore_cli.cluster.configs.resolver_from_files`)."""
        props = read_properties(config) if config else {}
        loaded = cluster(props) if cluster is not None else {}
        return cls(broker=broker_settings(props, config) if config else None,
                   overrides=load_topic_overrides(topic_config) if topic_config else None,
                   flags=flags, static_props=props, static_source=config or "server.properties", cluster=loaded,
                   kafka_defaults=kafka_defaults)

    @property
    def warnings(self) -> List[str]:
        """What the cluster metadata logs' loads got past (each log once)."""
        seen = {id(c): c for c, _node in self.cluster.values()}
        return [w for c in seen.values() for w in c.warnings]

    @property
    def metadata_dirs(self) -> List[str]:
        """The cluster metadata logs the resolver reads, for the command's report."""
        return sorted({c.metadata_dir for c, _node in self.cluster.values()})

    def _broker_layer(self, data_dir: Optional[str]) -> Mapping[str, Tuple[Any, str]]:
        found = self.cluster.get(os.path.abspath(data_dir)) if data_dir is not None else None
        if found is None:
            return self.broker
        cluster, node_id = found
        dynamic, sources = cluster.broker(node_id)
        if not dynamic:
            return self.broker
        merged = dict(self.static_props)
        merged.update(dynamic)
        return broker_settings(merged, self.static_source, sources)

    def for_topic(self, topic: str, data_dir: Optional[str] = None, *, cluster_topic: bool = True) -> TopicConfig:
        """The topic's config as the broker owning `data_dir` has it (its node's cluster metadata); without
        `cluster_topic`, the topic's own overrides in the metadata log are left out (its dynamic broker configs,
        the node's, stay)."""
        found = self.cluster.get(os.path.abspath(data_dir)) if data_dir is not None else None
        layers: List[Callable[[], Mapping[str, Tuple[Any, str]]]] = [
            lambda: self.flags,
            lambda: self.overrides.lookup(topic) if self.overrides else {},
            lambda: found[0].topic(topic) if found is not None and cluster_topic else {},
            lambda: {k: (v, "Kafka's internal topic setting") for k, v in INTERNAL_TOPIC_OVERRIDES.get(topic, {}).items()},
            lambda: self._broker_layer(data_dir),
        ]
        values: Dict[str, Any] = {}
        sources: Dict[str, str] = {}
        for layer in layers:
            for key, (value, where) in layer().items():
                if key not in values:
                    values[key] = value
                    sources[key] = where
        return TopicConfig(topic, values, sources, self.kafka_defaults)

    def incarnation_problem(self, partition: "Partition", data_dir: Optional[str]) -> Optional[str]:
        """Why the cluster metadata's configs cannot be applied to this partition directory, or None.

        They apply only to the incarnation of the topic the metadata image has: a directory whose
        partition.metadata topic ID is another (a deleted and recreated topic's old log), or that has no
        topic ID, is a stray replica for a KRaft broker (LogManager.isStrayKraftReplica), which never
        serves it; the new topic's configs must not delete or compact it. None as well where no metadata
        log is read, and for directories that are no live replica (the commands skip those themselves)."""
        found = self.cluster.get(os.path.abspath(data_dir)) if data_dir is not None else None
        if found is None or not _is_live_replica(partition):
            return None
        cluster = found[0]
        current = cluster.topic_ids.get(partition.topic)
        image = (f"the cluster metadata ({cluster.metadata_dir}) has topic ID {current} for {partition.topic}"
                 if current else f"the cluster metadata ({cluster.metadata_dir}) has no topic {partition.topic} "
                 "(deleted?)")
        stray = ("a stray replica for a KRaft broker (LogManager.isStrayKraftReplica), so the topic's configs "
                 "from the metadata log do not apply to it (move it out of the data dir, or give "
                 "--no-cluster-metadata to use only flags and files)")
        path = os.path.join(partition.path, PARTITION_METADATA)
        if not os.path.lexists(path):
            return f"no partition.metadata (no topic ID) and {image}: {stray}"
        try:
            topic_id = str(read_partition_metadata(path)["topicId"])
        except KstoreError as exc:
            return f"partition.metadata cannot be read ({exc.message}) and {image}: {stray}"
        if topic_id == current:
            return None
        return (f"partition.metadata has topic ID {topic_id} and {image}: an old incarnation of a deleted "
                f"{'and recreated ' if current else ''}topic, {stray}")

    def for_partition(self, partition: "Partition", data_dir: Optional[str], *, other_incarnation: bool = False
                      ) -> Tuple[Optional[TopicConfig], Optional[str]]:
        """(config, None) for a partition directory, or (None, why no config applies): another incarnation
        of its topic (:meth:`incarnation_problem`), or a value from the metadata log that Kafka's ConfigDef
        rejects (LogConfig would not be created, so the broker would not load the log either).

        With `other_incarnation` (a command whose configs delete nothing), another incarnation gets
        (config without the topic's overrides from the metadata log, why they were left out) instead."""
        problem = self.incarnation_problem(partition, data_dir)
        if problem is not None and not other_incarnation:
            return None, problem
        try:
            return self.for_topic(partition.topic, data_dir, cluster_topic=problem is None), problem
        except InvalidConfigError as exc:
            return None, f"{exc.message}; Kafka refuses this config, so kstore leaves the partition alone"


def _is_live_replica(partition: "Partition") -> bool:
    """A ``<topic>-<partition>`` directory a broker serves (not the metadata log, nor -delete/-future/-stray)."""
    return (partition.partition >= 0 and partition.topic != METADATA_LOG_TOPIC
            and not partition.name.endswith(REPLICA_DIR_SUFFIXES))


def retention_flags(*, ms: Optional[int] = None, minutes: Optional[int] = None, hours: Optional[int] = None,
                    retention_bytes: Optional[int] = None) -> Dict[str, Tuple[Any, str]]:
    """Flag values as topic-level keys; at most one of ms/minutes/hours may be given."""
    given = [(name, v) for name, v in (("ms", ms), ("minutes", minutes), ("hours", hours)) if v is not None]
    if len(given) > 1:
        raise UsageError("give only one of --retention-ms, --retention-minutes and --retention-hours")
    out: Dict[str, Tuple[Any, str]] = {}
    if given:
        name, value = given[0]
        multiplier = {"ms": 1, "minutes": MS_PER_MINUTE, "hours": MS_PER_HOUR}[name]
        if value < -1:
            raise UsageError(f"--retention-{name} must be -1 (unlimited) or more, not {value}")
        flag = f"--retention-{name}"
        out["retention.ms"] = (-1 if value < 0 else parse_value("retention.ms", value * multiplier, flag), flag)
    if retention_bytes is not None:
        out["retention.bytes"] = (parse_value("retention.bytes", retention_bytes, "--retention-bytes"),
                                  "--retention-bytes")
    return out


def compaction_flags(*, delete_retention_ms: Optional[int] = None, min_compaction_lag_ms: Optional[int] = None,
                     max_compaction_lag_ms: Optional[int] = None, min_cleanable_dirty_ratio: Optional[float] = None,
                     segment_bytes: Optional[int] = None, max_index_bytes: Optional[int] = None
                     ) -> Dict[str, Tuple[Any, str]]:
    """``kstore compact`` flags as topic-level keys (for :class:`ConfigResolver`)."""
    given = [
        ("delete.retention.ms", delete_retention_ms, "--delete-retention-ms"),
        ("min.compaction.lag.ms", min_compaction_lag_ms, "--min-compaction-lag-ms"),
        ("max.compaction.lag.ms", max_compaction_lag_ms, "--max-compaction-lag-ms"),
        ("min.cleanable.dirty.ratio", min_cleanable_dirty_ratio, "--min-cleanable-dirty-ratio"),
        ("segment.bytes", segment_bytes, "--segment-bytes"),
        ("segment.index.bytes", max_index_bytes, "--max-index-bytes"),
    ]
    out: Dict[str, Tuple[Any, str]] = {}
    for key, value, flag in given:
        if value is not None:  # Kafka's ConfigDef rules; an invalid flag is a usage error (exit 2)
            out[key] = (parse_value(key, value, flag), flag)
    return out


#: Broker-level settings kstore's compaction reads from a server.properties: kind, Kafka's default and validator,
#: as their ConfigDefs define them (CleanerConfig.CONFIG_DEF, ServerConfigs' message.max.bytes,
#: TransactionLogConfig's producer.id.expiration.ms).
CLEANER_CONFIGS: Dict[str, Tuple[str, Any, Optional[Validator]]] = {
    "log.cleaner.threads": (INT, 1, _at_least(0)),
    "log.cleaner.dedupe.buffer.size": (LONG, 128 * 1024 * 1024, None),
    "log.cleaner.io.buffer.load.factor": (DOUBLE, 0.9, None),
    "log.cleaner.io.buffer.size": (INT, 512 * 1024, _at_least(0)),
    "message.max.bytes": (INT, 1048588, _at_least(0)),
    "producer.id.expiration.ms": (INT, 86400000, _at_least(1)),
}
CLEANER_DEFAULTS: Dict[str, Any] = {key: default for key, (_kind, default, _check) in CLEANER_CONFIGS.items()}


class CleanerSettings:
    """The broker side of a cleaner pass: how big its buffers are (LogCleaner / Cleaner arguments).

    ``dedupe_buffer_bytes`` is per cleaner thread (``log.cleaner.dedupe.buffer.size / threads``);
    the read chunk is ``log.cleaner.io.buffer.size / threads / 2`` (256 KiB by default), doubled
    when one batch does not fit, up to ``max(max.message.bytes, message.max.bytes)``.
    """

    __slots__ = ("dedupe_buffer_bytes", "load_factor", "io_buffer_bytes", "max_io_buffer_bytes",
                 "producer_id_expiration_ms", "sources")

    def __init__(self, *, dedupe_buffer_bytes: int = CLEANER_DEFAULTS["log.cleaner.dedupe.buffer.size"],
                 load_factor: float = CLEANER_DEFAULTS["log.cleaner.io.buffer.load.factor"],
                 io_buffer_bytes: int = CLEANER_DEFAULTS["log.cleaner.io.buffer.size"] // 2,
                 max_io_buffer_bytes: int = CLEANER_DEFAULTS["message.max.bytes"],
                 producer_id_expiration_ms: int = CLEANER_DEFAULTS["producer.id.expiration.ms"],
                 sources: Optional[Dict[str, str]] = None) -> None:
        if dedupe_buffer_bytes < 1 or io_buffer_bytes < 1 or max_io_buffer_bytes < 1:
            raise UsageError("cleaner buffer sizes must be positive")
        if not 0.0 < load_factor <= 1.0:
            raise UsageError(f"log.cleaner.io.buffer.load.factor must be in (0, 1], not {load_factor}")
        self.dedupe_buffer_bytes = dedupe_buffer_bytes
        self.load_factor = load_factor
        self.io_buffer_bytes = io_buffer_bytes
        self.max_io_buffer_bytes = max_io_buffer_bytes
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.sources = dict(sources or {})

    @classmethod
    def from_properties(cls, props: Optional[Mapping[str, str]] = None, *, dedupe_buffer_bytes: Optional[int] = None,
                        source: str = "server.properties") -> "CleanerSettings":
        """Settings from broker properties (Kafka's defaults for what is missing); a flag wins. Each value is
        read as KafkaConfig's ConfigDef reads it: one Kafka rejects raises :class:`InvalidConfigError` with
        ConfigException's message (exit 2). log.cleaner.threads=0 (no cleaner thread in the broker) sizes the
        buffers as for one thread: ``kstore compact`` is asked to clean."""
        props = props or {}
        sources: Dict[str, str] = {}

        def get(key: str) -> Any:
            raw = props.get(key)
            if raw is None or not str(raw).strip():
                return CLEANER_DEFAULTS[key]
            kind, _default, validator = CLEANER_CONFIGS[key]
            where = f"{source}: {key}"
            value = _parse_def(key, kind, validator, str(raw), where)
            sources[key] = where
            return value

        threads = max(1, get("log.cleaner.threads"))
        dedupe = get("log.cleaner.dedupe.buffer.size") // threads
        if dedupe > INT_MAX:  # LogCleaner.CleanerThread: min(dedupeBufferSize / numThreads, Int.MaxValue), warned
            dedupe = INT_MAX
            sources["log.cleaner.dedupe.buffer.size"] += f", capped at {INT_MAX} per cleaner thread as LogCleaner caps it"
        if dedupe_buffer_bytes is not None:
            dedupe = dedupe_buffer_bytes
            sources["log.cleaner.dedupe.buffer.size"] = "--dedupe-buffer-bytes"
        return cls(dedupe_buffer_bytes=dedupe,
                   load_factor=get("log.cleaner.io.buffer.load.factor"),
                   io_buffer_bytes=max(1, get("log.cleaner.io.buffer.size") // threads // 2),
                   max_io_buffer_bytes=get("message.max.bytes"),
                   producer_id_expiration_ms=get("producer.id.expiration.ms"),
                   sources=sources)

    @classmethod
    def from_files(cls, config: Optional[str] = None, *, dedupe_buffer_bytes: Optional[int] = None) -> "CleanerSettings":
        props = read_properties(config) if config else {}
        return cls.from_properties(props, dedupe_buffer_bytes=dedupe_buffer_bytes,
                                   source=config if config else "server.properties")

    def to_dict(self) -> Dict[str, Any]:
        return {"dedupeBufferBytes": self.dedupe_buffer_bytes, "loadFactor": self.load_factor,
                "ioBufferBytes": self.io_buffer_bytes, "maxIoBufferBytes": self.max_io_buffer_bytes}
