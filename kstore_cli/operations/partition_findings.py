"""What a broker's LogLoader makes of each partition directory at startup, as doctor's findings: the
partition's own files (partition.metadata, leader-epoch-checkpoint, leftovers, producer snapshots), the
data dir's checkpoint entries against its log, with the kstore command that repairs each (what Kafka does
with verify-index's findings about the segments is :mod:`.segment_findings`). Nothing here writes.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from kstore_cli.errors import KstoreError
from kstore_cli.log import names
from kstore_cli.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_leader_epoch_checkpoint,
    read_partition_metadata,
)
from kstore_cli.log.fileops import TMP_SUFFIX
from kstore_cli.log.kafka_version import KafkaVersion
from kstore_cli.log.logdir import Partition
from kstore_cli.log.snapshot import read_snapshot
from kstore_cli.log.unified_log import log_start_offset
from kstore_cli.operations.broker_version import BrokerJudgement
from kstore_cli.operations.startup import (
    ERROR,
    NOTE,
    OFFSET_CHECKPOINTS,
    WARNING,
    Issue,
    Survey,
    malformed_checkpoint,
)

if TYPE_CHECKING:
    from kstore_cli.operations.recovery import PartitionPlan

#: how a write cut short by a crash ends a .log (what kstore metadata also leaves out as a torn tail)
def log_end_offset(plan: "PartitionPlan") -> Optional[int]:
    """The log end offset of the segments on disk: the last segment's next offset as far as its valid
    data goes (None without segments, or when the last one could not be read). Damage earlier in the
    log, which recovery would cut, is its own finding: the checkpoints are judged against the files."""
    for splan in reversed(plan.segments):
        if splan.result is not None:
            return splan.result.next_offset
        if splan.error is not None:
            return None
    return None


def partition_issues(found: Survey, partition: Partition, plan: Optional["PartitionPlan"], *,
                     whole_partition: bool = True, log_end: Optional[int] = None) -> List[Issue]:
    """partition.metadata, leader-epoch-checkpoint, the data dir's checkpoint entries against the log,
    a partition without logs, leftovers and snapshots. `plan` is verify_partition's (for the log end), or
    None with the log end given as `log_end` (recover knows it without a second pass over the log)."""
    info = found.data_dir_of(partition)
    issues: List[Issue] = []
    if not whole_partition:
        return issues
    d, p = info.path, partition.path

    def add(severity, check, message, kafka, repair, file=None, position=None, offset=None):
        issues.append(Issue(severity, check, message, kafka=kafka, repair=repair, data_dir=d, partition=p,
                            file=file, position=position, offset=offset))

    leo = None if not partition.segments else log_end if plan is None else log_end_offset(plan)
    first_base = partition.segments[0].base_offset if partition.segments else None
    key = (partition.topic, partition.partition)
    entries = {name: (cp or {}).get(key) for name, cp in info.checkpoints.items()}
    is_metadata = partition.name == names.METADATA_PARTITION_DIR

    if not is_metadata:
        _partition_metadata_issues(p, partition, found.judge(info), add)

    # ---- leader-epoch-checkpoint
    epoch_path = os.path.join(p, LEADER_EPOCH_CHECKPOINT)
    epochs: List[Tuple[int, int]] = []
    if os.path.exists(epoch_path):
        try:
            epochs = read_leader_epoch_checkpoint(epoch_path)
        except KstoreError as exc:
            issues.append(malformed_checkpoint(d, p, LEADER_EPOCH_CHECKPOINT, epoch_path, exc))

    if not partition.segments:
        _empty_partition_issues(partition, entries, epochs, add)
    elif leo is not None:
        _bounds(entries, epochs, leo, first_base, add, d, epoch_path)

    _leftover_issues(partition, add)
    _snapshot_issues(partition, add)
    return issues


def _partition_metadata_issues(p: str, partition: Partition, judged: BrokerJudgement, add: Callable[..., None]) -> None:
    """partition.metadata as UnifiedLog.initializeTopicId reads it; a missing one matters to KRaft only."""
    pm = os.path.join(p, PARTITION_METADATA)
    if not os.path.exists(pm):
        if partition.segments:
            _missing_topic_id(judged, add, pm)
    else:
        try:
            read_partition_metadata(pm)
        except KstoreError as exc:
            add(ERROR, "partition-metadata-malformed", exc.message,
                "fail: KafkaStorageException 'Error while reading partition metadata file'; the data dir goes "
                "offline (PartitionMetadataFile.read)",
                "`kstore repair` with the data dir holding __cluster_metadata-0 or another replica's dir among its "
                "paths (the old file is quarantined)", file=pm, position=exc.position)


def _missing_topic_id(judged: BrokerJudgement, add: Callable[..., None], pm: str) -> None:
    """A log without partition.metadata, by the judged broker's rules. A ZooKeeper-mode broker writes the file
    itself once the controller's LeaderAndIsr carries the topic ID (UnifiedLog.assignTopicId, 2.8+; before 2.8,
    or with inter.broker.protocol.version below 2.8, there is none: KafkaServer keepPartitionMetadataFile): no
    finding. KRaft: LogManager.isStrayKraftReplica (3.7.1+) makes it stray at startup; 3.0-3.7.0 stop on it
    (BrokerMetadataPublisher.findStrayPartitions / LogManager.findStrayReplicas)."""
    copy = ("`kstore repair` with the data dir holding __cluster_metadata-0 or another replica's dir among its "
            "paths (writes the topic ID they have)")
    if judged.zookeeper:
        return
    if not judged.kraft:
        add(NOTE, "partition-metadata-missing", "no partition.metadata (no topic ID)",
            "depends on the broker (this data dir's mode is unknown): a ZooKeeper-mode broker writes it when the "
            "controller sends the topic ID (UnifiedLog.assignTopicId); a KRaft broker treats the log as stray "
            "(LogManager.isStrayKraftReplica)", copy + "; `--kafka-version` judges for a given broker", file=pm)
    elif judged.rules_version >= KafkaVersion(3, 7, 1):
        add(ERROR, "partition-metadata-missing", "no partition.metadata (no topic ID)",
            "stray: a KRaft broker treats a log without a topic ID as stray, renames it "
            "<topic>-<partition>.<id>-stray and stops serving it (LogManager.isStrayKraftReplica)", copy, file=pm)
    elif judged.rules_version >= KafkaVersion(3, 0):
        add(ERROR, "partition-metadata-missing", "no partition.metadata (no topic ID)",
            "fail: RuntimeException 'The log dir ... does not have a topic ID, which is not allowed when running in "
            "KRaft mode' when the broker publishes its first metadata image (BrokerMetadataPublisher."
            "findStrayPartitions, 3.0-3.6; LogManager.findStrayReplicas, 3.7.0)", copy, file=pm)


def _empty_partition_issues(partition: Partition, entries: Dict[str, Optional[int]], epochs: List[Tuple[int, int]],
                            add: Callable[..., None]) -> None:
    """A partition without logs: LogLoader starts it with a new empty segment at the log start offset, so
    whatever still names data (checkpoints, epochs, snapshots, orphan indexes) names data that is gone."""
    named = []
    for name in OFFSET_CHECKPOINTS:
        if entries.get(name):
            named.append(f"{name} {entries[name]}")
    if epochs and any(o > 0 for _e, o in epochs):
        named.append(f"leader-epoch-checkpoint up to offset {max(o for _e, o in epochs)}")
    if partition.snapshots:
        named.append(f"{len(partition.snapshots)} producer snapshot(s) up to offset {max(partition.snapshots)}")
    if partition.orphan_indexes:
        named.append(f"{len(partition.orphan_indexes)} index file(s) without their .log")
    start = entries.get(LOG_START_OFFSET_CHECKPOINT) or 0
    kafka = (f"starts it empty at offset {start} (LogLoader creates a new segment at the log start offset); "
             "as a follower it refetches from the leader, as the leader its data is gone")
    if named:
        add(ERROR, "partition-without-logs", "no .log files, but " + "; ".join(named) + " name data",
            kafka, "restore the segments from a backup or another replica; kstore cannot recreate them")
    else:
        add(NOTE, "partition-without-logs", "no .log files (and nothing names data)", kafka, "none needed")


def _leftover_issues(partition: Partition, add: Callable[..., None]) -> None:
    """What LogLoader.removeTempFilesAndCollectSwapFiles does with each leftover file."""
    for leftover in partition.leftovers:
        name = os.path.basename(leftover)
        if name.endswith(names.SWAP_SUFFIX):
            add(WARNING, "leftover-swap", "a .swap file: a cleaner, split or kstore swap was interrupted",
                "complete: renames the .swap files in and deletes the segments they replace (or deletes them if a "
                ".cleaned file of a lower offset shows an interrupted split)",
                "rerun the interrupted kstore command (compact / convert-format / retain / rebuild-index) on this "
                "partition to finish it, or let the broker finish the swap", file=leftover)
        elif name.endswith(names.CLEANED_SUFFIX):
            add(WARNING, "leftover-cleaned", "a .cleaned file: a cleaner pass or split was interrupted",
                "delete: removes every .cleaned file", "rerun the interrupted kstore command, or let the broker "
                "delete it", file=leftover)
        elif name.endswith(names.DELETED_SUFFIX):
            add(NOTE, "leftover-deleted", "a .deleted file awaiting removal", "delete: removes it at startup",
                "none needed", file=leftover)
        else:
            add(NOTE, "leftover-temporary", "a temporary file of an interrupted write"
                + (" (kstore's)" if name.endswith(TMP_SUFFIX) else ""),
                "ignore: not a Kafka file name", "rerun the interrupted kstore command (it removes it)", file=leftover)


def _snapshot_issues(partition: Partition, add: Callable[..., None]) -> None:
    """Producer snapshots as ProducerStateManager.loadFromSnapshot reads them."""
    for offset, snap in sorted(partition.snapshots.items()):
        try:
            read_snapshot(snap)
        except KstoreError as exc:
            add(WARNING, "snapshot-corrupt", exc.message,
                "delete: 'Failed to load producer snapshot', deletes it and rebuilds producer state by reading the "
                "log from an earlier snapshot (or the log start)", "none needed (or delete the file yourself)",
                file=snap, position=exc.position, offset=offset)


def _bounds(entries, epochs, leo: int, first_base: Optional[int], add, data_dir: str, epoch_path: str) -> None:
    """The data dir's checkpoint entries for this partition against its log end offset."""
    lso = entries.get(LOG_START_OFFSET_CHECKPOINT)
    if lso is not None and lso > leo:
        add(ERROR, "log-start-beyond-end",
            f"log-start-offset-checkpoint says {lso}, the log ends at {leo}: segments are missing",
            "delete: after an unclean shutdown, 'Deleting all segments because logEndOffset is smaller than "
            "logStartOffset' and the partition restarts empty at the log start offset (LogLoader.recoverLog)",
            "restore the missing segments; if the segments are the truth, remove the partition's line from "
            "log-start-offset-checkpoint with the broker stopped",
            file=os.path.join(data_dir, LOG_START_OFFSET_CHECKPOINT), offset=lso)
    rp = entries.get(RECOVERY_POINT_CHECKPOINT)
    if rp is not None and rp > leo:
        # A follower's truncation (leader change) followed by a crash before the next checkpoint leaves this
        # too, so it is a warning: Kafka copes, but flushed data may be gone.
        add(WARNING, "recovery-point-beyond-end",
            f"recovery-point-offset-checkpoint says {rp} was flushed, the log ends at {leo}: flushed data is "
            "missing, or the log was truncated after the checkpoint was written",
            "ignore: uses the log end offset as the recovery point (LogLoader.load)",
            "restore the missing segments from a backup or another replica",
            file=os.path.join(data_dir, RECOVERY_POINT_CHECKPOINT), offset=rp)
    hw = entries.get(REPLICATION_OFFSET_CHECKPOINT)
    if hw is not None and hw > leo:
        # Unflushed records lost in a power failure leave this on a healthy cluster: the replica refetches.
        add(WARNING, "high-watermark-beyond-end",
            f"replication-offset-checkpoint (high watermark) says {hw}, the log ends at {leo}: committed records "
            "are missing from this replica", "ignore: lowers the high watermark to the log end offset (UnifiedLog.updateHighWatermark)",
            "restore the missing segments, or let this replica refetch from the leader",
            file=os.path.join(data_dir, REPLICATION_OFFSET_CHECKPOINT), offset=hw)
    start = log_start_offset(first_base or 0, lso)
    co = entries.get(CLEANER_OFFSET_CHECKPOINT)
    if co is not None and not start <= co <= leo:
        add(NOTE, "cleaner-offset-out-of-range",
            f"cleaner-offset-checkpoint says {co}, outside the log [{start}, {leo}]",
            "reset: the log cleaner starts from the log start offset and rewrites the checkpoint "
            "(LogCleanerManager.cleanableOffsets)", "none needed (`kstore compact` resets it the same way)",
            file=os.path.join(data_dir, CLEANER_OFFSET_CHECKPOINT), offset=co)
    beyond = [(e, o) for e, o in epochs if o > leo]
    if beyond:
        # Routine after a crash: the epoch cache is flushed with entries for records that were not.
        add(NOTE, "leader-epoch-beyond-end",
            f"{len(beyond)} leader epoch entr{'y starts' if len(beyond) == 1 else 'ies start'} after the log end "
            f"{leo} (first: epoch {beyond[0][0]} at {beyond[0][1]})",
            "truncate: drops the entries past the log end offset (LeaderEpochFileCache.truncateFromEnd)",
            "none needed", file=epoch_path, offset=beyond[0][1])
