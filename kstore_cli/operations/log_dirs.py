"""What ``kafka-log-dirs.sh --describe`` reports for the given data dirs, offline: Kafka's DescribeLogDirs.

Per broker (``meta.properties``' node id) and per data dir, as ``ReplicaManager.describeLogDirs`` builds it:

* the logs are ``LogManager.allLogs``: the current logs and the ``-future`` ones (a replica being moved
  between dirs of one broker), never ``-delete``/``-stray`` dirs nor ``__cluster_metadata-0`` (``LogManager.loadLogs``
  leaves the metadata topic to the raft layer);
* ``size`` is ``UnifiedLog.size``: the sum of the segments' ``.log`` sizes (as right after a clean start: a tail an
  unclean start's recovery would cut is counted);
* ``offsetLag`` is ``ReplicaManager.getLogEndOffsetLag``: for a current log ``max(high watermark - log end offset,
  0)``, which is 0, as ``UnifiedLog.updateHighWatermark`` clamps the checkpointed high watermark to the log end
  offset when the log is loaded; for a future log the current log's end offset minus the future log's; -1
  (``DescribeLogDirsResponse.INVALID_OFFSET_LAG``) for a future log whose current log is not on the broker;
* ``totalBytes``/``usableBytes`` (KIP-827) are the volume's ``FileStore.getTotalSpace``/``getUsableSpace``
  (statvfs: blocks and blocks available to an unprivileged user, times the fragment size).

:func:`kafka_json` is ``LogDirsCommand.formatAsJson``'s output: Jackson over Java ``HashMap``s, so the keys and
the lists come in HashMap order, reproduced here (KIP-827's totals are not in the tool's JSON).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from kstore_cli.log import names
from kstore_cli.log.logdir import Partition
from kstore_cli.log.unified_log import DataDirStates, log_offsets
from kstore_cli.operations.startup import Broker, survey
from kstore_cli.parsers.txnlog import topic_partition_hash
from kstore_cli.record.text import java_hashmap_order, java_string_hash

#: DescribeLogDirsResponse.INVALID_OFFSET_LAG: no current log to measure a future log against
INVALID_OFFSET_LAG = -1
#: the broker id printed for data dirs whose meta.properties names no node id
UNKNOWN_BROKER = -1
FUTURE_SUFFIX = "-future"


@dataclass
class ReplicaInfo:
    """One log of a data dir: DescribeLogDirsResponse.ReplicaInfo (size, offsetLag, isFuture)."""

    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool
    path: str

    @property
    def name(self) -> str:
        """TopicPartition.toString."""
        return f"{self.topic}-{self.partition}"


@dataclass
class LogDirDescription:
    """One data dir: its logs, its error (None) and its volume's total and usable bytes."""

    log_dir: str
    replicas: List[ReplicaInfo]
    total_bytes: int
    usable_bytes: int
    error: Optional[str] = None

    @property
    def size(self) -> int:
        return sum(r.size for r in self.replicas)


@dataclass
class BrokerLogDirs:
    broker: int
    log_dirs: List[LogDirDescription]


@dataclass
class LogDirsReport:
    brokers: List[BrokerLogDirs]
    #: facts the reader must know (a broker without a node id)
    warnings: List[str] = field(default_factory=list)


def log_size(partition: Partition) -> int:
    """UnifiedLog.size: the sum of the segments' sizes."""
    return sum(segment.size for segment in partition.segments)


def volume_bytes(path: str) -> Tuple[int, int]:
    """(total, usable) bytes of the volume holding `path`, as Java's FileStore reports them
    (ReplicaManager.adjustForLargeFileSystems: a negative value is Long.MAX_VALUE)."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def is_future(partition: Partition) -> bool:
    return partition.name.endswith(FUTURE_SUFFIX)


def _served(partition: Partition) -> bool:
    """A log LogManager loads into allLogs: a current or future replica, not the metadata log."""
    return partition.partition >= 0 and partition.name != names.METADATA_PARTITION_DIR


def _broker_replicas(broker: Broker, wanted, states: DataDirStates) -> List[LogDirDescription]:
    """The data dirs of one broker, each with its logs of the wanted topics."""
    logs = [(info, p) for info in broker.data_dirs for p in info.partitions if _served(p)]
    futures = {(p.topic, p.partition) for _i, p in logs if is_future(p)}
    current_leo: Dict[Tuple[str, int], int] = {}
    for _info, p in logs:  # ReplicaManager.localLog: the current log, wherever it is on the broker
        if not is_future(p) and (p.topic, p.partition) in futures:
            current_leo[(p.topic, p.partition)] = log_offsets(p, states[p.data_dir]).log_end_offset
    out = []
    for info in broker.data_dirs:
        replicas = []
        for p in info.partitions:
            if not _served(p) or not wanted(p.topic):
                continue
            future = is_future(p)
            if future:
                leo = current_leo.get((p.topic, p.partition))
                lag = INVALID_OFFSET_LAG if leo is None else leo - log_offsets(p, states[p.data_dir]).log_end_offset
            else:
                lag = 0  # max(high watermark - log end offset, 0): the loaded high watermark is <= the log end
            replicas.append(ReplicaInfo(p.topic, p.partition, log_size(p), lag, future, p.path))
        total, usable = volume_bytes(info.path)
        out.append(LogDirDescription(info.path, replicas, total, usable))
    return out


def describe_log_dirs(paths: Iterable[str], topics: Optional[str] = None) -> LogDirsReport:
    """DescribeLogDirs for every broker's data dirs under `paths` (read-only); `topics`: comma-separated globs
    (LogDirsCommand's --topic-list filter: a data dir without matching logs is listed with none)."""
    found = survey(paths, replicas=True, topics=topics)
    states = DataDirStates()
    report = LogDirsReport([])
    unknown: List[LogDirDescription] = []
    for broker in found.brokers:
        dirs = _broker_replicas(broker, found.wanted, states)
        if broker.node_id is None:
            unknown.extend(dirs)
        else:
            report.brokers.append(BrokerLogDirs(broker.node_id, dirs))
    if unknown:
        report.brokers.append(BrokerLogDirs(UNKNOWN_BROKER, unknown))
        report.warnings.append(f"no node id in meta.properties, shown as broker {UNKNOWN_BROKER}: "
                               + ", ".join(d.log_dir for d in unknown))
    report.brokers.sort(key=lambda b: b.broker)
    return report


def _replica_json(r: ReplicaInfo) -> dict:
    # keys in the order Java's HashMap iterates them (LogDirsCommand.fromReplicasInfoToPrintableRepresentation)
    return {"partition": r.name, "size": r.size, "offsetLag": r.offset_lag, "isFuture": r.is_future}


def _log_dir_json(d: LogDirDescription) -> dict:
    replicas = java_hashmap_order(d.replicas, (topic_partition_hash(r.topic, r.partition) for r in d.replicas))
    return {"partitions": [_replica_json(r) for r in replicas], "error": d.error, "logDir": d.log_dir}


def kafka_json(report: LogDirsReport) -> dict:
    """LogDirsCommand.formatAsJson: ``{"brokers":[{"broker":N,"logDirs":[...]}],"version":1}``, keys and lists in
    Java HashMap order (an Integer's hash is itself)."""
    # DescribeLogDirsResult.allDescriptions and KafkaAdminClient.logDirDescriptions size their HashMaps
    brokers = java_hashmap_order(report.brokers, (b.broker for b in report.brokers), len(report.brokers))
    return {"brokers": [{"broker": b.broker, "logDirs": [
        _log_dir_json(d) for d in java_hashmap_order(b.log_dirs, (java_string_hash(d.log_dir) for d in b.log_dirs),
                                                     len(b.log_dirs))
    ]} for b in brokers], "version": 1}


@dataclass
class TopicTotals:
    """One topic's logs across the data dirs: partitions, current and future logs, bytes, the largest lag."""

    topic: str
    partitions: int
    replicas: int
    future: int
    size: int
    offset_lag: int


def topic_totals(report: LogDirsReport) -> List[TopicTotals]:
    """Per topic, in name order."""
    by_topic: Dict[str, List[ReplicaInfo]] = {}
    for b in report.brokers:
        for d in b.log_dirs:
            for r in d.replicas:
                by_topic.setdefault(r.topic, []).append(r)
    return [TopicTotals(topic, len({r.partition for r in rs}), sum(not r.is_future for r in rs),
                        sum(r.is_future for r in rs), sum(r.size for r in rs), max(r.offset_lag for r in rs))
            for topic, rs in sorted(by_topic.items())]
