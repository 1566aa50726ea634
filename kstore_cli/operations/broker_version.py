"""Which broker wrote a data dir: its mode (ZooKeeper or KRaft) and the Kafka releases its files are
consistent with, with the evidence, so that doctor and verify-index judge it by that broker's rules
(or by the release asked for with ``--kafka-version``).

Each fact is from Kafka's source, at the release named:

* ``meta.properties`` ``version=0`` with ``broker.id`` is what a ZooKeeper-mode broker writes
  (BrokerMetadataCheckpoint.write up to 3.6, MetaProperties V0 from 3.7; a ZooKeeper broker that is not
  migrating refuses any other version: MetaPropertiesEnsemble.verify REQUIRE_V0); ZooKeeper mode is gone
  from 4.0 (only KafkaRaftServer is left).
* ``version=1`` with ``node.id`` is KRaft's (``kafka-storage.sh format``, KafkaRaftServer, 2.8+).
* ``directory.id`` (KIP-858): a KRaft broker of 3.7+ writes one at every start
  (KafkaRaftServer.initializeLogDirs); a ZooKeeper broker only while migrating to KRaft (KafkaServer, 3.7+).
* ``partition.metadata`` (KIP-516, PartitionMetadataFile): 2.8+.
* ``__cluster_metadata-0`` (KafkaRaftServer.MetadataPartition): KRaft, 2.8+; its metadata.version
  (MetadataVersion) is at most the release of the oldest broker that runs it.
* message format v2 batches (KIP-98, RecordBatch.MAGIC_VALUE_V2), ``leader-epoch-checkpoint`` (KIP-101,
  LeaderEpochCheckpointFile), ``log-start-offset-checkpoint`` (KIP-107, LogManager), ``.txnindex`` and
  producer ``.snapshot`` files (KIP-98): 0.11+.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

from kstore_cli.cluster.metadata_image import METADATA_VERSIONS
from kstore_cli.log import names
from kstore_cli.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, PARTITION_METADATA
from kstore_cli.log.kafka_version import NEWEST_KNOWN, OLDEST_KNOWN, KafkaVersion, VersionRange
from kstore_cli.log.logdir import Partition
from kstore_cli.record.wire import MAGIC_OFFSET

ZOOKEEPER = "zookeeper"
KRAFT = "kraft"
UNKNOWN = "unknown"
_MODE_NAMES = {ZOOKEEPER: "a ZooKeeper-mode broker", KRAFT: "a KRaft broker", UNKNOWN: "a broker of unknown mode"}

OLDEST = KafkaVersion(*OLDEST_KNOWN)
NEWEST = KafkaVersion(*NEWEST_KNOWN)
#: Kafka 0.11 (KIP-98, KIP-101, KIP-107): message format v2, leader epochs, the log start offset checkpoint.
V0_11 = KafkaVersion(0, 11)
#: The first release with KRaft (early access, KIP-500) and with partition.metadata (KIP-516).
V2_8 = KafkaVersion(2, 8)
#: directory.id (KIP-858).
V3_7 = KafkaVersion(3, 7)
#: The last release with ZooKeeper mode; 4.0 removed it (KIP-833).
LAST_ZOOKEEPER = KafkaVersion(3, 9)
ZOOKEEPER_REMOVED = KafkaVersion(4, 0)


class BrokerJudgement(NamedTuple):
    """Whose rules a data dir is judged by: the mode and releases its files show, and why; `asked` is the
    release given with --kafka-version (its rules win)."""

    mode: str
    versions: VersionRange
    evidence: Tuple[str, ...]
    asked: Optional[KafkaVersion] = None

    @property
    def rules_mode(self) -> str:
        """The mode whose rules apply: the asked release's where it has only one mode, else the files'."""
        if self.asked is not None:
            if self.asked >= ZOOKEEPER_REMOVED:
                return KRAFT
            if self.asked < V2_8:
                return ZOOKEEPER
        return self.mode

    @property
    def rules_version(self) -> KafkaVersion:
        """The release whose rules apply: the asked one, else the newest the files are consistent with."""
        if self.asked is not None:
            return self.asked
        return self.versions.high or NEWEST

    @property
    def kraft(self) -> bool:
        return self.rules_mode == KRAFT

    @property
    def zookeeper(self) -> bool:
        return self.rules_mode == ZOOKEEPER

    def describe(self) -> str:
        """'a ZooKeeper-mode broker, Kafka 2.8-3.9'."""
        return f"{_MODE_NAMES[self.mode]}, Kafka {self.versions}"

    def text(self) -> str:
        """The one line doctor prints per data dir."""
        seen = f"{self.describe()}, from: {'; '.join(self.evidence)}"
        if self.asked is None:
            return f"judged as {seen}"
        return f"judged as {_MODE_NAMES[self.rules_mode]}, Kafka {self.asked} (asked); its files show {seen}"

    def to_dict(self) -> dict:
        return {"mode": self.mode, "versions": str(self.versions), "from": list(self.evidence),
                "asked": None if self.asked is None else str(self.asked), "rules_mode": self.rules_mode}


def metadata_release(level: int) -> Tuple[KafkaVersion, str]:
    """The release a metadata.version feature level came with, and its name (MetadataVersion): a level
    newer than kstore's table is at least the newest release the table names."""
    name = METADATA_VERSIONS.get(level)
    if name is None:
        top = METADATA_VERSIONS[max(METADATA_VERSIONS)]
        return KafkaVersion.parse(top.split("-")[0]), f"level {level}, newer than {top}"
    return KafkaVersion.parse(name.split("-")[0]), f"{name} (level {level})"


def judge_data_dir(meta: Optional[Dict[str, str]], files: "FileEvidence | Iterable[Partition]", data_dir: str, *,
                   metadata_level: Optional[int] = None, has_metadata_log: bool = False) -> BrokerJudgement:
    """The mode and releases one data dir's files are consistent with. `meta` is its meta.properties (None
    when missing or unreadable); `has_metadata_log` when it (or another dir of the same node) holds
    ``__cluster_metadata-0``, `metadata_level` that log's metadata.version. `files`: its partitions' evidence
    (or the partitions, counted here)."""
    if not isinstance(files, FileEvidence):
        partitions, files = files, FileEvidence()
        for partition in partitions:
            files.add(partition)
    evidence: List[str] = []
    low, high = OLDEST, NEWEST
    mode = UNKNOWN
    if meta is not None:
        version = meta.get("version", "0").strip()
        key = "node.id" if version == "1" else "broker.id"
        keys = f"with {key}" if key in meta else f"without {key}"
        keys += "" if "cluster.id" in meta else ", no cluster.id"
        if version == "0":
            mode, high = ZOOKEEPER, LAST_ZOOKEEPER
        elif version == "1":
            mode, low = KRAFT, V2_8
        evidence.append(f"meta.properties version={version} {keys}")
        if "directory.id" in meta:
            low = max(low, V3_7)
            evidence.append("directory.id (3.7+)")
        elif mode == KRAFT:
            high = KafkaVersion(3, 6)
            evidence.append("no directory.id (a KRaft broker of 3.7+ writes one at every start)")
    else:
        evidence.append("no readable meta.properties")
    if has_metadata_log:
        if mode == ZOOKEEPER:
            high = NEWEST  # a broker migrated from ZooKeeper keeps its version=0 file (KafkaRaftServer reads V0)
        mode, low = KRAFT, max(low, V2_8)
        evidence.append(f"{names.METADATA_PARTITION_DIR} (KRaft)")
        if metadata_level is not None:
            release, name = metadata_release(metadata_level)
            low = max(low, release)
            evidence.append(f"metadata.version {name}")
    low = _file_evidence(files, data_dir, low, evidence)
    if high < low:
        evidence.append(f"(the files disagree: nothing after {high} is ruled out)")
        high = NEWEST
    return BrokerJudgement(mode, VersionRange(low, None if high == NEWEST else high), tuple(evidence))


class FileEvidence:
    """What a data dir's partitions' files say of the broker that wrote them, counted partition by partition
    (:meth:`add`, in any process: the counts add up, :meth:`merge`): partition.metadata (2.8+), then 0.11's
    files and v2 batches. The metadata log's partition is not counted."""

    __slots__ = ("topic_ids", "v2", "epochs", "txn", "snapshots")

    def __init__(self) -> None:
        self.topic_ids = self.v2 = self.epochs = self.txn = self.snapshots = 0

    def add(self, partition: Partition, *, look_for_v2: bool = True) -> None:
        """One partition's files, from its own scan (no stat more); a segment is opened only until one v2
        batch is found (here, or where `look_for_v2` is False)."""
        if partition.name == names.METADATA_PARTITION_DIR:
            return
        self.topic_ids += os.path.join(partition.path, PARTITION_METADATA) in partition.other_files
        self.epochs += os.path.join(partition.path, LEADER_EPOCH_CHECKPOINT) in partition.other_files
        self.txn += any(s.txnindex for s in partition.segments)
        self.snapshots += bool(partition.snapshots)
        if look_for_v2 and not self.v2:
            self.v2 += bool(partition.segments) and _magic(partition.segments[-1].log) == 2

    def merge(self, other: "FileEvidence") -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def __getstate__(self):
        return tuple(getattr(self, n) for n in self.__slots__)

    def __setstate__(self, state) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)


def _file_evidence(files: FileEvidence, data_dir: str, low: KafkaVersion, evidence: List[str]) -> KafkaVersion:
    """Lower bounds from the partitions' files: partition.metadata (2.8+), then 0.11's files and v2 batches."""
    if files.topic_ids:
        low = max(low, V2_8)
        evidence.append(f"partition.metadata in {files.topic_ids} partition(s) (2.8+)")
    else:
        evidence.append("no partition.metadata")
    newer = [what for what, n in (("message format v2", files.v2), ("leader-epoch-checkpoint", files.epochs),
                                  (".txnindex", files.txn), ("producer snapshots", files.snapshots)) if n]
    if os.path.exists(os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT)):
        newer.append("log-start-offset-checkpoint")
    if newer:
        low = max(low, V0_11)
        evidence.append(", ".join(newer) + " (0.11+)")
    return low


def _magic(log: str) -> Optional[int]:
    """The magic byte of a segment's first batch (at the same place in every format), None when unreadable."""
    try:
        with open(log, "rb") as f:
            f.seek(MAGIC_OFFSET)
            byte = f.read(1)
    except OSError:
        return None
    return byte[0] if byte else None


def judged_for(judgement: BrokerJudgement, asked: Optional[KafkaVersion]) -> BrokerJudgement:
    """The same evidence, judged for the release asked (None: by the files)."""
    return judgement._replace(asked=asked)


__all__ = [
    "ZOOKEEPER", "KRAFT", "UNKNOWN", "LAST_ZOOKEEPER", "ZOOKEEPER_REMOVED", "BrokerJudgement", "FileEvidence",
    "judge_data_dir",
    "judged_for", "metadata_release",
]
