"""What a broker checks, or trips over, when it starts on a set of data directories.

Discovery (:func:`survey`): every data directory under the PATHs given (a data dir, a folder of
several brokers' data dirs, or partition dirs), grouped into brokers by ``meta.properties``.
Checks, each finding naming the file, the byte or offset, what Kafka does with it at startup and
the kstore command that repairs it:

* ``meta.properties`` (KafkaRaftServer.initializeLogDirs, MetaPropertiesEnsemble.verify): present,
  node id and cluster id set, the same cluster id across one broker's dirs, no directory id twice;
* ``.lock`` held by a live process (LogManager.lockLogDirs);
* the data dir's offset checkpoints (LogManager.loadLogs, ReplicaManager's high-watermark file,
  LogCleanerManager) and each partition's ``leader-epoch-checkpoint``: format (CheckpointFile) and
  whether their offsets lie inside the log;
* directories a broker cannot parse as a partition (UnifiedLog.parseTopicPartitionName: the whole
  broker stops), ``-delete``/``-future``/``-stray`` replicas, the same partition in two dirs of one
  broker (LogManager.loadLog: "Duplicate log directories");
* ``partition.metadata`` present, parseable, and the same topic ID in every copy of a topic, or the ID
  the KRaft metadata log (``__cluster_metadata-0``, when it is among the dirs) has for the topic;
* partitions without ``.log`` files, leftover ``.swap``/``.cleaned``/``.deleted`` files (LogLoader),
  producer snapshots (ProducerStateManager).

Segment integrity and index health are :func:`kstore_cli.operations.verify.verify_partition`'s:
:func:`~kstore_cli.operations.partition_findings.partition_issues` (the partition checks, and what Kafka
does with verify's findings) takes its plan for the log end offset. Nothing here writes.
"""

from __future__ import annotations

import os
import re
import struct
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

from kstore_cli.errors import FileUnreadableError, KstoreError, UsageError
from kstore_cli.log import names
from kstore_cli.log.checkpoint import (
    CLEAN_SHUTDOWN,
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    read_partition_metadata,
    read_properties,
)
from kstore_cli.log.kafka_version import KafkaVersion
from kstore_cli.log.locks import is_locked
from kstore_cli.log.logdir import (
    Partition,
    find_data_dirs,
    holds_data_dir_files,
    is_partition_dir,
    lock_path,
    topic_matcher,
)
from kstore_cli.operations.broker_version import LAST_ZOOKEEPER, UNKNOWN, ZOOKEEPER, BrokerJudgement, judge_data_dir

if TYPE_CHECKING:  # only the annotations need it here
    from kstore_cli.cluster.metadata_image import MetadataImage
    from kstore_cli.cluster.metadata_loader import LoadResult

#: The broker does not start, takes the data dir offline, or data is lost, hidden or damaged.
ERROR = "error"
#: The broker starts, but changes something on the way (rebuilds, deletes, resets, completes a swap).
WARNING = "warning"
#: Nothing happens; worth knowing.
NOTE = "note"

#: Not partitions, and not parsed as such by LogManager.loadLogs (RemoteIndexCache.DIR_NAME).
REMOTE_INDEX_CACHE = "remote-log-index-cache"
_REPLICA_SUFFIXES = ("-delete", "-future", "-stray")
OFFSET_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
                       CLEANER_OFFSET_CHECKPOINT)

# What Kafka does with a malformed checkpoint (file -> Kafka's reaction). Every one of them is read through
# CheckpointFileWithFailureHandler: its IOException reports the dir to the LogDirFailureChannel first, so the
# dir is taken offline even where the caller catches the exception and carries on (ReplicaManager's
# LogDirFailureHandler; handleLogDirFailure halts the broker when it is the metadata log dir).
_OFFLINE = "the data dir is taken offline (the broker halts if it holds the metadata log)"
_MALFORMED_KAFKA = {
    RECOVERY_POINT_CHECKPOINT: "fail: LogManager.loadLogs warns 'Error occurred while reading "
                               "recovery-point-offset-checkpoint' and resets the recovery points to 0, but the read "
                               "already reported a disk error: " + _OFFLINE,
    LOG_START_OFFSET_CHECKPOINT: "fail: LogManager.loadLogs warns 'Error occurred while reading "
                                 "log-start-offset-checkpoint' and starts every partition at its first segment, but "
                                 "the read already reported a disk error: " + _OFFLINE,
    REPLICATION_OFFSET_CHECKPOINT: "fail: KafkaStorageException 'Error while reading checkpoint file' when the first "
                                   "partition of the dir is made leader or follower: " + _OFFLINE,
    CLEANER_OFFSET_CHECKPOINT: "fail: KafkaStorageException 'Error while reading checkpoint file' in the log "
                               "cleaner: " + _OFFLINE,
    LEADER_EPOCH_CHECKPOINT: "fail: KafkaStorageException 'Error while reading checkpoint file' while loading the "
                             "partition: " + _OFFLINE,
}

# The same files when an entry field is not a number: the entry formatters throw NumberFormatException,
# which is not an IOException, so nothing is reported to the LogDirFailureChannel.
_BAD_NUMBER_KAFKA = {
    # LogManager.loadLogs catches any Exception for these two.
    RECOVERY_POINT_CHECKPOINT: "ignore: warns 'Error occurred while reading recovery-point-offset-checkpoint' and "
                               "resets every partition's recovery point to 0 (after an unclean shutdown every "
                               "segment of the dir is recovered)",
    LOG_START_OFFSET_CHECKPOINT: "ignore: warns 'Error occurred while reading log-start-offset-checkpoint' and starts "
                                 "every partition at its first segment's base offset (records removed by "
                                 "DeleteRecords come back)",
    REPLICATION_OFFSET_CHECKPOINT: "fail: NumberFormatException when the partitions of this dir are made leader "
                                   "or follower (Partition.createLog reads the high watermark): they go offline",
    CLEANER_OFFSET_CHECKPOINT: "fail: NumberFormatException escapes LogCleanerManager.allCleanerCheckpoints: the log "
                               "cleaner thread dies and compaction stops for the whole broker",
    LEADER_EPOCH_CHECKPOINT: "fail: NumberFormatException escapes LogManager.loadLogs ('There was an error in one of "
                             "the threads during logs loading'): the broker stops",
}


class Issue:
    """One thing found: where (data dir, partition, file, byte or offset), how bad, what Kafka does, what to run."""

    __slots__ = ("severity", "check", "data_dir", "partition", "file", "position", "offset", "message",
                 "kafka", "repair")

    def __init__(self, severity: str, check: str, message: str, *, kafka: str, repair: str,
                 data_dir: Optional[str] = None, partition: Optional[str] = None, file: Optional[str] = None,
                 position: Optional[int] = None, offset: Optional[int] = None) -> None:
        self.severity = severity
        self.check = check
        self.message = message
        #: What Kafka does with it at startup: starts "fail", "ignore", "truncate", "rebuild", "delete"...
        self.kafka = kafka
        #: The command (or manual step) that repairs it.
        self.repair = repair
        self.data_dir = data_dir
        self.partition = partition
        self.file = file
        self.position = position
        self.offset = offset

    @property
    def where(self) -> str:
        text = self.file or self.partition or self.data_dir or ""
        if self.position is not None:
            text += f" at byte {self.position}"
        elif self.offset is not None:
            text += f" at offset {self.offset}"
        return text

    def to_dict(self) -> dict:
        return {
            "severity": self.severity, "check": self.check, "data_dir": self.data_dir, "partition": self.partition,
            "file": self.file, "position": self.position, "offset": self.offset, "message": self.message,
            "kafka": self.kafka, "repair": self.repair,
        }

    def text_lines(self) -> List[str]:
        """The finding as plain text: what, then what Kafka does and what to run (indented)."""
        return [f"{self.where}: {self.severity}: {self.check}: {self.message}", f"    kafka: {self.kafka}",
                f"    run:   {self.repair}"]

    def __repr__(self) -> str:
        return f"Issue({self.severity}, {self.check}, {self.where}: {self.message})"


class DataDirInfo:
    """One data directory: its meta.properties, which of its partitions were asked for, its checkpoints."""

    def __init__(self, path: str, whole: bool) -> None:
        self.path = path
        #: The data dir itself was named (or found in a named folder): its stray dirs are checked too.
        self.whole = whole
        self.meta: Optional[Dict[str, str]] = None
        self.meta_error: Optional[KstoreError] = None
        self.partitions: List[Partition] = []
        self.partition_paths: set = set()  # theirs, to tell a partition at once
        #: Checkpoint file name -> {(topic, partition): offset}; None when missing or malformed.
        self.checkpoints: Dict[str, Optional[Dict[Tuple[str, int], int]]] = {}
        self.issues: List[Issue] = []
        #: Whose rules judge it (Survey.judged fills it on first use).
        self.judged: Optional[BrokerJudgement] = None

    @property
    def node_id(self) -> Optional[int]:
        """node.id (v1) or broker.id (v0), as MetaProperties reads them."""
        if self.meta is None:
            return None
        key = "node.id" if self.meta.get("version", "0").strip() == "1" else "broker.id"
        try:
            return int(self.meta[key])
        except (KeyError, ValueError):
            return None

    @property
    def cluster_id(self) -> Optional[str]:
        return None if self.meta is None else self.meta.get("cluster.id")

    @property
    def directory_id(self) -> Optional[str]:
        return None if self.meta is None else self.meta.get("directory.id")


class Broker:
    """The data dirs sharing one node id (or one data dir without a readable node id)."""

    def __init__(self, node_id: Optional[int], data_dirs: List[DataDirInfo]) -> None:
        self.node_id = node_id
        self.data_dirs = data_dirs

    @property
    def cluster_ids(self) -> List[str]:
        return sorted({d.cluster_id for d in self.data_dirs if d.cluster_id is not None})

    def to_dict(self) -> dict:
        return {"node_id": self.node_id, "cluster_ids": self.cluster_ids, "data_dirs": [d.path for d in self.data_dirs]}


class Survey:
    """What the PATHs hold: data dirs grouped into brokers, and the partitions to check."""

    def __init__(self) -> None:
        self.data_dirs: Dict[str, DataDirInfo] = {}
        self.brokers: List[Broker] = []
        #: (partition, only): ``only`` is the base offset of a single named segment.
        self.targets: List[Tuple[Partition, Optional[int]]] = []
        #: --topics: which topics' partitions are checked (data-dir checks still read the whole dir).
        self.wanted: Callable[[str], bool] = topic_matcher(None)
        #: --kafka-version: judge every data dir by this release's rules instead of its writer's.
        self.asked: Optional[KafkaVersion] = None
        self._metadata: Dict[str, Optional["LoadResult"]] = {}

    def in_scope(self, issue: "Issue") -> bool:
        """Whether a finding concerns a selected topic, or no one topic (a broker, a data dir, a dir no broker
        can parse: those stop the whole broker, whatever --topics says)."""
        parsed = names.parse_partition_dir(issue.partition) if issue.partition else None
        return parsed is None or self.wanted(parsed[0])

    def data_dir_of(self, partition: Partition) -> DataDirInfo:
        return self.data_dirs[data_dir_key(partition)]

    def metadata_log(self, partition_dir: str) -> Optional["LoadResult"]:
        """The replay of a ``__cluster_metadata-0`` (once per survey); None when it cannot be read at all."""
        if partition_dir not in self._metadata:
            self._metadata[partition_dir] = _load_metadata(partition_dir)
        return self._metadata[partition_dir]

    def judge(self, info: DataDirInfo) -> BrokerJudgement:
        """The broker whose rules judge `info` (broker_version.judge_data_dir), with --kafka-version applied."""
        if info.judged is None:
            info.judged = self._judge_files(info)._replace(asked=self.asked)
        return info.judged

    def _judge_files(self, info: DataDirInfo) -> BrokerJudgement:
        node = info.node_id
        same_node = [d for d in self.data_dirs.values() if node is not None and d.node_id == node] or [info]
        metadata_dirs = [os.path.join(d.path, names.METADATA_PARTITION_DIR) for d in same_node
                         if os.path.isdir(os.path.join(d.path, names.METADATA_PARTITION_DIR))]
        loaded = self.metadata_log(metadata_dirs[0]) if metadata_dirs else None
        level = loaded.image.features.metadata_version_level if loaded is not None else None
        judged = judge_data_dir(info.meta, info.partitions, info.path, metadata_level=level,
                                has_metadata_log=bool(metadata_dirs))
        if judged.mode == UNKNOWN and info.meta is None:
            # A dir without meta.properties among a broker's formatted dirs is judged as they are.
            modes = {self._judge_files(d).mode for d in self.data_dirs.values() if d.meta is not None}
            if len(modes) == 1 and UNKNOWN not in modes:
                mode = modes.pop()
                versions = judged.versions
                if mode == ZOOKEEPER and (versions.high is None or versions.high > LAST_ZOOKEEPER):
                    versions = versions._replace(high=LAST_ZOOKEEPER)
                judged = judged._replace(mode=mode, versions=versions, evidence=judged.evidence + (
                    f"the other data dirs checked are {mode}-mode",))
        return judged


def data_dir_key(partition: Partition) -> str:
    """The real path of the data dir holding `partition` (a symlinked alias names the same dir)."""
    return partition.data_dir


# --------------------------------------------------------------------------- discovery


def survey(paths: Iterable[str], *, replicas: bool = False, topics: Optional[str] = None,
           kafka_version: Optional[KafkaVersion] = None) -> Survey:
    """Find every data dir and partition the PATHs name (.log file, partition dir, data dir, or a
    folder of data dirs up to two levels down) and read each data dir's meta.properties and checkpoints.
    With `replicas`, ``-future`` replica dirs are partitions to check too (LogManager loads them through the
    same LogLoader, and serves them once the move completes); ``-stray`` and ``-delete`` dirs are never served.
    With `topics` (comma-separated globs) only partitions of matching topics are targets. Each data dir is
    judged by the rules of the broker its files show (Survey.judge), or of `kafka_version`."""
    out = Survey()
    out.wanted = topic_matcher(topics)
    out.asked = kafka_version
    seen: set = set()

    def data_dir(path: str, whole: bool) -> DataDirInfo:
        info = out.data_dirs.get(path)
        if info is None:
            info = out.data_dirs[path] = DataDirInfo(path, whole)
        info.whole = info.whole or whole
        return info

    def add_partition(partition: Partition, only: Optional[int]) -> None:
        info = data_dir(data_dir_key(partition), False)
        key = (partition.path, only)
        if key not in seen:
            seen.add(key)
            out.targets.append((partition, only))
            if partition.path not in info.partition_paths:
                info.partition_paths.add(partition.path)
                info.partitions.append(partition)

    for raw in paths:
        path = os.path.abspath(raw)
        if os.path.isfile(path):
            if not path.endswith(names.LOG_SUFFIX):
                raise UsageError("expected a .log file, a partition directory or a data directory", path=raw)
            add_partition(Partition(os.path.dirname(path)), names.base_offset_from_name(path))
        elif os.path.isdir(path):
            if is_partition_dir(path):
                add_partition(Partition(path), None)
                continue
            # A non-empty directory that is none of these is checked as a data dir (its children are
            # what a broker would trip over); an empty one holds nothing to check.
            for found in find_data_dirs(path) or ([path] if os.listdir(path) else []):
                found = os.path.realpath(found)
                for partition in _partitions_of(data_dir(found, True), replicas):
                    add_partition(partition, None)
        else:
            raise FileUnreadableError("no such file or directory", path=raw)
    for info in out.data_dirs.values():
        _read_data_dir_files(info)
    out.brokers = _group_brokers(list(out.data_dirs.values()))
    out.targets = [(p, only) for p, only in out.targets if out.wanted(p.topic)]
    return out


def _partitions_of(info: DataDirInfo, replicas: bool) -> List[Partition]:
    """The partition dirs a broker loads from the data dir; one it cannot list is an issue of the data dir."""
    partitions = []
    children = sorted((e.name, e.is_dir(), e.is_symlink()) for e in os.scandir(info.path))
    for name, is_dir, is_link in children:
        if not is_dir or not _loadable_name(name, replicas):
            continue
        child = os.path.join(info.path, name)
        try:
            partition = Partition(child, data_dir=None if is_link else info.path)  # info.path is a real path
            if not partition.holds_data_dir_files:
                partitions.append(partition)
        except FileUnreadableError as exc:
            # LogLoader lists the dir first: an IOException there takes the data dir offline.
            info.issues.append(Issue(
                ERROR, "partition-unreadable", exc.message, data_dir=info.path, partition=child,
                kafka="fail: IOException while loading the partition: " + _OFFLINE,
                repair="fix the directory's permissions or the disk (owner: the broker's user), then "
                       "rerun doctor"))
    return partitions


def _loadable_name(name: str, replicas: bool = False) -> bool:
    """A data dir's child directory LogManager loads as a partition, by its name; -future ones with `replicas`."""
    if name == REMOTE_INDEX_CACHE or name.endswith(("-delete", "-stray")):
        return False
    if name.endswith(_REPLICA_SUFFIXES) and (not replicas or _unparseable(name) is not None):
        return False
    return names.parse_partition_dir(name) is not None


def _read_data_dir_files(info: DataDirInfo) -> None:
    meta = os.path.join(info.path, META_PROPERTIES)
    if os.path.exists(meta):
        try:
            info.meta = read_properties(meta)
        except KstoreError as exc:
            info.meta_error = exc
    for name in OFFSET_CHECKPOINTS:
        path = os.path.join(info.path, name)
        if not os.path.exists(path):
            info.checkpoints[name] = None
            continue
        try:
            info.checkpoints[name] = read_offset_checkpoint(path)
        except KstoreError as exc:
            info.checkpoints[name] = None
            info.issues.append(malformed_checkpoint(info.path, None, name, path, exc))


def _group_brokers(dirs: List[DataDirInfo]) -> List[Broker]:
    by_node: Dict[int, List[DataDirInfo]] = {}
    brokers: List[Broker] = []
    for info in dirs:
        node = info.node_id
        if node is None:
            brokers.append(Broker(None, [info]))
        else:
            by_node.setdefault(node, []).append(info)
    brokers.extend(Broker(node, members) for node, members in by_node.items())
    brokers.sort(key=lambda b: (b.node_id is None, b.node_id if b.node_id is not None else 0, b.data_dirs[0].path))
    return brokers


def malformed_checkpoint(data_dir: str, partition: Optional[str], name: str, path: str, exc: KstoreError) -> Issue:
    return Issue(
        ERROR, "checkpoint-malformed", exc.message, data_dir=data_dir, partition=partition, file=path,
        position=exc.position,
        kafka=(_BAD_NUMBER_KAFKA if getattr(exc, "number_format", False) else _MALFORMED_KAFKA)[name],
        repair=f"no kstore command rewrites {name}: with the broker stopped, move the file aside "
               + ("(Kafka rewrites it from the loaded logs)" if name != LEADER_EPOCH_CHECKPOINT else
                  "(Kafka then starts the leader epoch cache empty and refills it from the leader)"),
    )


# --------------------------------------------------------------------------- data-dir and broker checks


def layout_issues(found: Survey, *, check_lock: bool = True) -> List[Issue]:
    """Broker-, data-dir- and topic-level findings (everything not inside one partition's files)."""
    issues: List[Issue] = []
    for broker in found.brokers:
        issues.extend(_broker_issues(broker))
    for info in found.data_dirs.values():
        issues.extend(info.issues)
        issues.extend(_meta_issues(info, found))
        if check_lock and is_locked(info.path):
            holder = lock_holder(info.path)
            issues.append(Issue(
                ERROR, "lock-held", "a live process holds the data dir's lock" + (f" ({holder})" if holder else ""),
                data_dir=info.path,
                file=lock_path(info.path),
                kafka="fail: 'Failed to acquire lock on file .lock in <dir>. A Kafka instance in another process "
                      "or thread is using this directory.' (LogManager.lockLogDirs)",
                repair="find the process (`fuser -v <dir>/.lock`: a broker still running?) and stop it; "
                       "kstore's writing commands refuse this dir until then"))
        if info.whole:
            issues.extend(_directory_issues(info))
    issues.extend(_topic_id_issues(found))
    return [i for i in issues if found.in_scope(i)]


# struct flock on Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (pid_t), padded to 32 bytes.
_FLOCK = struct.Struct("@hhqqi4x")


def lock_holder(data_dir: str) -> Optional[str]:
    """"pid N: <command>" of the process holding ``.lock`` (F_GETLK, which needs no write access and takes
    no lock), or None where that cannot be told (not Linux, no holder, another PID namespace)."""
    try:
        import fcntl

        fd = os.open(lock_path(data_dir), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except (ImportError, OSError):
        return None
    try:
        request = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        l_type, _whence, _start, _len, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, request))
    except (OSError, struct.error, ValueError):
        return None
    finally:
        os.close(fd)
    if l_type == fcntl.F_UNLCK or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/comm", "r", encoding="utf-8", errors="replace") as f:
            return f"pid {pid}: {f.read().strip()}"
    except OSError:
        return f"pid {pid}"


def _meta_issues(info: DataDirInfo, found: Survey) -> List[Issue]:
    path = os.path.join(info.path, META_PROPERTIES)
    if info.meta_error is not None:
        return [Issue(ERROR, "meta-properties-unreadable", info.meta_error.message, data_dir=info.path, file=path,
                      position=info.meta_error.position,
                      kafka="fail: MetaPropertiesEnsemble cannot load the dir (it is treated as failed)",
                      repair="restore meta.properties from another data dir of the same broker "
                             "(same cluster.id and node.id, without its directory.id line)")]
    if info.meta is None:
        return _missing_meta(info, found)
    out = []
    version = info.meta.get("version", "0").strip()
    if version not in ("0", "1"):
        out.append(Issue(ERROR, "meta-properties-version", f"unknown version {version!r}", data_dir=info.path,
                         file=path, kafka="fail: MetaProperties refuses an unknown version",
                         repair="restore meta.properties from another data dir of the same broker"))
    if info.node_id is None:
        key = "node.id" if version == "1" else "broker.id"
        out.append(Issue(ERROR, "meta-properties-node-id", f"no valid {key}", data_dir=info.path, file=path,
                         kafka="fail: 'node.id was not specified' / 'node ID not found' (MetaPropertiesEnsemble.verify)",
                         repair=f"set {key} to the broker's node.id (server.properties)"))
    if info.cluster_id is None:
        out.append(_no_cluster_id(info, found.judge(info), version, path))
    return out


def _missing_meta(info: DataDirInfo, found: Survey) -> List[Issue]:
    """A data dir without meta.properties: KafkaRaftServer refuses it, a ZooKeeper-mode broker writes one."""
    path = os.path.join(info.path, META_PROPERTIES)
    if not info.whole or not any(d.meta is not None or d.meta_error is not None for d in found.data_dirs.values()):
        # Copies made for kstore (and Kafka's own test harnesses) have none: with no meta.properties
        # anywhere in what was checked, the data dir line says so, but it is not a finding.
        return []
    if found.judge(info).zookeeper:
        return [Issue(NOTE, "meta-properties-missing", "no meta.properties, while other data dirs checked have one",
                      data_dir=info.path, file=path,
                      kafka="ignore: a ZooKeeper-mode broker writes it at startup with its broker.id and the "
                            "cluster's id from ZooKeeper (KafkaServer: checkpointBrokerMetadata up to 3.6, "
                            "MetaPropertiesEnsemble.Copier from 3.7)", repair="none needed")]
    return [Issue(ERROR, "meta-properties-missing", "no meta.properties, while other data dirs checked have one",
                  data_dir=info.path, file=path,
                  kafka="fail on a KRaft broker: 'No `meta.properties` found in <dir> (have you run "
                        "`kafka-storage.sh` to format the directory?)' (KafkaRaftServer.initializeLogDirs)",
                  repair="copy meta.properties from another data dir of the same broker (same cluster.id and "
                         "node.id, without its directory.id line)")]


def _no_cluster_id(info: DataDirInfo, judged: BrokerJudgement, version: str, path: str) -> Issue:
    """A meta.properties without cluster.id: optional in version 0 for a ZooKeeper-mode broker (MetaProperties,
    BrokerMetadataCheckpoint: brokers before 0.10.1 wrote none), required by KRaft."""
    if version == "0" and not judged.kraft:
        return Issue(NOTE, "meta-properties-cluster-id", "no cluster.id (optional in a version=0 file)",
                     data_dir=info.path, file=path,
                     kafka="ignore: a ZooKeeper-mode broker takes the cluster's id from ZooKeeper and writes it into "
                           "meta.properties at startup (KafkaServer; MetaPropertiesEnsemble.verify accepts a version 0 "
                           "file without it)", repair="none needed")
    return Issue(ERROR, "meta-properties-cluster-id", "no cluster.id", data_dir=info.path, file=path,
                 kafka=("fail: 'cluster.id was not specified in the v1 file' (MetaPropertiesEnsemble.verify)"
                        if version == "1" else "fail on a KRaft broker: 'Error: cluster ID not found in <dir>' "
                        "(KafkaRaftServer.initializeLogDirs)"),
                 repair="set cluster.id to the cluster's id (the other data dirs' meta.properties)")


def _broker_issues(broker: Broker) -> List[Issue]:
    """MetaPropertiesEnsemble.verify across one broker's dirs, and LogManager.loadLog's duplicate check."""
    if broker.node_id is None or len(broker.data_dirs) < 2:
        return []
    issues = []
    first = next((d for d in broker.data_dirs if d.cluster_id is not None), None)
    for info in broker.data_dirs:
        if first is not None and info.cluster_id is not None and info.cluster_id != first.cluster_id:
            issues.append(Issue(
                ERROR, "meta-properties-cluster-mismatch",
                f"node {broker.node_id}: cluster.id {info.cluster_id} here, {first.cluster_id} in {first.path}",
                data_dir=info.path, file=os.path.join(info.path, META_PROPERTIES),
                kafka="fail: 'Invalid cluster.id in: <file>. Expected <id>, but read <id>' (MetaPropertiesEnsemble.verify)",
                repair="these dirs belong to different clusters: give the broker only its own cluster's dirs "
                       "(or restore the right meta.properties)"))
    seen_ids: Dict[str, str] = {}
    for info in broker.data_dirs:
        dir_id = info.directory_id
        if dir_id is None:
            continue
        if dir_id in seen_ids:
            issues.append(Issue(
                ERROR, "meta-properties-duplicate-directory-id",
                f"directory.id {dir_id} is also the id of {seen_ids[dir_id]}", data_dir=info.path,
                file=os.path.join(info.path, META_PROPERTIES),
                kafka="fail: 'Duplicate directory ID ... found' (MetaPropertiesEnsemble.verify)",
                repair="remove the directory.id line from one copy (the broker writes a new one)"))
        else:
            seen_ids[dir_id] = info.path
    homes: Dict[str, str] = {}
    metadata_dirs = []
    for info in broker.data_dirs:
        if not info.whole:
            continue
        if os.path.isdir(os.path.join(info.path, names.METADATA_PARTITION_DIR)):
            metadata_dirs.append(info.path)
        for partition in info.partitions:
            if partition.name == names.METADATA_PARTITION_DIR:
                continue
            other = homes.setdefault(partition.name, partition.path)
            if other != partition.path:
                issues.append(Issue(
                    ERROR, "duplicate-partition", f"{partition.name} is also in {os.path.dirname(other)} "
                    f"(both are data dirs of node {broker.node_id})", data_dir=info.path, partition=partition.path,
                    kafka="fail: IllegalStateException 'Duplicate log directories for <partition> are found in both "
                          "...' (LogManager.loadLog)",
                    repair="move one copy out of the broker's data dirs (keep the one with the higher log end offset "
                           "and leader epoch: compare with `kstore inspect`)"))
    if len(metadata_dirs) > 1:
        issues.append(Issue(
            ERROR, "duplicate-metadata-log", f"{names.METADATA_PARTITION_DIR} is in {len(metadata_dirs)} data dirs of node "
            f"{broker.node_id}: {', '.join(metadata_dirs)}", data_dir=metadata_dirs[1],
            partition=os.path.join(metadata_dirs[1], names.METADATA_PARTITION_DIR),
            kafka="fail: 'Found unexpected metadata location in data directory' (KafkaRaftServer.initializeLogDirs)",
            repair="keep the copy in metadata.log.dir (or the first log.dirs entry) and move the other away"))
    return issues


def _directory_issues(info: DataDirInfo) -> List[Issue]:
    """Children LogManager.loadLogs trips over (parseTopicPartitionName) or treats specially."""
    issues = []
    for name in sorted(os.listdir(info.path)):
        child = os.path.join(info.path, name)
        if child not in info.partition_paths:  # a partition the survey found is a dir without data-dir files
            if not os.path.isdir(child) or name == REMOTE_INDEX_CACHE:
                continue
            if holds_data_dir_files(child):
                issues.append(_stray_dir(info, child, "a data directory of its own (meta.properties, checkpoints "
                                                      "or .lock) inside this data dir"))
                continue
        reason = _unparseable(name)
        if reason is not None:
            issues.append(_stray_dir(info, child, reason))
        elif name.endswith("-delete"):
            issues.append(Issue(NOTE, "replica-delete", "a replica marked for deletion", data_dir=info.path,
                                partition=child, kafka="delete: loaded, then removed after file.delete.delay.ms",
                                repair="none needed"))
        elif name.endswith("-future"):
            issues.append(Issue(NOTE, "replica-future", "a replica being moved into this dir (alter log dirs)",
                                data_dir=info.path, partition=child,
                                kafka="ignore: loaded as the future replica; the move resumes",
                                repair="none needed"))
        elif name.endswith("-stray"):
            issues.append(Issue(NOTE, "replica-stray", "a replica the broker marked stray (not in the metadata, "
                                "or without a topic ID)", data_dir=info.path, partition=child,
                                kafka="ignore: loaded as a stray log, never served",
                                repair="none needed; remove it once you are sure its data is not needed"))
    return issues


def _stray_dir(info: DataDirInfo, child: str, reason: str) -> Issue:
    return Issue(
        ERROR, "stray-directory", reason, data_dir=info.path, file=child,
        kafka=f"fail: KafkaException 'Found directory {child}, '{os.path.basename(child)}' is not in the form of "
              "topic-partition or topic-partition.uniqueId-delete (if marked for deletion).' - the broker stops "
              "(UnifiedLog.parseTopicPartitionName in LogManager.loadLogs)",
        repair="move the directory out of the data dir (kstore has no command for this)")


def _unparseable(name: str) -> Optional[str]:
    """Why LocalLog.parseTopicPartitionName throws for this directory name, or None when it parses."""
    if "-" not in name:
        return "not a partition directory: no '-' in its name"
    stem = name
    for suffix in _REPLICA_SUFFIXES:
        if name.endswith(suffix):
            if not re.match(r"^(\S+)-(\S+)\.(\S+)" + re.escape(suffix) + r"$", name):
                return f"ends in {suffix} but is not <topic>-<partition>.<uniqueId>{suffix}"
            stem = name[: name.rindex(".")]
            break
    index = stem.rindex("-")
    topic, partition = stem[:index], stem[index + 1:]
    if not topic or not partition:
        return "not a partition directory: empty topic or partition"
    if not re.match(r"^[+-]?[0-9]+$", partition) or not -(1 << 31) <= int(partition) < (1 << 31):
        return f"not a partition directory: {partition!r} is not a partition number"
    return None


def _load_metadata(partition_dir: str) -> Optional["LoadResult"]:
    """The replay of the KRaft metadata log in `partition_dir` (kstore_cli.cluster.metadata_loader), None
    when it cannot be read at all."""
    from kstore_cli.cluster.metadata_loader import MetadataSource, load_image

    try:
        return load_image(MetadataSource(partition_dir))
    except KstoreError:
        return None


def metadata_image_of(partition: Partition, found: Optional[Survey] = None) -> Optional["MetadataImage"]:
    """The cluster as the KRaft metadata log in ``__cluster_metadata-0`` has it at its end (the latest
    snapshot, then the log after it, metadata transactions as the loader applies them), read by
    kstore_cli.cluster.metadata_image: None when it cannot be read whole (damage is reported by the partition's
    own checks; a partial image would make false alarms). With `found`, read once per survey."""
    loaded = found.metadata_log(partition.path) if found is not None else _load_metadata(partition.path)
    return None if loaded is None or loaded.problems else loaded.image


def _topic_id_issues(found: Survey) -> List[Issue]:
    """The same topic with different topic IDs among the copies checked (one cluster id at a time), and
    copies whose topic ID the cluster's metadata log (when one is among them) does not have for the topic;
    partitions the metadata assigns to a node whose data dirs do not hold them."""
    copies: Dict[Tuple[Optional[str], str], Dict[str, List[str]]] = {}
    images: Dict[Optional[str], Tuple[str, "MetadataImage"]] = {}
    incomplete: List[str] = []
    for info in found.data_dirs.values():
        for partition in info.partitions:
            if partition.name == names.METADATA_PARTITION_DIR:
                image = metadata_image_of(partition, found)
                if image is None:
                    incomplete.append(partition.path)
                elif info.cluster_id not in images or len(image.topics.by_id) > len(images[info.cluster_id][1].topics.by_id):
                    images[info.cluster_id] = (partition.path, image)
                continue
            path = os.path.join(partition.path, PARTITION_METADATA)
            try:
                topic_id = str(read_partition_metadata(path)["topicId"])
            except KstoreError:
                continue  # reported per partition
            copies.setdefault((info.cluster_id, partition.topic), {}).setdefault(topic_id, []).append(partition.path)
    issues = [Issue(NOTE, "metadata-log-incomplete", "its records before the first segment are in no snapshot "
                    "(or it could not be read whole): topic IDs are compared between the copies checked instead, "
                    "and partitions assigned to this node are not checked",
                    data_dir=os.path.dirname(path), partition=path, kafka="ignore", repair="none needed")
              for path in incomplete]
    for (cluster, topic), by_id in sorted(copies.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if cluster in images:
            issues.extend(_stray_issues(topic, by_id, *images[cluster]))
        elif len(by_id) >= 2:
            issues.extend(_mismatch_issues(topic, by_id))
    for cluster, (source, image) in images.items():
        issues.extend(_assigned_without_dir(found, cluster, source, image))
    return issues


def _stray_issues(topic: str, by_id: Dict[str, List[str]], source: str, image: "MetadataImage") -> List[Issue]:
    """Copies whose partition.metadata topic ID the metadata does not have for their topic."""
    names = {t["name"]: tid for tid, t in image.topics.by_id.items()}
    issues = []
    for tid, paths in sorted(by_id.items()):
        known = names.get(topic)
        if known == tid:
            continue
        owner = image.topics.by_id.get(tid, {}).get("name")
        if owner is not None:
            what = f"partition.metadata has topic ID {tid}, which the cluster metadata ({source}) gives to topic {owner}"
        elif known:
            what = f"partition.metadata has topic ID {tid}; the cluster metadata ({source}) has {known} for {topic}"
        else:
            what = f"partition.metadata has topic ID {tid}; the cluster metadata ({source}) has no topic {topic} (deleted?)"
        for path in paths:
            # A different ID for the name is certain; no such topic may also be a metadata copy older than the
            # data (the broker catches up with the controller before it decides).
            issues.append(Issue(
                ERROR if known or owner else WARNING, "topic-id-unknown", what,
                data_dir=os.path.dirname(path), partition=path, file=os.path.join(path, PARTITION_METADATA),
                kafka="stray: the topic ID is not the metadata image's for this topic, so a KRaft broker renames the "
                      "log <topic>-<partition>.<id>-stray at startup and never serves it "
                      "(LogManager.isStrayKraftReplica)",
                repair=("an old incarnation of a deleted and recreated topic: move it out of the data dir if its "
                        "data is not needed (the broker refetches the current one from the leader)")))
    return issues


def _mismatch_issues(topic: str, by_id: Dict[str, List[str]]) -> List[Issue]:
    """Copies of one topic with different IDs, with no metadata log to judge them by: the odd ones out."""
    ranked = sorted(by_id.items(), key=lambda kv: -len(kv[1]))
    top = len(ranked[0][1])
    odd = [(tid, paths) for tid, paths in ranked if len(paths) < top] or ranked
    summary = "; ".join(f"{tid} in {len(paths)} cop{'y' if len(paths) == 1 else 'ies'}" for tid, paths in ranked)
    return [Issue(
        ERROR, "topic-id-mismatch", f"topic {topic} has {len(by_id)} topic IDs among the copies checked "
        f"({summary}); this copy has {tid}", data_dir=os.path.dirname(path), partition=path,
        file=os.path.join(path, PARTITION_METADATA),
        kafka="fail for this partition: InconsistentTopicIdException when the controller's topic ID differs "
              "from partition.metadata; a KRaft broker whose metadata does not know this ID renames the "
              "log -stray at startup (LogManager.isStrayKraftReplica) and stops serving it",
        repair="find the cluster's topic ID (`kstore metadata` on the data dir holding __cluster_metadata-0) "
               "and move the copy with the other ID out of the data dir")
        for tid, paths in odd for path in paths]


def _assigned_without_dir(found: Survey, cluster: Optional[str], source: str, image: "MetadataImage") -> List[Issue]:
    """Partitions the metadata assigns to a node (its replicas) that none of that node's data dirs holds.

    Only where the survey can know: every data dir the node registered (RegisterBrokerRecord LogDirs,
    by meta.properties directory.id) was given, or the partition is assigned to a directory that was."""
    from kstore_cli.cluster.metadata_image import MIGRATING_DIR

    issues: List[Issue] = []
    by_node: Dict[int, List[DataDirInfo]] = {}
    for info in found.data_dirs.values():
        if info.cluster_id == cluster and info.node_id is not None and info.whole:
            by_node.setdefault(info.node_id, []).append(info)
    for node, infos in sorted(by_node.items()):
        given = {i.directory_id for i in infos if i.directory_id}
        registered = set(image.cluster.brokers.get(node, {}).get("log_dirs") or [])
        all_dirs = bool(registered) and registered <= given or (not registered and len(infos) == 1)
        present = {(p.topic, p.partition) for i in infos for p in i.partitions}
        for tid, topic in sorted(image.topics.by_id.items(), key=lambda kv: kv[1]["name"]):
            for pid, reg in sorted(topic["partitions"].items()):
                if node not in reg["replicas"] or (topic["name"], pid) in present:
                    continue
                directory = reg["directories"][reg["replicas"].index(node)] if reg["directories"] else MIGRATING_DIR
                if not all_dirs and directory not in given:
                    continue  # assigned to a data dir that was not given: nothing to say about it
                leader = "this node is its leader" if reg["leader"] == node else f"its leader is {reg['leader']}"
                alone = reg["isr"] == [node]
                issues.append(Issue(
                    ERROR if alone else WARNING, "assigned-partition-missing",
                    f"the cluster metadata ({source}) assigns {topic['name']}-{pid} (topic ID {tid}) to node {node} "
                    f"(replicas {reg['replicas']}, ISR {reg['isr']}; {leader}), but no data dir of node {node} "
                    f"given holds it", data_dir=infos[0].path, partition=None,
                    kafka=("the broker creates the log empty and fetches it from the leader" if not alone else
                           "the broker creates the log empty; this node is the only in-sync replica, so the "
                           "partition's data is lost unless a copy of the directory is found"),
                    repair="find the partition's directory (another disk, a backup) and put it back in a data dir of "
                           f"node {node} before starting the broker, or let it refetch from the leader"))
    return issues


def clean_shutdown_marker(data_dir: str) -> bool:
    """Whether the data dir has ``.kafka_cleanshutdown`` (Kafka skips recovery when it does)."""
    return os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN))


__all__ = [
    "ERROR", "WARNING", "NOTE", "Issue", "DataDirInfo", "Broker", "Survey", "survey", "layout_issues",
    "clean_shutdown_marker",
]
