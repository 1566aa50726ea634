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

Here: the survey, the finding (:class:`Issue`) and its severities, and what a malformed checkpoint does.
The data dirs' own checks are :func:`~kstore_cli.operations.layout_findings.layout_issues`'s; segment
integrity and index health are :func:`kstore_cli.operations.verify.verify_partition`'s:
:func:`~kstore_cli.operations.partition_findings.partition_issues` (the partition checks, and what Kafka
does with verify's findings) takes its plan for the log end offset. Nothing here writes.
"""

from __future__ import annotations

import os
import re
import sys
from array import array
from typing import TYPE_CHECKING, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from kstore_cli.errors import FileUnreadableError, KstoreError, UsageError
from kstore_cli.log import names
from kstore_cli.log.checkpoint import (
    CLEAN_SHUTDOWN,
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    OffsetCheckpointEntries,
    read_partition_metadata,
    read_properties,
)
from kstore_cli.log.kafka_version import KafkaVersion
from kstore_cli.log.logdir import (
    Chain,
    Partition,
    PartitionDir,
    PartitionDirs,
    find_data_dirs,
    is_partition_dir,
    loaded,
    nested_data_dir,
    topic_matcher,
)
from kstore_cli.operations.broker_version import (
    LAST_ZOOKEEPER,
    UNKNOWN,
    ZOOKEEPER,
    BrokerJudgement,
    FileEvidence,
    judge_data_dir,
)

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
                 "kafka", "repair", "topic_partition", "gist", "repairs")

    def __init__(self, severity: str, check: str, message: str, *, kafka: str, repair: str,
                 data_dir: Optional[str] = None, partition: Optional[str] = None, file: Optional[str] = None,
                 position: Optional[int] = None, offset: Optional[int] = None,
                 topic_partition: Optional[Tuple[str, int]] = None, gist: Optional[str] = None,
                 repairs: Optional[List[dict]] = None) -> None:
        self.severity = severity
        self.check = check
        self.message = message
        #: What Kafka does with it at startup: starts "fail", "ignore", "truncate", "rebuild", "delete"...
        self.kafka = kafka
        #: The command (or manual step) that repairs it; one line per command where there are several.
        self.repair = repair
        #: Where there are several repairs: what each keeps and loses (RepairCost.to_dict), best first.
        self.repairs = repairs
        self.data_dir = data_dir
        self.partition = partition
        self.file = file
        self.position = position
        self.offset = offset
        #: (topic, partition) the finding is about: the partition dir's, or given where there is no dir.
        self.topic_partition = topic_partition or _topic_partition_of(partition)
        #: The message without this finding's own details, said of several alike (findings_groups).
        self.gist = gist

    @property
    def where(self) -> str:
        text = self.file or self.partition or self.data_dir or ""
        if self.position is not None:
            text += f" at byte {self.position}"
        elif self.offset is not None:
            text += f" at offset {self.offset}"
        return text

    def to_dict(self) -> dict:
        topic, partition_id = self.topic_partition or (None, None)
        out = {
            "severity": self.severity, "check": self.check, "data_dir": self.data_dir, "partition": self.partition,
            "file": self.file, "position": self.position, "offset": self.offset, "message": self.message,
            "kafka": self.kafka, "repair": self.repair, "topic": topic, "partition_id": partition_id,
        }
        if self.repairs is not None:
            out["repairs"] = self.repairs
        return out

    def text_lines(self) -> List[str]:
        """The finding as plain text: what, then what Kafka does and what to run (indented)."""
        return [f"{self.where}: {self.severity}: {self.check}: {self.message}", f"    kafka: {self.kafka}",
                *("    " + line for line in run_lines(self.repair))]

    def __repr__(self) -> str:
        return f"Issue({self.severity}, {self.check}, {self.where}: {self.message})"


def _topic_partition_of(partition: Optional[str]) -> Optional[Tuple[str, int]]:
    """(topic, partition) of a partition dir named exactly ``<topic>-<partition>`` (not a -delete/-stray one)."""
    parsed = names.parse_partition_dir(partition) if partition else None
    if parsed is None or os.path.basename(os.path.normpath(partition)) != f"{parsed[0]}-{parsed[1]}":
        return None
    return parsed


class DataDirInfo:
    """One data directory: its meta.properties, which of its partitions were asked for, its checkpoints."""

    def __init__(self, path: str, whole: bool) -> None:
        self.path = path
        #: The data dir itself was named (or found in a named folder): its stray dirs are checked too.
        self.whole = whole
        self.meta: Optional[Dict[str, str]] = None
        self.meta_error: Optional[KstoreError] = None
        #: Its walk's partition dirs, by name (in name order), and those PATHs named that its walk does not hold.
        self.walked: Sequence["Partition | PartitionDir"] = ()
        self.named: List["Partition | PartitionDir"] = []
        self._named_paths: set = set()
        self._named_by_name: Optional[Dict[str, "Partition | PartitionDir"]] = None
        #: Its partitions: the walk's, then those named (listed, Partition, after an eager survey or on first use
        #: of :attr:`partitions`; by name, PartitionDir, after a lazy one, where the workers list them).
        self.partition_dirs: Sequence["Partition | PartitionDir"] = ()
        #: What its partitions' files say of the broker that wrote them (filled by the survey's scan).
        self.files = FileEvidence()
        #: topic -> {topic ID: its partition dirs' paths}: partition.metadata's topic IDs (the scan's), in dir order.
        self.topic_ids: Dict[str, Dict[str, Sequence[str]]] = {}
        #: Checkpoint file name -> {(topic, partition): offset}; None when missing or malformed.
        self.checkpoints: Dict[str, Optional[Mapping[Tuple[str, int], int]]] = {}
        self.issues: List[Issue] = []
        #: Whose rules judge it (Survey.judged fills it on first use).
        self.judged: Optional[BrokerJudgement] = None
        self._listed = False

    @property
    def partitions(self) -> List[Partition]:
        """Its partitions, listed (on first use after a lazy survey: in this process, one by one)."""
        if not self._listed:
            self.partition_dirs = [loaded(p) for p in self.partition_dirs]
            self._listed = True
        return self.partition_dirs  # type: ignore[return-value] - every one listed now

    def name(self, partition: "Partition | PartitionDir") -> None:
        """`partition`, named by a PATH, is one of its partitions."""
        if partition.path not in self._named_paths:
            self._named_paths.add(partition.path)
            self.named.append(partition)

    def holds(self, path: str) -> bool:
        """Whether the partition dir at `path` is one of its partitions (a lookup: no set of 10,000 paths)."""
        return path in self._named_paths or path in self.walked

    def holding(self, name: str) -> Optional["Partition | PartitionDir"]:
        """Its partition dir of that name, if it has one."""
        if isinstance(self.walked, PartitionDirs):
            at = self.walked.position(os.path.join(self.walked.path, name))
            if at is not None:
                return self.partition_dirs[at]  # the walk's come first (listed, after an eager survey)
        if self._named_by_name is None:
            self._named_by_name = {p.name: p for p in reversed(self.named)}  # the first named of a name
        return self._named_by_name.get(name)

    def found_topic_id(self, topic: str, topic_id: str, position: int) -> None:
        """The scan found `topic_id` in the partition.metadata of its partition dir at `position`."""
        by_id = self.topic_ids.setdefault(sys.intern(topic), {})
        paths = by_id.get(topic_id)
        if paths is None:
            paths = by_id[topic_id] = _PathsAt(self.partition_dirs)
        paths.at.append(position)  # type: ignore[attr-defined]

    def keep(self, dropped: Iterable[str] = ()) -> None:
        """Its partitions made final: those the scan `dropped` left out, those named that its walk holds too."""
        gone = set(dropped)
        if gone and isinstance(self.walked, PartitionDirs):
            self.walked = self.walked.without(gone)
        self.named = [p for p in self.named if p.path not in gone and p.path not in self.walked]
        self._named_paths = {p.path for p in self.named}
        self._named_by_name = None
        self.partition_dirs = Chain([self.walked, self.named])

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
        #: (partition, only): ``only`` is the base offset of a single named segment. A data dir's walk is one
        #: piece of them (by name: :class:`PartitionDirs`), in the order PATHs named them.
        self.targets: Sequence[Tuple["Partition | PartitionDir", Optional[int]]] = ()
        #: The targets by the data dir holding them: (data dir, its pairs), in the order named.
        self.target_pieces: List[Tuple[DataDirInfo, Sequence[Tuple["Partition | PartitionDir", Optional[int]]]]] = []
        #: --topics: which topics' partitions are checked (data-dir checks still read the whole dir).
        self.wanted: Callable[[str], bool] = topic_matcher(None)
        #: --kafka-version: judge every data dir by this release's rules instead of its writer's.
        self.asked: Optional[KafkaVersion] = None
        self._metadata: Dict[str, Optional["LoadResult"]] = {}
        #: With `sizes`: the targets' .log bytes (the progress bar's total).
        self.log_bytes = 0

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
        judged = judge_data_dir(info.meta, info.files, info.path, metadata_level=level,
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


def run_lines(repair: str) -> List[str]:
    """What to run, one repair a line: ``run:   <first>``, then ``or:    <other>`` for each alternative."""
    first, *others = repair.split("\n")
    return [f"run:   {first}", *(f"or:    {line}" for line in others)]


def data_dir_key(partition: Partition) -> str:
    """The real path of the data dir holding `partition` (a symlinked alias names the same dir)."""
    return partition.data_dir


# --------------------------------------------------------------------------- discovery


def survey(paths: Iterable[str], *, replicas: bool = False, topics: Optional[str] = None,
           kafka_version: Optional[KafkaVersion] = None, lazy: bool = False, jobs: int = 1,
           sizes: bool = False) -> Survey:
    """Find every data dir and partition the PATHs name (.log file, partition dir, data dir, or a
    folder of data dirs up to two levels down) and read each data dir's meta.properties and checkpoints.
    With `replicas`, ``-future`` replica dirs are partitions to check too (LogManager loads them through the
    same LogLoader, and serves them once the move completes); ``-stray`` and ``-delete`` dirs are never served.
    With `topics` (comma-separated globs) only partitions of matching topics are targets. Each data dir is
    judged by the rules of the broker its files show (Survey.judge), or of `kafka_version`.

    Every partition dir is listed once by the scan (:func:`_scan`: its evidence of the broker, its topic ID).
    `lazy`: the scan runs in `jobs` processes and only each partition's name and what the data dir's checks
    need are kept here: the targets are :class:`PartitionDir` (whoever checks one lists it again). `sizes`:
    the targets' .log bytes are summed (:attr:`Survey.log_bytes`)."""
    out = Survey()
    out.wanted = topic_matcher(topics)
    out.asked = kafka_version
    finder = _Finder(out, replicas)
    for raw in paths:
        path = os.path.abspath(raw)
        if os.path.isfile(path):
            if not path.endswith(names.LOG_SUFFIX):
                raise UsageError("expected a .log file, a partition directory or a data directory", path=raw)
            finder.add(Partition(os.path.dirname(path)), names.base_offset_from_name(path))
        elif os.path.isdir(path):
            if is_partition_dir(path):
                finder.add(Partition(path), None)
                continue
            # A non-empty directory that is none of these is checked as a data dir (its children are
            # what a broker would trip over); an empty one holds nothing to check.
            for found in find_data_dirs(path) or ([path] if os.listdir(path) else []):
                finder.walk(os.path.realpath(found))
        else:
            raise FileUnreadableError("no such file or directory", path=raw)
    _list_found(out, finder, lazy, jobs, sizes)
    return out


class _Finder:
    """The survey's data dirs and targets as the PATHs name them, each target once: what PATHs name themselves
    is remembered (`seen`), a data dir's walk is kept by name (:class:`PartitionDirs`), once (`walked`). The
    targets are kept as pieces in the order named: a list of (partition, only) pairs, or a data dir's walk."""

    def __init__(self, out: Survey, replicas: bool) -> None:
        self.out = out
        self.replicas = replicas
        self.seen: set = set()
        self.walked: set = set()
        #: (data dir, the pairs named) or (data dir, the paths its walk leaves to those named before it).
        self.pieces: List[Tuple[DataDirInfo, "List[Tuple[Partition | PartitionDir, Optional[int]]] | _Walk"]] = []

    def data_dir(self, path: str, whole: bool) -> DataDirInfo:
        info = self.out.data_dirs.get(path)
        if info is None:
            info = self.out.data_dirs[path] = DataDirInfo(path, whole)
        info.whole = info.whole or whole
        return info

    def walk(self, path: str) -> None:
        """The partitions of the data dir at `path` (a real path), the first time it is named."""
        info = self.data_dir(path, True)
        if path not in self.walked:
            self.walked.add(path)
            walked = _partitions_of(info, self.replicas)
            links = sorted(os.path.join(path, name) for name in walked.links)
            info.walked = walked.without(links)
            # those named whole before their data dir stay where they were named
            self.pieces.append((info, _Walk([p for p in self.seen if isinstance(p, str) and p in info.walked])))
            for link in links:  # a symlink's partition is of the data dir it points into (Partition.data_dir)
                self.add(PartitionDir(link, None), None, named=False)

    def add(self, partition: "Partition | PartitionDir", only: Optional[int], named: bool = True) -> None:
        """A target a PATH named (`named`), or that a data dir's walk found elsewhere (a symlink's)."""
        info = self.data_dir(data_dir_key(partition), False)
        key = partition.path if only is None else (partition.path, only)
        if key in self.seen or (only is None and partition.path in info.walked):
            return  # its data dir's walk took it, or a PATH named it
        if named:
            self.seen.add(key)
        if self.pieces and self.pieces[-1][0] is info and isinstance(self.pieces[-1][1], list):
            self.pieces[-1][1].append((partition, only))
        else:
            self.pieces.append((info, [(partition, only)]))
        info.name(partition)


class _Walk(NamedTuple):
    """A data dir's walk among the targets, but for the partitions named before it."""

    before: List[str]


class _WholePartitions(Sequence):
    """(partition dir, None) for each of a data dir's partition dirs: each partition whole, as a target."""

    __slots__ = ("dirs",)

    def __init__(self, dirs: Sequence["Partition | PartitionDir"]) -> None:
        self.dirs = dirs

    def __len__(self) -> int:
        return len(self.dirs)

    def __getitem__(self, i):  # type: ignore[override] - positions only, as runner.stream asks
        return self.dirs[i], None


def _list_found(out: Survey, finder: _Finder, lazy: bool, jobs: int, sizes: bool) -> None:
    """The found data dirs' own files read, their brokers grouped, every partition dir listed (:func:`_scan`),
    the targets kept to those the walk took as partitions and --topics wants."""
    for info in out.data_dirs.values():
        _read_data_dir_files(info)
        info.keep()
    out.brokers = _group_brokers(list(out.data_dirs.values()))
    listed = _scan(out, jobs=jobs if lazy else 1, keep=not lazy, sizes=sizes,
                   named_whole={p for p in finder.seen if isinstance(p, str)})
    wanted = out.wanted
    for info, piece in finder.pieces:
        if isinstance(piece, _Walk):
            dirs = info.walked.without(piece.before).of_topics(wanted)  # type: ignore[union-attr] - PartitionDirs
            pairs: Sequence[Tuple["Partition | PartitionDir", Optional[int]]] = _WholePartitions(dirs)
        else:
            pairs = [t for t in piece if info.holds(t[0].path) and wanted(t[0].topic)]
        if not lazy:
            pairs = [(listed.get(p.path, p), only) for p, only in pairs]
        out.target_pieces.append((info, pairs))
    out.targets = Chain(pairs for _info, pairs in out.target_pieces)
    if sizes:  # the whole partitions' were added up by the scan
        out.log_bytes += sum(os.path.getsize(loaded(p).segment(only).log) for _info, piece in out.target_pieces
                             if isinstance(piece, list) for p, only in piece if only is not None)


def _partitions_of(info: DataDirInfo, replicas: bool) -> PartitionDirs:
    """The dirs a broker loads as partitions from the data dir, by their names (the scan lists them)."""
    links: List[str] = []

    def loadable() -> Iterator[str]:
        with os.scandir(info.path) as children:  # one entry at a time, not a list of 10,000 first
            for entry in children:
                if entry.is_dir() and _loadable_name(entry.name, replicas):
                    if entry.is_symlink():  # its data dir is where it points
                        links.append(entry.name)
                    yield entry.name

    return PartitionDirs(info.path, info.path, loadable(), links)  # the data dir's path is a real path


class _Listed(NamedTuple):
    """What the scan keeps of one partition dir: why it is none (unlistable: the error; a data dir's files),
    the evidence of its files, its topic ID, its .log bytes (with `sizes`), itself listed (with `keep`)."""

    error: Optional[str]
    data_dir_files: bool = False
    files: Optional[FileEvidence] = None
    topic_id: Optional[str] = None
    topic: str = ""  # with a topic ID: its topic
    log_bytes: int = 0
    partition: Optional[Partition] = None


class _Pairs(Sequence):
    """(data dir, partition dir) of every partition dir of `infos`, by position: made when asked for, not a
    tuple each held for the whole scan (10,000 partitions)."""

    def __init__(self, infos: List[DataDirInfo]) -> None:
        self._infos = infos
        self._dirs = Chain(info.partition_dirs for info in infos)

    def __len__(self) -> int:
        return len(self._dirs)

    def locate(self, i: int) -> Tuple[DataDirInfo, int]:
        """The data dir of the `i`th partition dir, and its position there."""
        at, position = self._dirs.locate(i)
        return self._infos[at], position

    def __getitem__(self, i):  # type: ignore[override] - positions only, as runner.stream asks
        info, position = self.locate(i)
        return info, info.partition_dirs[position]


class _PathsAt(Sequence):
    """The paths of some of a data dir's partition dirs, by their positions: one topic ID's copies."""

    __slots__ = ("dirs", "at")

    def __init__(self, dirs: Sequence["Partition | PartitionDir"]) -> None:
        self.dirs = dirs
        self.at = array("I")

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, i):  # type: ignore[override]
        return self.dirs[self.at[i]].path


def _scan(out: Survey, *, jobs: int, keep: bool, sizes: bool, named_whole: set) -> Dict[str, Partition]:
    """Every partition dir of the survey listed (in `jobs` forked processes, streamed back in order): the data
    dirs' evidence and topic IDs gathered, the dirs that are no partitions dropped (one a broker cannot list is
    an issue of its data dir: LogLoader lists the dir first, an IOException takes the data dir offline).
    With `sizes`, the .log bytes of those that are whole targets (walked, or in `named_whole`) and of a topic
    --topics wants are added up. Returns the partitions listed, by path, with `keep`."""
    from kstore_cli.operations.runner import stream

    infos = list(out.data_dirs.values())
    items = _Pairs(infos)
    v2_found: set = set()  # the data dirs where this process found a v2 batch: no segment opened more

    def listed(item: Tuple[DataDirInfo, "Partition | PartitionDir"]) -> _Listed:
        info, ref = item
        try:
            partition = loaded(ref)
        except FileUnreadableError as exc:
            return _Listed(exc.message)
        if nested_data_dir(ref, partition):  # a dir a PATH named as a partition is taken as one
            return _Listed(None, True)
        files = FileEvidence()
        files.add(partition, look_for_v2=info.path not in v2_found)
        if files.v2:
            v2_found.add(info.path)
        topic_id = _topic_id(partition)
        return _Listed(None, False, files, topic_id, partition.topic if topic_id is not None else "",
                       sum(os.path.getsize(s.log) for s in partition.segments) if sizes else 0,
                       partition if keep else None)

    kept: Dict[str, Partition] = {}
    dropped: Dict[str, List[str]] = {}
    unlistable: Dict[str, int] = {}
    for i, found in enumerate(stream(listed, items, jobs=jobs)):
        info, position = items.locate(i)
        if found.files is None:
            ref = info.partition_dirs[position]
            dropped.setdefault(info.path, []).append(ref.path)
            if found.error is not None:
                # before the data dir's own findings (its checkpoints'), as the dir is walked first
                n = unlistable[info.path] = unlistable.get(info.path, 0) + 1
                info.issues.insert(n - 1, _unlistable(info, ref.path, found.error))
            continue
        info.files.merge(found.files)
        if found.topic_id is not None:
            info.found_topic_id(found.topic, found.topic_id, position)
        if sizes or found.partition is not None:
            ref = info.partition_dirs[position]
            if sizes and (position < len(info.walked) or ref.path in named_whole) and out.wanted(ref.topic):
                out.log_bytes += found.log_bytes
            if found.partition is not None:
                kept[ref.path] = found.partition
    for info in infos:
        info.keep(dropped.get(info.path, ()))
        if keep:
            info.partition_dirs = [kept.get(p.path, p) for p in info.partition_dirs]
        info._listed = keep
    return kept


def _topic_id(partition: Partition) -> Optional[str]:
    """partition.metadata's topic ID (None: none, or unreadable: reported per partition); not the metadata log's."""
    path = os.path.join(partition.path, PARTITION_METADATA)
    if partition.name == names.METADATA_PARTITION_DIR or path not in partition.other_files:
        return None
    try:
        return str(read_partition_metadata(path)["topicId"])
    except KstoreError:
        return None


def _unlistable(info: DataDirInfo, child: str, message: str) -> Issue:
    return Issue(ERROR, "partition-unreadable", message, data_dir=info.path, partition=child,
                 kafka="fail: IOException while loading the partition: " + _OFFLINE,
                 repair="fix the directory's permissions or the disk (owner: the broker's user), then rerun doctor")


def _loadable_name(name: str, replicas: bool = False) -> bool:
    """A data dir's child directory LogManager loads as a partition, by its name; -future ones with `replicas`."""
    if name == REMOTE_INDEX_CACHE or name.endswith(("-delete", "-stray")):
        return False
    if name.endswith(names.REPLICA_DIR_SUFFIXES) and (not replicas or unparseable_reason(name) is not None):
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
            info.checkpoints[name] = OffsetCheckpointEntries.read(path)
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
        repair=(f"no kstore command rewrites {name}: with the broker stopped, move the file aside "
                "(Kafka rewrites it from the loaded logs)") if name != LEADER_EPOCH_CHECKPOINT else
               "`kstore repair` on the partition (rebuilds it from the batches' leader epochs, as Kafka's recovery "
               "fills it; the old file is quarantined)",
    )


# --------------------------------------------------------------------------- data-dir and broker checks


def unparseable_reason(name: str) -> Optional[str]:
    """Why LocalLog.parseTopicPartitionName throws for this directory name, or None when it parses."""
    if "-" not in name:
        return "not a partition directory: no '-' in its name"
    stem = name
    for suffix in names.REPLICA_DIR_SUFFIXES:
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
    """The cluster as the KRaft metadata log in ``__cluster_metadata-0`` has it at its end
    (:func:`metadata_image_and_newer`'s image). With `found`, read once per survey."""
    return metadata_image_and_newer(partition, found)[0]


def metadata_image_and_newer(partition: Partition, found: Optional[Survey] = None
                             ) -> Tuple[Optional["MetadataImage"], List[Issue]]:
    """The cluster as the KRaft metadata log in ``__cluster_metadata-0`` has it at its end (the latest
    snapshot, then the log after it, metadata transactions as the loader applies them), read by
    kstore_cli.cluster.metadata_image, and a warning naming what in it is newer than kstore knows. The image
    is None when it cannot be read whole (damage is reported by the partition's own checks; a partial image
    would make false alarms): also when records of a newer Kafka were skipped (the warning says so); a newer
    metadata.version, or newer record versions read with the fields kstore knows, leave it whole. With
    `found`, read once per survey."""
    loaded = found.metadata_log(partition.path) if found is not None else _load_metadata(partition.path)
    if loaded is None:
        return None, []
    whole = loaded.skipped_records == 0 and all(p in loaded.newer for p in loaded.problems)
    newer = [Issue(
        WARNING, "metadata-newer-than-kstore", "; ".join(loaded.newer) + (
            ": partitions assigned to this node are checked against the image as kstore reads it" if whole else
            ": the image lacks what the skipped records change, so partitions assigned to this node are not "
            "checked and topic IDs are compared between the copies checked instead"),
        data_dir=os.path.dirname(partition.path), partition=partition.path,
        kafka="ignore: the Kafka that wrote the log reads it; a Kafka without this metadata.version or record "
              "type refuses it (MetadataVersion.fromFeatureLevel, MetadataRecordSerde: UnsupportedVersionException)",
        repair="a kstore whose tables come from that Kafka's source (python -m kstore_cli.parsers.generate_tables)")
        ] if loaded.newer else []
    return (loaded.image if whole else None), newer


def clean_shutdown_marker(data_dir: str) -> bool:
    """Whether the data dir has ``.kafka_cleanshutdown`` (Kafka skips recovery when it does)."""
    return os.path.exists(os.path.join(data_dir, CLEAN_SHUTDOWN))


__all__ = [
    "ERROR", "WARNING", "NOTE", "Issue", "DataDirInfo", "Broker", "Survey", "survey", "clean_shutdown_marker",
]
