"""Upgrade readiness: what a broker of another Kafka release would refuse or change on these data dirs.

``kstore doctor --kafka-version 4.0`` on a 2.x/3.x data dir appends :func:`upgrade_issues` to its findings:
each names the Kafka rule (KIP and class) and the step that prepares the dir. A target older than the dir's
files (a downgrade) gets the clear refusals too. Facts are from Kafka 4.0.0's source unless a finding says
otherwise; docs/upgrade.md lists the checks. Nothing here writes.

Checked and found to need nothing: Kafka 4.0's group coordinator reads every ``__consumer_offsets`` record
version 2.x/3.x brokers wrote (GroupCoordinatorRecordSerde: OffsetCommitValue 0-4, GroupMetadataValue 0-4) and
its transaction coordinator every ``__transaction_state`` one (TransactionLogValue 0-1), so old record versions
in internal topics are findings only for a target older than the versions found.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Tuple

from kstore_cli.cluster.metadata_image import METADATA_VERSIONS
from kstore_cli.errors import KstoreError
from kstore_cli.log import names
from kstore_cli.log.checkpoint import META_PROPERTIES
from kstore_cli.log.config import INTERNAL_TOPIC_OVERRIDES
from kstore_cli.log.kafka_version import KafkaVersion
from kstore_cli.log.logdir import Partition
from kstore_cli.operations.broker_version import KRAFT, ZOOKEEPER
from kstore_cli.operations.startup import ERROR, NOTE, WARNING, Broker, Issue, Survey, loaded, metadata_image_of
from kstore_cli.record.reader import read_batches

if TYPE_CHECKING:
    from kstore_cli.cluster.metadata_image import MetadataImage

KAFKA_4_0 = KafkaVersion(4, 0)
#: MetadataVersion.MINIMUM_VERSION in Kafka 4.x (KAFKA-18601): IBP_3_3_IV3, feature level 7.
MINIMUM_METADATA_LEVEL_4_0 = 7
#: Topic configs Kafka 4.0 removed (TopicConfig, LogConfig.configDef): key -> why.
REMOVED_TOPIC_CONFIGS_4_0 = {
    "message.format.version": "KIP-724, KAFKA-17393: the broker writes message format v2 only",
    "message.timestamp.difference.max.ms": "KIP-937: replaced by message.timestamp.before.max.ms and "
                                           "message.timestamp.after.max.ms",
}
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_TOPIC = "__transaction_state"
#: The newest value version each release's coordinator reads, newest release first: the handwritten
#: schemas of GroupMetadataManager before 2.8 (MetadataVersion: offset v2/v3 and group v2 with KIP-211 in 2.1,
#: group v3 in 2.3, group v1 in 0.10.1), then the JSON schemas' validVersions (flexible versions from 3.0).
_VALUE_VERSIONS = {
    "OffsetCommitValue": [((3, 0), 4), ((2, 1), 3), ((0, 10), 1)],
    "GroupMetadataValue": [((3, 0), 4), ((2, 3), 3), ((2, 1), 2), ((0, 10, 1), 1), ((0, 10), 0)],
    "TransactionLogValue": [((3, 0), 1), ((0, 11), 0)],
}
_MIGRATE = ("migrate the cluster to KRaft on a 3.x bridge release first (KIP-866; 3.9 recommended: controllers "
            "formatted with `kafka-storage.sh format`, zookeeper.metadata.migration.enable=true on the brokers, "
            "then the brokers restarted in KRaft mode), and upgrade to 4.x after the migration is finalized; "
            "no kstore command does this")


def upgrade_issues(found: Survey, target: KafkaVersion) -> List[Issue]:
    """What a broker of release `target` would refuse or change on the surveyed data dirs (read-only)."""
    issues: List[Issue] = []
    for broker in found.brokers:
        issues.extend(_mode_issues(found, broker, target))
    images: Dict[Optional[str], "MetadataImage"] = {}
    for info in found.data_dirs.values():
        metadata = info.holding(names.METADATA_PARTITION_DIR)  # looked up by name, not among 10,000
        if metadata is None:
            continue
        partition = loaded(metadata)
        image = metadata_image_of(partition, found)
        if image is None:
            issues.append(_unread_metadata(partition))
            continue
        images.setdefault(info.cluster_id, image)
        issues.extend(_metadata_version_issues(partition, image, target))
        issues.extend(_removed_config_issues(partition, image, target))
    for partition, only in found.targets:
        if partition.name == names.METADATA_PARTITION_DIR:
            continue
        image = images.get(found.data_dir_of(partition).cluster_id)
        partition = loaded(partition)  # a lazy survey's is listed here, one at a time
        issues.extend(_format_issues(partition, only, target, image))
        if target < KAFKA_4_0 and partition.topic in (OFFSETS_TOPIC, TRANSACTION_TOPIC):
            issues.extend(_internal_record_issues(partition, only, target))
    return [i for i in issues if found.in_scope(i)]


# --------------------------------------------------------------------------- mode (ZooKeeper or KRaft)


def broker_mode(found: Survey, broker: Broker) -> Optional[str]:
    """"kraft", "zookeeper" or None, by the files of the node's data dirs (Survey.judge: a version 1
    meta.properties or a ``__cluster_metadata-0`` in one of its dirs is KRaft, as a migrated ZooKeeper broker
    keeps its version 0 file; version 0 and no metadata log is ZooKeeper: "ZK-based brokers that are not
    migrating only support version 0", MetaPropertiesEnsemble.verify); None where none tells."""
    modes = {found.judge(d)._replace(asked=None).mode for d in broker.data_dirs}
    if KRAFT in modes:
        return KRAFT
    return ZOOKEEPER if modes == {ZOOKEEPER} else None


def _mode_issues(found: Survey, broker: Broker, target: KafkaVersion) -> List[Issue]:
    mode = broker_mode(found, broker)
    info = broker.data_dirs[0]
    meta = os.path.join(info.path, META_PROPERTIES)
    who = f"node {broker.node_id}" if broker.node_id is not None else "this broker"
    if mode == ZOOKEEPER and target >= KAFKA_4_0:
        no_cluster = [d.path for d in broker.data_dirs if d.meta is not None and d.cluster_id is None]
        extra = (f"; {', '.join(no_cluster)} has no cluster.id, which a KRaft broker requires ('Error: cluster ID "
                 "not found in <dir>', KafkaRaftServer.initializeLogDirs)" if no_cluster else "")
        return [Issue(
            ERROR, "upgrade-zookeeper-metadata",
            f"{who}'s data dirs were written by a ZooKeeper-mode broker (meta.properties version 0, no "
            f"{names.METADATA_PARTITION_DIR}); Kafka {target} has no ZooKeeper mode{extra}",
            data_dir=info.path, file=meta,
            kafka=f"fail: Kafka 4.0 removed ZooKeeper mode (KIP-833; 4.0 upgrade notes: 'Clusters in ZooKeeper mode "
                  "have to be migrated to KRaft mode before they can be upgraded to 4.0.x'): a 4.0 broker takes "
                  "topics, topic IDs and configs only from the KRaft metadata log, which this cluster keeps in "
                  "ZooKeeper. Topic configs live in ZooKeeper too: kstore cannot check them for the configs 4.0 "
                  f"removed ({', '.join(sorted(REMOVED_TOPIC_CONFIGS_4_0))})",
            repair=_MIGRATE)]
    if mode == KRAFT and target < KafkaVersion(2, 8):
        return [Issue(
            ERROR, "downgrade-kraft-metadata",
            f"{who}'s data dirs were written by a KRaft-mode broker; Kafka {target} has no KRaft mode",
            data_dir=info.path, file=meta,
            kafka="fail: a ZooKeeper-mode broker reads the cluster's metadata from ZooKeeper only, and refuses a "
                  "version 1 meta.properties ('Unrecognized version of the server meta.properties file', "
                  "BrokerMetadataCheckpoint)",
            repair="none: a KRaft cluster cannot be moved back to ZooKeeper mode; run a release with KRaft "
                   "(3.3 or newer)")]
    return []


# --------------------------------------------------------------------------- the metadata log


def _unread_metadata(partition: Partition) -> Issue:
    return Issue(NOTE, "upgrade-metadata-unchecked", "the cluster metadata log could not be read whole: its "
                 "metadata.version and topic configs were not checked for the upgrade",
                 data_dir=os.path.dirname(partition.path), partition=partition.path, kafka="ignore",
                 repair="see the metadata log's own findings (`kstore metadata` on the data dir)")


def max_metadata_level(target: KafkaVersion) -> Optional[int]:
    """The newest metadata.version feature level release `target` knows (MetadataVersion), None when the
    target is newer than every release in kstore's table (it may know levels kstore does not) or has no KRaft."""
    newest = max(_release(v) for v in METADATA_VERSIONS.values())
    if (target.major, target.minor) > newest:
        return None
    levels = [lvl for lvl, v in METADATA_VERSIONS.items() if _release(v) <= (target.major, target.minor)]
    return max(levels) if levels else None


def _release(ibp: str) -> Tuple[int, int]:
    major, minor = ibp.split("-", 1)[0].split(".")[:2]
    return int(major), int(minor)


def _metadata_version_issues(partition: Partition, image: "MetadataImage", target: KafkaVersion) -> List[Issue]:
    level = image.features.metadata_version_level
    have = f"metadata.version {image.features.metadata_version} (feature level {level})"
    where = dict(data_dir=os.path.dirname(partition.path), partition=partition.path)
    if target >= KAFKA_4_0 and level < MINIMUM_METADATA_LEVEL_4_0:
        return [Issue(
            ERROR, "upgrade-metadata-version",
            f"the cluster metadata log is at {have}; Kafka {target} needs 3.3-IV3 (level 7) or newer", **where,
            kafka="fail: Kafka 4.x knows no metadata.version below 3.3-IV3 (MetadataVersion.MINIMUM_VERSION, "
                  "KAFKA-18601): replaying the log's FeatureLevelRecord throws 'No MetadataVersion with feature "
                  "level ...' (MetadataVersion.fromFeatureLevel), and a log from before 3.3 has none to replay",
            repair="on the current cluster (3.3-3.9; older KRaft clusters upgrade their software to 3.9 first): "
                   "`kafka-features.sh --bootstrap-server HOST:PORT upgrade --metadata 3.9` (KIP-778), then upgrade "
                   "to 4.x; no kstore command writes the metadata log")]
    highest = max_metadata_level(target)
    if highest is not None and level > highest:
        return [Issue(
            ERROR, "downgrade-metadata-version",
            f"the cluster metadata log is at {have}; Kafka {target} knows levels up to {highest} "
            f"({METADATA_VERSIONS[highest]})", **where,
            kafka="fail: the broker cannot replay the log's FeatureLevelRecord ('No MetadataVersion with feature "
                  "level ...', MetadataVersion.fromFeatureLevel) and its controller refuses a finalized "
                  "metadata.version it does not support (QuorumFeatures)",
            repair=f"downgrade metadata.version first where Kafka allows it (`kafka-features.sh --bootstrap-server "
                   f"HOST:PORT downgrade --metadata {METADATA_VERSIONS[highest]}`, refused across versions that "
                   "changed the metadata), or stay on a release that knows it")]
    return []


def _removed_config_issues(partition: Partition, image: "MetadataImage", target: KafkaVersion) -> List[Issue]:
    """Topic configs in the metadata log that Kafka 4.0 removed."""
    if target < KAFKA_4_0:
        return []
    issues = []
    for (rtype, topic), data in sorted(image.configs.resource_data.items()):
        if rtype != "TOPIC":
            continue
        for key in sorted(set(data) & set(REMOVED_TOPIC_CONFIGS_4_0)):
            set_at = image.configs.set_at.get((rtype, topic), {}).get(key)
            issues.append(Issue(
                WARNING, "upgrade-removed-config",
                f"topic {topic} has {key}={data[key]} in the cluster metadata" + (f" ({set_at})" if set_at else "")
                + f"; Kafka {target} removed {key} ({REMOVED_TOPIC_CONFIGS_4_0[key]})",
                data_dir=os.path.dirname(partition.path), partition=partition.path,
                kafka="ignore, then fail on alter: LogConfig no longer defines it, so the broker ignores the value"
                      + (" (timestamps are checked by message.timestamp.before.max.ms/after.max.ms only)"
                         if key == "message.timestamp.difference.max.ms" else "")
                      + "; the controller validates a topic's stored configs with every change "
                        "(ControllerConfigurationValidator, LogConfig.validateNames), so any later "
                        f"`kafka-configs.sh --alter` of {topic} fails with 'Unknown topic config name: {key}' until "
                        "it is deleted (4.0.x-4.2.0; KAFKA-19851 drops removed configs on replay later)",
                repair=(f"`kafka-configs.sh --bootstrap-server HOST:PORT --alter --entity-type topics --entity-name "
                        f"{topic} --delete-config {key}` (before or after the upgrade"
                        + ("; set message.timestamp.before.max.ms and message.timestamp.after.max.ms to the same "
                           "value first to keep the check" if key == "message.timestamp.difference.max.ms" else "")
                        + "); no kstore command writes the metadata log")))
    return issues


# --------------------------------------------------------------------------- message formats


def _batch_magics(partition: Partition, only: Optional[int]) -> Tuple[Counter, Dict[int, Tuple[int, int]]]:
    """Batches per magic, and the first/last offset of each magic, over the partition's segments (or the one
    named); a segment is read up to its first damage (doctor's CRC scan reports that)."""
    counts: Counter = Counter()
    spans: Dict[int, Tuple[int, int]] = {}
    for segment in partition.segments:
        if only is not None and segment.base_offset != only:
            continue
        try:
            for batch in read_batches(segment.log):
                counts[batch.magic] += 1
                low, high = spans.get(batch.magic, (batch.base_offset, batch.last_offset))
                spans[batch.magic] = (min(low, batch.base_offset), max(high, batch.last_offset))
        except KstoreError:
            continue
    return counts, spans


def _compacted(partition: Partition, image: Optional["MetadataImage"]) -> Optional[bool]:
    """Whether the topic is compacted: Kafka's internal topics are; else the metadata log's cleanup.policy
    override (the cluster default when it has none: delete, unless a dynamic broker default says otherwise);
    None where kstore cannot see the topic's configs (a ZooKeeper cluster)."""
    if "compact" in INTERNAL_TOPIC_OVERRIDES.get(partition.topic, {}).get("cleanup.policy", ()):
        return True
    if image is None:
        return None
    policy = image.configs.resource_data.get(("TOPIC", partition.topic), {}).get("cleanup.policy")
    if policy is None:
        policy = image.configs.resource_data.get(("BROKER", ""), {}).get("log.cleanup.policy", "delete")
    return "compact" in [p.strip() for p in policy.split(",")]


def _format_issues(partition: Partition, only: Optional[int], target: KafkaVersion,
                   image: Optional["MetadataImage"]) -> List[Issue]:
    if not (target >= KAFKA_4_0 or target < KafkaVersion(0, 11)):
        return []
    counts, spans = _batch_magics(partition, only)
    where = dict(data_dir=os.path.dirname(partition.path), partition=partition.path)
    legacy = sorted(m for m in counts if m < 2)
    if target >= KAFKA_4_0 and legacy:
        return [_legacy_issue(partition, target, counts, spans, legacy, _compacted(partition, image), where)]
    if target < KafkaVersion(0, 11) and counts.get(2):
        low, high = spans[2]
        return [Issue(
            ERROR, "downgrade-message-format",
            f"{counts[2]} batch(es) in message format v2 (offsets {low}-{high}); Kafka {target} reads formats v0 "
            "and v1 only", offset=low, **where,
            kafka="fail: a broker before 0.11 (KIP-98) does not know magic 2: the log's recovery finds no valid "
                  "message there and truncates the rest of the segment (LogSegment.recover)",
            repair=f"`kstore convert-format --to-magic 1 --in-place {partition.path}` with the broker stopped "
                   "(loses what v1 cannot hold: headers, producer ids, transaction markers; --strict refuses that, "
                   "--dry-run counts it)")]
    return []


def _legacy_issue(partition: Partition, target: KafkaVersion, counts: Counter, spans: Dict[int, Tuple[int, int]],
                  legacy: List[int], compacted: Optional[bool], where: dict) -> Issue:
    low = min(spans[m][0] for m in legacy)
    high = max(spans[m][1] for m in legacy)
    found = " and ".join(f"{counts[m]} batch(es) in message format v{m}" for m in legacy)
    cleaner = ("4.0's log cleaner rewrites every v0/v1 batch it cleans as v2 (KAFKA-13093: an uncompressed "
               "legacy message becomes a batch of its own, a compressed wrapper one batch; v0 records get "
               "timestamp -1, CreateTime)")
    if compacted:
        severity, kafka = WARNING, f"change: the topic is compacted, and {cleaner}"
    else:
        severity = NOTE
        kafka = ("ignore: read and served as they are, never written again (KIP-724: LogValidator writes v2 "
                 "only, produce requests v0-v2 and fetch down-conversion are gone, KIP-896); the segments leave "
                 "with retention" + ("" if compacted is False else
                                     f"; if the topic is compacted (its configs are not visible here), {cleaner}"))
    return Issue(
        severity, "upgrade-message-format",
        f"{found} (offsets {low}-{high}); Kafka {target} never writes formats v0/v1 "
        "(KIP-724)", offset=low, **where, kafka=kafka,
        repair=f"`kstore convert-format --to-magic 2 --in-place {partition.path}` with the broker stopped (offsets "
               "kept; --dry-run first shows what changes), or leave them to retention")


# --------------------------------------------------------------------------- internal topics (downgrades)


def max_value_version(schema: str, target: KafkaVersion) -> Optional[int]:
    """The newest version of a coordinator value schema release `target` reads (None: the topic predates it)."""
    for release, version in _VALUE_VERSIONS[schema]:
        if target >= KafkaVersion(*release):
            return version
    return None


def _record_versions(partition: Partition, only: Optional[int]) -> Iterable[Tuple[int, Optional[int], int]]:
    """(key version, value version or None for a tombstone, offset) of each record, up to the first damage."""
    for segment in partition.segments:
        if only is not None and segment.base_offset != only:
            continue
        try:
            for batch in read_batches(segment.log):
                if getattr(batch, "is_control", False):
                    continue
                for record in batch:
                    key, value = record.key, record.value
                    if key is None or len(key) < 2:
                        continue
                    kv = int.from_bytes(key[:2], "big", signed=True)
                    vv = None if value is None or len(value) < 2 else int.from_bytes(value[:2], "big", signed=True)
                    yield kv, vv, record.offset
        except KstoreError:
            continue


def _internal_record_issues(partition: Partition, only: Optional[int], target: KafkaVersion) -> List[Issue]:
    """Coordinator records a release older than their writer cannot read (GroupMetadataManager,
    TransactionStateManager before 4.0)."""
    newest: Dict[str, Tuple[int, int]] = {}
    unknown_keys: Dict[int, int] = {}
    for kv, vv, offset in _record_versions(partition, only):
        if partition.topic == TRANSACTION_TOPIC:
            schema = "TransactionLogValue"
        elif kv in (0, 1):
            schema = "OffsetCommitValue"
        elif kv == 2:
            schema = "GroupMetadataValue"
        else:
            unknown_keys.setdefault(kv, offset)
            continue
        if vv is not None and vv > newest.get(schema, (-1, 0))[0]:
            newest[schema] = (vv, offset)
    where = dict(data_dir=os.path.dirname(partition.path), partition=partition.path)
    issues = []
    for schema, (version, offset) in sorted(newest.items()):
        readable = max_value_version(schema, target)
        if readable is not None and version > readable:
            issues.append(Issue(
                ERROR, "downgrade-internal-topic-record-version",
                f"{schema} version {version} at offset {offset}; Kafka {target} reads versions up to {readable}",
                offset=offset, **where,
                kafka="fail: loading the partition throws on the unknown value version (GroupMetadataManager / "
                      "TransactionStateManager: 'Unknown ... version'), and the coordinator does not serve it",
                repair="none in kstore: stay on a release that reads it (3.0 or newer reads every version 2.x/3.x/4.0 "
                       "writes), or let the records be compacted away on the newer release first"))
    if unknown_keys and partition.topic == OFFSETS_TOPIC:
        first = min(unknown_keys.values())
        kinds = ", ".join(str(k) for k in sorted(unknown_keys))
        old = target < KafkaVersion(3, 0)
        issues.append(Issue(
            ERROR if old else WARNING, "downgrade-internal-topic-record-version",
            f"group coordinator record types {kinds} (KIP-848 and later groups) from offset {first}; Kafka {target}'s "
            "group coordinator knows types 0-2 only", offset=first, **where,
            kafka=("fail: 'Unknown group metadata message version' (GroupMetadataManager.readMessageKey): the "
                   "partition's groups do not load" if old else
                   "ignore: 'Unknown message key ... Ignoring it' (GroupMetadataManager.loadGroupsAndOffsets): the "
                   "state of groups using the new protocols is dropped; their members rejoin"),
            repair="move those groups to the classic protocol before the downgrade (group.protocol=classic on the "
                   "consumers), or stay on a release that knows them"))
    return issues
