"""Reader options of the ``kstore`` Spark data source, parsed once and validated.

Names and meanings follow Spark's Kafka source where it has the option
(``startingOffsets``, ``endingOffsets``, ``startingTimestamp``, ``endingTimestamp``,
``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``,
``startingOffsetsByTimestampStrategy``, ``includeHeaders``, ``subscribe``,
``subscribePattern``, ``minPartitions``, ``kafka.isolation.level``); the others are
kstore's own (``path``/``paths``, ``topics`` as a glob, ``includeMetadata``,
``maxBytesPerPartition``, ``filterPushdown``, ``traceDir``, ``onCorruption``, ``skippedAccumulator``).

Internal topics (names starting with ``__``: ``__consumer_offsets``, ``__transaction_state``,
``__cluster_metadata``...) found in a data directory are read only when named: by ``subscribe``,
by a ``topics`` glob or ``subscribePattern`` that starts with ``__``, or by a PATH that is their
partition directory or segment (as Kafka's consumers leave them out of pattern subscriptions,
``exclude.internal.topics``).

Pure Python: no pyspark import, so the launcher validates options before it starts Spark.
"""

from __future__ import annotations

import json
import re
from typing import Dict, List, Mapping, Optional, Tuple

from kstore_cli.errors import UsageError
from kstore_cli.log import names

EARLIEST = -2
LATEST = -1

#: (topic, partition) -> offset or timestamp; -2/-1 keep Spark's earliest/latest meaning.
PerPartition = Dict[Tuple[str, int], int]

#: Half of Spark's file-source default (maxPartitionBytes): Spark's writer sorts each task's rows by the
#: partition columns, and two 128 MiB tasks on local[2] ran no faster than on local[1] (2.61 vs 2.66 s
#: for 2 M rows; 64 MiB tasks: 2.11 vs 2.81 s).
DEFAULT_MAX_BYTES_PER_PARTITION = 64 * 1024 * 1024
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
#: What a damaged or truncated batch does: fail the read (one error naming file and byte), or be
#: left out and listed (:class:`~kstore_cli.spark.read.SkippedBatch`).
ON_CORRUPTION = ("fail", "skip")
INTERNAL_PREFIX = "__"
#: Data source options ``storage.<key>``: a remote PATH's filesystem settings (``storage.endpoint_override``).
STORAGE_PREFIX = "storage."


def is_internal(topic: str) -> bool:
    """Whether a topic is internal (read only when named)."""
    return topic.startswith(INTERNAL_PREFIX)


def _store_topic(schemas_from: Optional[str]) -> List[str]:
    """The topic of a ``schemasFrom`` partition directory, if it names one."""
    parsed = names.parse_partition_dir(str(schemas_from).rstrip("/")) if schemas_from else None
    return [parsed[0]] if parsed else []


def _bool(value: Optional[str], name: str, default: bool = False) -> bool:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise UsageError(f"option {name} must be true or false, not {value!r}")


def _int(value: Optional[str], name: str, minimum: Optional[int] = None) -> Optional[int]:
    if value is None or str(value).strip() == "":
        return None
    try:
        out = int(str(value).strip())
    except ValueError:
        raise UsageError(f"option {name} must be an integer, not {value!r}") from None
    if minimum is not None and out < minimum:
        raise UsageError(f"option {name} must be >= {minimum}, not {out}")
    return out


def parse_partition_json(text: str, name: str) -> PerPartition:
    """Spark's per-partition JSON: ``{"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}``."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"option {name}: not JSON ({exc}); expected e.g. {{\"topicA\":{{\"0\":23,\"1\":-2}}}}") from None
    if not isinstance(obj, dict):
        raise UsageError(f"option {name}: expected a JSON object of topics, got {text!r}")
    out: PerPartition = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise UsageError(f"option {name}: topic {topic!r} must map partition numbers to numbers")
        for part, value in parts.items():
            try:
                p = int(part)
            except ValueError:
                raise UsageError(f"option {name}: {part!r} of topic {topic!r} is not a partition number") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"option {name}: {topic}-{p} must be an integer, not {value!r}")
            out[(topic, p)] = value
    return out


def by_topic(offsets: Mapping[Tuple[str, int], int]) -> Dict[str, Dict[str, int]]:
    """{(topic, partition): offset} nested as Spark's per-partition JSON has it: topic -> "partition" -> offset."""
    out: Dict[str, Dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def partition_json(offsets: Mapping[Tuple[str, int], int]) -> str:
    """Spark's per-partition JSON of `offsets` (what :func:`parse_partition_json` reads), keys sorted."""
    return json.dumps(by_topic(offsets), sort_keys=True)


class OffsetSpec:
    """One side (starting or ending) of the offset range, before it meets the log.

    ``kind`` is ``"earliest"``, ``"latest"``, ``"offsets"`` (per partition),
    ``"timestamp"`` (one timestamp for every partition) or ``"timestamps"`` (per partition).
    """

    __slots__ = ("kind", "per_partition", "timestamp", "option")

    def __init__(self, kind: str, per_partition: Optional[PerPartition] = None, timestamp: Optional[int] = None,
                 option: str = "") -> None:
        self.kind = kind
        self.per_partition = per_partition or {}
        self.timestamp = timestamp
        self.option = option

    @property
    def is_specific(self) -> bool:
        return self.kind in ("offsets", "timestamps")

    def __repr__(self) -> str:
        return f"OffsetSpec({self.kind}, {self.per_partition or self.timestamp})"


def _offset_spec(opts: Mapping[str, str], side: str) -> OffsetSpec:
    """Spark's precedence: <side>Timestamp > <side>OffsetsByTimestamp > <side>Offsets."""
    ts = opts.get(f"{side}timestamp")
    if ts is not None and str(ts).strip() != "":
        value = _int(ts, f"{side}Timestamp", minimum=0)
        return OffsetSpec("timestamp", timestamp=value, option=f"{side}Timestamp")
    by_ts = opts.get(f"{side}offsetsbytimestamp")
    if by_ts is not None and str(by_ts).strip() != "":
        per = parse_partition_json(by_ts, f"{side}OffsetsByTimestamp")
        for tp, value in per.items():
            if value < 0:
                raise UsageError(f"option {side}OffsetsByTimestamp: {tp[0]}-{tp[1]} has a negative timestamp {value}")
        return OffsetSpec("timestamps", per, option=f"{side}OffsetsByTimestamp")
    name = f"{side}Offsets"
    raw = opts.get(f"{side}offsets")
    default = "earliest" if side == "starting" else "latest"
    text = default if raw is None or str(raw).strip() == "" else str(raw).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if side == "starting" and kind == "latest":
            raise UsageError("starting offset can't be latest for batch queries on Kafka")
        if side == "ending" and kind == "earliest":
            raise UsageError("ending offset can't be earliest for batch queries on Kafka")
        return OffsetSpec(kind, option=name)
    per = parse_partition_json(text, name)
    for (topic, p), value in per.items():
        if value < EARLIEST:
            raise UsageError(f"option {name}: {topic}-{p} has offset {value}; use -2 for earliest, -1 for latest")
        if side == "starting" and value == LATEST:
            raise UsageError(f"starting offset for {topic}-{p} can't be latest for batch queries on Kafka")
        if side == "ending" and value == EARLIEST:
            raise UsageError(f"ending offset for {topic}-{p} can't be earliest for batch queries on Kafka")
    return OffsetSpec("offsets", per, option=name)


def _paths(opts: Mapping[str, str]) -> List[str]:
    out: List[str] = []
    raw = opts.get("paths")
    if raw:
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise UsageError(f"option paths must be a JSON array of strings, not {raw!r}")
        out.extend(value)
    if opts.get("path"):
        out.append(opts["path"])
    if not out:
        raise UsageError("no PATH: use .load(path) or .option('paths', json.dumps([...]))")
    return out


class ReadOptions:
    """Everything the planner and the readers need, parsed from the data source's options."""

    __slots__ = (
        "paths",
        "store_topics",
        "topics_glob",
        "subscribe",
        "subscribe_pattern",
        "starting",
        "ending",
        "fail_on_no_timestamp_match",
        "read_committed",
        "include_headers",
        "include_metadata",
        "min_partitions",
        "max_bytes_per_partition",
        "trace_dir",
        "filter_pushdown",
        "on_corruption",
        "skipped_accumulator",
        "storage",
    )

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {str(k).lower(): v for k, v in options.items() if v is not None}
        self.paths = _paths(opts)
        self.topics_glob: Optional[str] = opts.get("topics") or None
        #: With a decoded key or value format, the Schema Registry's store topic is left out as the internal
        #: topics are, unless named: its values are the registry's JSON, not Confluent's wire format.
        self.store_topics: frozenset = frozenset()
        if {opts.get("keyformat", "binary"), opts.get("valueformat", "binary")} != {"binary"}:
            from kstore_cli.cluster.schema_registry import DEFAULT_TOPIC

            self.store_topics = frozenset({DEFAULT_TOPIC, *_store_topic(opts.get("schemasfrom"))})
        sub = opts.get("subscribe")
        self.subscribe = [t.strip() for t in sub.split(",") if t.strip()] if sub else None
        pattern = opts.get("subscribepattern")
        try:
            self.subscribe_pattern = re.compile(pattern) if pattern else None
        except re.error as exc:
            raise UsageError(f"option subscribePattern is not a regular expression: {exc}") from None
        self.starting = _offset_spec(opts, "starting")
        self.ending = _offset_spec(opts, "ending")
        strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).lower()
        if strategy not in ("error", "latest"):
            raise UsageError(f"option startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}")
        self.fail_on_no_timestamp_match = strategy == "error"
        level = str(opts.get("kafka.isolation.level", opts.get("isolationlevel", "read_uncommitted"))).lower()
        if level not in ISOLATION_LEVELS:
            raise UsageError(f"isolation level must be read_uncommitted or read_committed, not {level!r}")
        self.read_committed = level == "read_committed"
        self.include_headers = _bool(opts.get("includeheaders"), "includeHeaders")
        self.include_metadata = _bool(opts.get("includemetadata"), "includeMetadata")
        self.min_partitions = _int(opts.get("minpartitions"), "minPartitions", minimum=1)
        max_bytes = _int(opts.get("maxbytesperpartition"), "maxBytesPerPartition", minimum=1)
        self.max_bytes_per_partition = DEFAULT_MAX_BYTES_PER_PARTITION if max_bytes is None else max_bytes
        self.trace_dir: Optional[str] = opts.get("tracedir") or None
        self.filter_pushdown = _bool(opts.get("filterpushdown"), "filterPushdown")
        on_corruption = str(opts.get("oncorruption", "fail")).strip().lower()
        if on_corruption not in ON_CORRUPTION:
            raise UsageError(f"option onCorruption must be fail or skip, not {opts.get('oncorruption')!r}")
        self.on_corruption = on_corruption
        #: With onCorruption=skip: the id of the accumulator the readers add skipped batches to
        #: (kstore_cli.spark.source.skipped_accumulator); without it, one stderr line each.
        self.skipped_accumulator = _int(opts.get("skippedaccumulator"), "skippedAccumulator", minimum=0)
        #: ``storage.<key>`` options: the filesystem settings of remote PATHs (kstore_cli.record.storage).
        self.storage: Dict[str, str] = {k[len(STORAGE_PREFIX):]: str(v) for k, v in options.items()
                                        if str(k).lower().startswith(STORAGE_PREFIX)}

    def topic_selected(self, topic: str, named: bool = False) -> bool:
        """Whether a topic passes ``topics`` (glob), ``subscribe`` and ``subscribePattern``.

        An internal topic also needs naming: `named` (its PATH named it), ``subscribe``, or a glob
        or pattern that starts with ``__`` (``*`` alone does not select ``__consumer_offsets``)."""
        import fnmatch

        internal = self.left_out_unless_named(topic) and not named
        # what names an internal topic: a glob or pattern starting as it does (``__``; ``_`` for the store)
        prefix = INTERNAL_PREFIX if is_internal(topic) else "_"
        if self.topics_glob is not None:
            globs = [g.strip() for g in self.topics_glob.split(",") if g.strip()]
            matching = [g for g in globs if fnmatch.fnmatchcase(topic, g)]
            if not matching:
                return False
            if internal and any(g.startswith(prefix) for g in matching):
                internal = False
        if self.subscribe is not None:
            if topic not in self.subscribe:
                return False
            internal = False
        if self.subscribe_pattern is not None:
            if not self.subscribe_pattern.fullmatch(topic):
                return False
            if self.subscribe_pattern.pattern.lstrip("^").startswith(prefix):
                internal = False
        return not internal

    def left_out_unless_named(self, topic: str) -> bool:
        """Whether a topic is read only when named: an internal topic, or with a decoded format the schema
        store's (:attr:`store_topics`)."""
        return is_internal(topic) or topic in self.store_topics

