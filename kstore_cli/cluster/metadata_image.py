"""The cluster as a KRaft controller sees it: ``__cluster_metadata-0`` replayed into a metadata image.

What Kafka's ``MetadataLoader`` does, offline: the newest snapshot (``<offset>-<epoch>.checkpoint``) at or
before the requested end offset is replayed into an empty image, then the log batches after it, with
metadata transactions handled as ``MetadataBatchLoader`` does (records between BeginTransaction and
EndTransaction are applied at the End, dropped at an Abort, and left out while the transaction is still
open at the end of the log). ``bootstrap.checkpoint`` is used when there is neither a snapshot nor a log
record. The image holds the parts Kafka's ``MetadataImage`` holds: FeaturesImage, ClusterImage,
TopicsImage, ConfigurationsImage, ProducerIdsImage, AclsImage, ClientQuotasImage, ScramImage and
DelegationTokenImage. SCRAM credentials and delegation tokens are kept by name only: their salts, keys and
HMACs are never stored here, so no output can carry them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from kstore_cli.errors import CorruptDataError, CorruptRecordError, FileUnreadableError, KstoreError, UsageError
from kstore_cli.parsers.metadata import METADATA_RECORD_TYPES
from kstore_cli.parsers.control import control_type_name
from kstore_cli.parsers.schema import read_message
from kstore_cli.parsers.wire import JavaError, WireReader
from kstore_cli.record.batch import parse_control_key
from kstore_cli.log.names import METADATA_PARTITION_DIR
from kstore_cli.record.reader import read_batches
from kstore_cli.record.resync import next_intact_batch

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")

#: MetadataVersion feature level -> its name (Kafka 4.0: ``MetadataVersion.version()``)
METADATA_VERSIONS: Dict[int, str] = {
    1: "3.0-IV1", 2: "3.1-IV0", 3: "3.2-IV0", 4: "3.3-IV0", 5: "3.3-IV1", 6: "3.3-IV2", 7: "3.3-IV3",
    8: "3.4-IV0", 9: "3.5-IV0", 10: "3.5-IV1", 11: "3.5-IV2", 12: "3.6-IV0", 13: "3.6-IV1", 14: "3.6-IV2",
    15: "3.7-IV0", 16: "3.7-IV1", 17: "3.7-IV2", 18: "3.7-IV3", 19: "3.7-IV4", 20: "3.8-IV0", 21: "3.9-IV0",
    22: "4.0-IV0", 23: "4.0-IV1", 24: "4.0-IV2", 25: "4.0-IV3",
}
#: the image's metadata.version before any FeatureLevelRecord (``MetadataVersion.MINIMUM_KRAFT_VERSION``)
DEFAULT_METADATA_VERSION = 1

CONFIG_RESOURCE_TYPES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
LEADER_RECOVERY_STATES = {0: "RECOVERED", 1: "RECOVERING"}
ACL_RESOURCE_TYPES = {0: "UNKNOWN", 1: "ANY", 2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID",
                      6: "DELEGATION_TOKEN", 7: "USER"}
ACL_PATTERN_TYPES = {0: "UNKNOWN", 1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
ACL_OPERATIONS = {0: "UNKNOWN", 1: "ANY", 2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER",
                  8: "DESCRIBE", 9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS",
                  12: "IDEMPOTENT_WRITE", 13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS", 15: "TWO_PHASE_COMMIT"}
ACL_PERMISSIONS = {0: "UNKNOWN", 1: "ANY", 2: "DENY", 3: "ALLOW"}
SCRAM_MECHANISMS = {1: "SCRAM_SHA_256", 2: "SCRAM_SHA_512"}
ZK_MIGRATION_STATES = {0: "NONE", 1: "MIGRATION", 2: "PRE_MIGRATION", 3: "POST_MIGRATION", 4: "ZK"}
#: Kafka's reserved directory ids (``org.apache.kafka.common.DirectoryId``, as the Kafka of the oracle defines them;
#: early 3.7 code had UNASSIGNED and MIGRATING the other way round): MIGRATING = Uuid(0, 0), the dir of a replica
#: whose record predates directory assignment; UNASSIGNED = Uuid(0, 1), a replica not yet placed in a dir;
#: LOST = Uuid(0, 2), an unspecified offline dir
MIGRATING_DIR = "AAAAAAAAAAAAAAAAAAAAAA"
UNASSIGNED_DIR = "AAAAAAAAAAAAAAAAAAAAAQ"
LOST_DIR = "AAAAAAAAAAAAAAAAAAAAAg"
RESERVED_DIRECTORY_IDS: Dict[str, str] = {UNASSIGNED_DIR: "UNASSIGNED", LOST_DIR: "LOST", MIGRATING_DIR: "MIGRATING"}
NO_LEADER_CHANGE = -2

_BEGIN, _END, _ABORT = 23, 24, 25
_CONFIG_RECORD = 4


def _name(table: Dict[int, str], value: int) -> str:
    return table.get(value, f"UNKNOWN({value})")


class ReplayFault(KstoreError):
    """A record that cannot apply to the image (what Kafka's loader hands its fault handler)."""


@dataclass
class FeaturesImage:
    """metadata.version (its feature level) and the other finalized feature levels."""

    metadata_version_level: int = DEFAULT_METADATA_VERSION
    finalized_versions: Dict[str, int] = field(default_factory=dict)
    zk_migration_state: str = "NONE"

    @property
    def metadata_version(self) -> str:
        return METADATA_VERSIONS.get(self.metadata_version_level, f"level {self.metadata_version_level}")


@dataclass
class ClusterImage:
    """Broker and controller registrations by id."""

    brokers: Dict[int, Dict[str, Any]] = field(default_factory=dict)
    controllers: Dict[int, Dict[str, Any]] = field(default_factory=dict)


@dataclass
class TopicsImage:
    """Topic id -> {"name", "id", "partitions": {partition: registration}}."""

    by_id: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    def get_topic(self, name: str) -> Optional[Dict[str, Any]]:
        for t in self.by_id.values():
            if t["name"] == name:
                return t
        return None


@dataclass
class ConfigurationsImage:
    """(resource type name, resource name) -> {key: value}; broker "" is the cluster default.

    ``set_at`` says where each value was last set: ``offset N`` of the log, or the snapshot file."""

    resource_data: Dict[Tuple[str, str], Dict[str, str]] = field(default_factory=dict)
    set_at: Dict[Tuple[str, str], Dict[str, str]] = field(default_factory=dict)


@dataclass
class ProducerIdsImage:
    next_producer_id: int = -1


@dataclass
class AclsImage:
    """ACL id -> entry."""

    acls: Dict[str, Dict[str, Any]] = field(default_factory=dict)


@dataclass
class ClientQuotasImage:
    """Entity (sorted (type, name) pairs; name None = the default entity) -> {key: value}."""

    entities: Dict[Tuple[Tuple[str, Optional[str]], ...], Dict[str, float]] = field(default_factory=dict)


@dataclass
class ScramImage:
    """Mechanism -> user names. The credentials (salt, stored key, server key) are never kept."""

    mechanisms: Dict[str, set] = field(default_factory=dict)


@dataclass
class DelegationTokenImage:
    """Token id -> owner. Nothing secret is kept."""

    tokens: Dict[str, str] = field(default_factory=dict)


@dataclass
class MetadataImage:
    """The cluster as of the end of what was replayed, in the parts Kafka's MetadataImage has."""

    features: FeaturesImage = field(default_factory=FeaturesImage)
    cluster: ClusterImage = field(default_factory=ClusterImage)
    topics: TopicsImage = field(default_factory=TopicsImage)
    configs: ConfigurationsImage = field(default_factory=ConfigurationsImage)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    acls: AclsImage = field(default_factory=AclsImage)
    client_quotas: ClientQuotasImage = field(default_factory=ClientQuotasImage)
    scram: ScramImage = field(default_factory=ScramImage)
    delegation_tokens: DelegationTokenImage = field(default_factory=DelegationTokenImage)


class MetadataDelta:
    """Applies metadata records to an image (``MetadataDelta.replay`` per record type)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def replay(self, api_key: int, values: Dict[str, Any]) -> None:
        handler = _HANDLERS.get(api_key)
        if handler is not None:
            handler(self.image, values)

    # -- FeaturesImage ---------------------------------------------------------------------------
    @staticmethod
    def _feature_level(img: MetadataImage, r: Dict[str, Any]) -> None:
        if r["Name"] == "metadata.version":
            img.features.metadata_version_level = r["FeatureLevel"]
        elif r["FeatureLevel"] == 0:
            img.features.finalized_versions.pop(r["Name"], None)  # level 0 removes a feature
        else:
            img.features.finalized_versions[r["Name"]] = r["FeatureLevel"]

    @staticmethod
    def _zk_migration(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.features.zk_migration_state = _name(ZK_MIGRATION_STATES, r["ZkMigrationState"])

    # -- ClusterImage ----------------------------------------------------------------------------
    @staticmethod
    def _register_broker(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.cluster.brokers[r["BrokerId"]] = {
            "id": r["BrokerId"], "epoch": r["BrokerEpoch"], "incarnation_id": r["IncarnationId"],
            "fenced": r["Fenced"], "in_controlled_shutdown": r["InControlledShutdown"], "rack": r["Rack"],
            "is_migrating_zk_broker": r["IsMigratingZkBroker"],
            "endpoints": _endpoints(r["EndPoints"]), "log_dirs": list(r["LogDirs"] or []),
            "supported_features": _features(r["Features"]),
        }

    @staticmethod
    def _unregister_broker(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.cluster.brokers.pop(r["BrokerId"], None)

    @staticmethod
    def _fence(img: MetadataImage, r: Dict[str, Any], fenced: bool) -> None:
        broker = _broker(img, r["Id"], r["Epoch"])
        broker["fenced"] = fenced

    @staticmethod
    def _broker_change(img: MetadataImage, r: Dict[str, Any]) -> None:
        broker = _broker(img, r["BrokerId"], r["BrokerEpoch"])
        # BrokerRegistrationFencingChange: 1 fence, -1 unfence, 0 none
        if r["Fenced"] == 1:
            broker["fenced"] = True
        elif r["Fenced"] == -1:
            broker["fenced"] = False
        elif r["Fenced"] != 0:
            raise ReplayFault(f"Invalid value for Fenced field: {r['Fenced']}")
        # BrokerRegistrationInControlledShutdownChange: 1 in controlled shutdown, 0 none
        if r["InControlledShutdown"] == 1:
            broker["in_controlled_shutdown"] = True
        elif r["InControlledShutdown"] != 0:
            raise ReplayFault(f"Invalid value for InControlledShutdown field: {r['InControlledShutdown']}")
        if r["LogDirs"]:
            broker["log_dirs"] = list(r["LogDirs"])

    @staticmethod
    def _register_controller(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.cluster.controllers[r["ControllerId"]] = {
            "id": r["ControllerId"], "incarnation_id": r["IncarnationId"],
            "zk_migration_ready": r["ZkMigrationReady"], "endpoints": _endpoints(r["EndPoints"]),
            "supported_features": _features(r["Features"]),
        }

    # -- TopicsImage / ConfigurationsImage -------------------------------------------------------
    @staticmethod
    def _topic(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.topics.by_id[r["TopicId"]] = {"name": r["Name"], "id": r["TopicId"], "partitions": {}}

    @staticmethod
    def _partition(img: MetadataImage, r: Dict[str, Any]) -> None:
        topic = _topic_or_fault(img, r["TopicId"], "PartitionRecord")
        replicas = list(r["Replicas"])
        _check_record_directories(r["Directories"], replicas)
        topic["partitions"][r["PartitionId"]] = {
            "partition": r["PartitionId"], "replicas": replicas, "isr": list(r["Isr"]), "leader": r["Leader"],
            "leaderEpoch": r["LeaderEpoch"], "partitionEpoch": r["PartitionEpoch"],
            "elr": list(r["EligibleLeaderReplicas"] or []), "lastKnownElr": list(r["LastKnownElr"] or []),
            "removingReplicas": list(r["RemovingReplicas"]), "addingReplicas": list(r["AddingReplicas"]),
            "leaderRecoveryState": _name(LEADER_RECOVERY_STATES, r["LeaderRecoveryState"]),
            "directories": _directories(r["Directories"], len(replicas)),
        }

    @staticmethod
    def _partition_change(img: MetadataImage, r: Dict[str, Any]) -> None:
        topic = _topic_or_fault(img, r["TopicId"], "PartitionChangeRecord")
        p = topic["partitions"].get(r["PartitionId"])
        if p is None:
            raise ReplayFault(f"PartitionChangeRecord for unknown partition {r['PartitionId']} of topic {r['TopicId']}")
        q = dict(p)
        for key, name in (("replicas", "Replicas"), ("isr", "Isr"), ("removingReplicas", "RemovingReplicas"),
                          ("addingReplicas", "AddingReplicas"), ("elr", "EligibleLeaderReplicas"),
                          ("lastKnownElr", "LastKnownElr")):
            if r[name] is not None:
                q[key] = list(r[name])
        _check_record_directories(r["Directories"], r["Replicas"])
        dirs = p["directories"] if r["Directories"] is None else r["Directories"]
        q["directories"] = _directories(dirs, len(q["replicas"]))
        if r["Leader"] != NO_LEADER_CHANGE:
            q["leader"] = r["Leader"]
            q["leaderEpoch"] = p["leaderEpoch"] + 1  # every leader field, even the same leader, bumps the epoch
        if r["LeaderRecoveryState"] != -1:
            q["leaderRecoveryState"] = _name(LEADER_RECOVERY_STATES, r["LeaderRecoveryState"])
        q["partitionEpoch"] = p["partitionEpoch"] + 1
        topic["partitions"][r["PartitionId"]] = q

    @staticmethod
    def _remove_topic(img: MetadataImage, r: Dict[str, Any]) -> None:
        topic = img.topics.by_id.pop(r["TopicId"], None)
        if topic is None:
            raise ReplayFault(f"Failed to find topic with id {r['TopicId']} to remove")
        img.configs.resource_data.pop(("TOPIC", topic["name"]), None)  # a removed topic takes its configs along
        img.configs.set_at.pop(("TOPIC", topic["name"]), None)

    @staticmethod
    def _config(img: MetadataImage, r: Dict[str, Any]) -> None:
        resource = (_name(CONFIG_RESOURCE_TYPES, r["ResourceType"]), r["ResourceName"])
        data = img.configs.resource_data.setdefault(resource, {})
        if r["Value"] is None:
            data.pop(r["Name"], None)
        else:
            data[r["Name"]] = r["Value"]
        if not data:
            del img.configs.resource_data[resource]

    # -- the rest --------------------------------------------------------------------------------
    @staticmethod
    def _producer_ids(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.producer_ids.next_producer_id = r["NextProducerId"]

    @staticmethod
    def _acl(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.acls.acls[r["Id"]] = {
            "id": r["Id"], "resource_type": _name(ACL_RESOURCE_TYPES, r["ResourceType"]),
            "resource_name": r["ResourceName"], "pattern_type": _name(ACL_PATTERN_TYPES, r["PatternType"]),
            "principal": r["Principal"], "host": r["Host"], "operation": _name(ACL_OPERATIONS, r["Operation"]),
            "permission_type": _name(ACL_PERMISSIONS, r["PermissionType"]),
        }

    @staticmethod
    def _remove_acl(img: MetadataImage, r: Dict[str, Any]) -> None:
        if img.acls.acls.pop(r["Id"], None) is None:
            raise ReplayFault(f"Failed to find ACL with id {r['Id']} to remove")

    @staticmethod
    def _client_quota(img: MetadataImage, r: Dict[str, Any]) -> None:
        entity = tuple(sorted((e["EntityType"], e["EntityName"]) for e in r["Entity"]))
        quotas = img.client_quotas.entities.setdefault(entity, {})
        if r["Remove"]:
            quotas.pop(r["Key"], None)
        else:
            quotas[r["Key"]] = r["Value"]
        if not quotas:
            del img.client_quotas.entities[entity]

    @staticmethod
    def _scram(img: MetadataImage, r: Dict[str, Any], remove: bool) -> None:
        users = img.scram.mechanisms.setdefault(_name(SCRAM_MECHANISMS, r["Mechanism"]), set())
        if remove:
            users.discard(r["Name"])
        else:
            users.add(r["Name"])  # salt, stored key, server key and iterations are dropped here

    @staticmethod
    def _token(img: MetadataImage, r: Dict[str, Any], remove: bool) -> None:
        if remove:
            img.delegation_tokens.tokens.pop(r["TokenId"], None)
        else:
            img.delegation_tokens.tokens[r["TokenId"]] = r["Owner"]


def _broker(img: MetadataImage, broker_id: int, epoch: int) -> Dict[str, Any]:
    broker = img.cluster.brokers.get(broker_id)
    if broker is None or broker["epoch"] != epoch:
        raise ReplayFault(f"no broker {broker_id} with epoch {epoch} registered")
    return broker


def _topic_or_fault(img: MetadataImage, topic_id: str, what: str) -> Dict[str, Any]:
    topic = img.topics.by_id.get(topic_id)
    if topic is None:
        raise ReplayFault(f"{what} for unknown topic id {topic_id}")
    return topic


def directory_label(directory: str) -> str:
    """A replica's directory id as printed: the name of a reserved id (``MIGRATING``), else the id."""
    return RESERVED_DIRECTORY_IDS.get(directory, directory)


def _check_record_directories(dirs: Optional[List[str]], replicas: Optional[List[int]]) -> None:
    """PartitionRegistration.checkDirectories: a record that carries both replicas and directories must
    carry as many of each (before any defaulting to MIGRATING)."""
    if replicas is not None and dirs and len(dirs) != len(replicas):
        raise ReplayFault("InvalidReplicaDirectoriesException: the record's replicas and directories differ in "
                          f"length ({len(replicas)} and {len(dirs)})")


def _directories(dirs: Optional[List[str]], replicas: int) -> List[str]:
    # PartitionRegistration.defaultToMigrating: none, or only MIGRATING ones (any count) = every replica MIGRATING
    out = [MIGRATING_DIR] * replicas if all(d == MIGRATING_DIR for d in dirs or []) else list(dirs or [])
    if len(out) != replicas:
        raise ReplayFault("The lengths for replicas and directories do not match.")
    return out


def _endpoints(endpoints: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return sorted(({"listener": e["Name"], "security_protocol": _name(SECURITY_PROTOCOLS, e["SecurityProtocol"]),
                    "host": e["Host"], "port": e["Port"]} for e in endpoints), key=lambda e: e["listener"])


def _features(features: List[Dict[str, Any]]) -> Dict[str, List[int]]:
    return {f["Name"]: [f["MinSupportedVersion"], f["MaxSupportedVersion"]]
            for f in sorted(features, key=lambda f: f["Name"])}


_HANDLERS = {
    0: MetadataDelta._register_broker,
    1: MetadataDelta._unregister_broker,
    2: MetadataDelta._topic,
    3: MetadataDelta._partition,
    4: MetadataDelta._config,
    5: MetadataDelta._partition_change,
    7: lambda img, r: MetadataDelta._fence(img, r, True),
    8: lambda img, r: MetadataDelta._fence(img, r, False),
    9: MetadataDelta._remove_topic,
    10: lambda img, r: MetadataDelta._token(img, r, False),
    11: lambda img, r: MetadataDelta._scram(img, r, False),
    12: MetadataDelta._feature_level,
    14: MetadataDelta._client_quota,
    15: MetadataDelta._producer_ids,
    17: MetadataDelta._broker_change,
    18: MetadataDelta._acl,
    19: MetadataDelta._remove_acl,
    21: MetadataDelta._zk_migration,
    22: lambda img, r: MetadataDelta._scram(img, r, True),
    26: lambda img, r: MetadataDelta._token(img, r, True),
    27: MetadataDelta._register_controller,
}


# ------------------------------------------------------------------------------------------------
# Reading the metadata log


@dataclass
class MetadataRecord:
    """One metadata record as read from disk."""

    offset: int
    api_key: int
    version: int
    values: Dict[str, Any]


class NewerRecordError(KstoreError):
    """A record type or version this kstore (Kafka 4.0's schemas) does not know: the read stops there."""


def decode_record(value: Optional[bytes], path: str, position: int, offset: int) -> Tuple[int, int, Dict[str, Any]]:
    """(api key, version, values) of a metadata record value (``MetadataRecordSerde.read``).

    Raises NewerRecordError for an unknown type or a version newer than the schemas, CorruptDataError
    for bytes that do not parse.
    """
    if value is None:
        raise CorruptDataError(f"metadata record at offset {offset} has a null value", path=path, position=position)
    r = WireReader(value)
    try:
        frame = r.unsigned_varint()
        api_key = r.unsigned_varint()
        version = r.unsigned_varint()
    except JavaError:
        raise CorruptDataError(f"metadata record at offset {offset}: expected a frame header, found "
                               f"{len(value)} byte(s)", path=path, position=position) from None
    if frame != 1:
        raise CorruptDataError(f"metadata record at offset {offset}: expected frame version 1, found {frame}",
                               path=path, position=position)
    t = METADATA_RECORD_TYPES.get(api_key)
    if t is None:
        raise NewerRecordError(f"metadata record at offset {offset} has type {api_key}, unknown to this kstore "
                               f"(a newer Kafka wrote it)", path=path, position=position)
    newer = version > t.message.valid.hi
    try:
        # a newer version is read with the fields this version of the schema knows, as Kafka 4.0's generated
        # readers do (the caller reports it)
        values = read_message(t.message, r, version)
    except JavaError as e:
        if newer:
            raise NewerRecordError(f"metadata record at offset {offset}: {t.message.name} version {version} is "
                                   f"newer than this kstore knows (up to {t.message.valid.hi}) and does not read "
                                   f"as one: {e.text}", path=path, position=position) from None
        raise CorruptDataError(f"metadata record at offset {offset}: {t.message.name} v{version} does not parse: "
                               f"{e.text}", path=path, position=position) from None
    if r.remaining():
        if newer:
            raise NewerRecordError(f"metadata record at offset {offset}: {t.message.name} version {version} is "
                                   f"newer than this kstore knows (up to {t.message.valid.hi}): {r.remaining()} "
                                   f"byte(s) it cannot read", path=path, position=position)
        raise CorruptDataError(f"metadata record at offset {offset}: {r.remaining()} byte(s) after the "
                               f"{t.message.name}", path=path, position=position)
    return api_key, version, values


@dataclass
class FileBatch:
    """A batch of a metadata log or snapshot file: its offsets, max timestamp, control types, records."""

    path: str
    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    control: List[str]
    records: List[MetadataRecord]


@dataclass
class LogCut:
    """Where Kafka's recovery cuts the metadata log. ``KafkaMetadataLog`` opens it with recovery point 0 as
    after an unclean shutdown, so every start runs ``LogSegment.recover`` over every segment: the .log is
    truncated at the first batch that is incomplete or fails its checks and the later segments are deleted.
    kstore reads the log as that leaves it and changes nothing on disk."""

    path: str
    position: int
    #: the bytes from `position` to the end of the file
    size: int
    what: str
    #: the segments after this one (Kafka deletes them)
    later: List[str] = field(default_factory=list)
    #: a torn tail: in the last segment, and no whole batch continuing the log after it (a write cut short,
    #: the normal state after a crash), as opposed to damage with intact batches after it
    torn: bool = False

    def describe(self) -> str:
        where = f"{self.path} at byte {self.position}: {self.what}"
        if self.torn:
            return (f"{where}: a torn tail ({self.size} byte(s)); the image is the log without it, as Kafka's "
                    f"recovery loads it (the broker cuts it at its next start; kstore left the file as it is)")
        lost = f"{self.size} byte(s)" + (f" and the {len(self.later)} later segment(s)" if self.later else "")
        return (f"{where}: damage, not a torn write (the log goes on after it); the image stops there, where "
                f"Kafka's recovery cuts the log and deletes {lost} at the broker's next start")


def read_file_batches(path: str, skip_below: int = -1, cuts: Optional[List[LogCut]] = None
                      ) -> Iterator[FileBatch]:
    """The batches of a metadata segment or snapshot file, CRCs checked; records decoded lazily per batch.

    A damaged batch raises CorruptDataError naming the file and byte; a NewerRecordError stops the read.
    Trailing bytes that are not a whole batch raise CorruptDataError too. With `cuts` (a log segment), the
    read stops instead where Kafka's recovery would cut (LogSegment.recover: a CorruptRecordException or an
    incomplete batch) and a :class:`LogCut` is appended to `cuts`.
    Batches that end below ``skip_below`` (covered by a snapshot) are checked but their records not decoded.
    """
    end = 0
    size = os.path.getsize(path)
    batches = read_batches(path, check_crc=True)
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                break
            batch.ensure_valid()
        except CorruptRecordError as e:
            if cuts is None:
                raise
            cuts.append(LogCut(path, end, size - end, e.message))
            return
        if batch.magic != 2:
            raise CorruptDataError(f"expected a magic 2 batch in a metadata log, found magic {batch.magic}",
                                   path=path, position=batch.position)
        control: List[str] = []
        records: List[MetadataRecord] = []
        for rec in (batch.records() if batch.last_offset >= skip_below else ()):
            if batch.is_control:
                _version, type_id = parse_control_key(rec.key)
                control.append(control_type_name(type_id))
                continue
            api_key, version, values = decode_record(rec.value, path, batch.position, rec.offset)
            records.append(MetadataRecord(rec.offset, api_key, version, values))
        end = batch.position + batch.size
        yield FileBatch(path, batch.position, batch.base_offset, batch.last_offset, batch.max_timestamp,
                        control, records)
    if end < size:
        what = f"expected a complete batch, found {size - end} trailing byte(s)"
        if cuts is None:
            raise CorruptDataError(f"{what} (a torn write; Kafka's recovery cuts them)", path=path, position=end)
        cuts.append(LogCut(path, end, size - end, what))


# ------------------------------------------------------------------------------------------------
# Finding and loading


@dataclass
class MetadataSource:
    """Where the image came from: the metadata dir, its snapshot and segments."""

    metadata_dir: Optional[str]
    checkpoint: Optional[str] = None  # a snapshot file given on its own
    meta_properties: Dict[str, str] = field(default_factory=dict)
    #: ``bootstrap.checkpoint`` (BootstrapDirectory keeps it in the metadata log dir, next to
    #: ``__cluster_metadata-0``; one inside that dir is taken too)
    bootstrap: Optional[str] = None


def _read_properties(path: str) -> Dict[str, str]:
    props: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith(("#", "!")) and "=" in line:
                    k, v = line.split("=", 1)
                    props[k.strip()] = v.strip()
    except OSError as e:
        raise FileUnreadableError(f"could not read: {e.strerror}", path=path) from None
    return props


def find_metadata(paths: List[str]) -> MetadataSource:
    """The metadata log among ``paths`` (data dirs, the ``__cluster_metadata-0`` dir, or a ``.checkpoint``)."""
    found: List[str] = []
    checkpoint = None
    bootstrap = None
    props: Dict[str, str] = {}
    for p in paths:
        if os.path.isfile(p) and p.endswith(".checkpoint"):
            checkpoint = p
            continue
        if not os.path.exists(p):
            raise FileUnreadableError("no such file or directory", path=p)
        if not os.path.isdir(p):
            raise UsageError(f"expected a data dir, a {METADATA_PARTITION_DIR} dir or a .checkpoint file", path=p)
        if os.path.basename(os.path.normpath(p)) == METADATA_PARTITION_DIR:
            found.append(p)
            data_dir = os.path.dirname(os.path.abspath(p))
        else:
            data_dir = p
            if os.path.isdir(os.path.join(p, METADATA_PARTITION_DIR)):
                found.append(os.path.join(p, METADATA_PARTITION_DIR))
        for where in (data_dir, os.path.join(data_dir, METADATA_PARTITION_DIR)):
            if bootstrap is None and os.path.isfile(os.path.join(where, BOOTSTRAP_CHECKPOINT)):
                bootstrap = os.path.join(where, BOOTSTRAP_CHECKPOINT)
        meta = os.path.join(data_dir, "meta.properties")
        if os.path.isfile(meta):
            props = props or _read_properties(meta)
    if len(found) > 1:
        raise UsageError(f"more than one {METADATA_PARTITION_DIR} ({', '.join(found)}): name one")
    if not found and checkpoint is None and bootstrap is None:
        raise UsageError(f"no {METADATA_PARTITION_DIR} in {', '.join(paths)} (a KRaft node's metadata log dir holds it)")
    if found and checkpoint is not None:
        raise UsageError("give either a metadata dir or a .checkpoint file, not both")
    return MetadataSource(found[0] if found else None, checkpoint, props, bootstrap)


@dataclass
class LoadResult:
    """The image and how it was made."""

    image: MetadataImage
    source: Dict[str, Any]
    #: things that did not apply or were not read: each also makes the exit status 1
    problems: List[str]
    #: facts worth a line (an open transaction left out, bootstrap used...)
    notes: List[str]
    #: what Kafka's loader gets past on its own but the reader should know (a torn tail cut)
    warnings: List[str] = field(default_factory=list)


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError as e:
        raise FileUnreadableError(f"could not list: {e.strerror}", path=path) from None


def _snapshots(metadata_dir: str) -> List[Tuple[int, int, str]]:
    out = []
    for name in _listdir(metadata_dir):
        m = _SNAPSHOT_NAME.match(name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), os.path.join(metadata_dir, name)))
    return sorted(out)


def _segments(metadata_dir: str) -> List[Tuple[int, str]]:
    return sorted((int(m.group(1)), os.path.join(metadata_dir, n))
                  for n in _listdir(metadata_dir) if (m := _SEGMENT_NAME.match(n)))


def _log_batches(segments: List[Tuple[int, str]], skip_below: int = -1,
                 cuts: Optional[List[LogCut]] = None) -> Iterator[FileBatch]:
    """The log's batches as Kafka's recovery leaves them: up to the first batch that is incomplete or fails
    its checks (its :class:`LogCut` appended to `cuts`); the later segments are not read (Kafka deletes them)."""
    cuts = [] if cuts is None else cuts
    last = segments[0][0] - 1 if segments else -1
    for i, (_base, path) in enumerate(segments):
        for b in read_file_batches(path, skip_below, cuts):
            last = b.last_offset
            yield b
        if cuts:
            cut = cuts[-1]
            cut.later = [p for _b, p in segments[i + 1:]]
            cut.torn = is_torn_tail(path, cut.position, last, last_segment=not cut.later)
            return


def is_torn_tail(path: str, position: int, after: int, *, last_segment: bool) -> bool:
    """Whether the metadata log's valid data ending at `position` of segment `path` (the last offset before it
    `after`) is a torn tail: in the last segment, with no whole batch continuing the log after it (salvage's
    resync scan finds none). Otherwise intact batches follow: damage, not a write cut short by a crash."""
    return last_segment and next_intact_batch(path, position + 1, after) is None


class _Loader:
    """MetadataBatchLoader: applies records, buffering those of an open metadata transaction."""

    def __init__(self, image: MetadataImage, problems: List[str]) -> None:
        self.delta = MetadataDelta(image)
        self.image = image
        self.problems = problems
        self.txn: Optional[List[MetadataRecord]] = None
        self.txn_start: Optional[int] = None
        self.aborted = 0
        #: The snapshot file being replayed (its records' offsets are not the log's), or None.
        self.snapshot: Optional[str] = None

    def _apply(self, rec: MetadataRecord) -> None:
        try:
            self.delta.replay(rec.api_key, rec.values)
        except ReplayFault as e:
            self.problems.append(f"record at offset {rec.offset} does not apply: {e.message}")
            return
        if rec.api_key == _CONFIG_RECORD:
            resource = (_name(CONFIG_RESOURCE_TYPES, rec.values["ResourceType"]), rec.values["ResourceName"])
            where = self.image.configs.set_at.setdefault(resource, {})
            if rec.values["Value"] is None:
                where.pop(rec.values["Name"], None)
            else:
                where[rec.values["Name"]] = (f"snapshot {self.snapshot}" if self.snapshot is not None
                                             else f"offset {rec.offset}")
            if not where:
                del self.image.configs.set_at[resource]

    def load(self, rec: MetadataRecord) -> None:
        if rec.api_key == _BEGIN:
            if self.txn is not None:
                self.problems.append(f"BeginTransaction at offset {rec.offset} inside the transaction begun at "
                                     f"{self.txn_start}")
            self.txn, self.txn_start = [], rec.offset
        elif rec.api_key == _END:
            if self.txn is None:
                self.problems.append(f"EndTransaction at offset {rec.offset} without a transaction")
            else:
                for r in self.txn:
                    self._apply(r)
            self.txn = self.txn_start = None
        elif rec.api_key == _ABORT:
            if self.txn is None:
                self.problems.append(f"AbortTransaction at offset {rec.offset} without a transaction")
            else:
                self.aborted += 1
            self.txn = self.txn_start = None
        elif self.txn is not None:
            self.txn.append(rec)
        else:
            self._apply(rec)


def load_image(src: MetadataSource, *, as_of_offset: Optional[int] = None,
               as_of_time: Optional[int] = None) -> LoadResult:
    """Replay the metadata log into an image, as of the end or of an end offset / a time (ms)."""
    problems: List[str] = []
    notes: List[str] = []
    # the cluster id lives in meta.properties, not in the metadata log
    source: Dict[str, Any] = {"metadata_dir": src.metadata_dir, "cluster_id": src.meta_properties.get("cluster.id"),
                              "meta_properties": src.meta_properties}
    image = MetadataImage()
    loader = _Loader(image, problems)
    newer: Dict[Tuple[str, int], List[int]] = {}  # (record, version) -> [first offset, count]

    def seen(rec: MetadataRecord, where: str) -> None:
        msg = METADATA_RECORD_TYPES[rec.api_key].message
        if rec.version > msg.valid.hi or rec.version < msg.valid.lo:
            hit = newer.setdefault((f"{msg.name} in {where}", rec.version), [rec.offset, 0])
            hit[1] += 1
    snapshots, segments = _snapshots_and_segments(src)
    source["snapshots"] = [os.path.basename(s[2]) for s in snapshots]
    source["segments"] = [os.path.basename(s[1]) for s in segments]
    if as_of_time is not None:
        as_of_offset = _end_offset_at_time(segments, as_of_time)
    chosen = [s for s in snapshots if src.checkpoint is not None or as_of_offset is None or s[0] <= as_of_offset]
    snapshot = chosen[-1] if chosen else None
    start = 0
    last_offset = -1
    records_read = 0
    if snapshot is not None:
        records_read = _load_snapshot(loader, snapshot[2], seen)
        start = snapshot[0]
        last_offset = snapshot[0] - 1
        source["snapshot"] = os.path.basename(snapshot[2])
    else:
        source["snapshot"] = None
        if segments and segments[0][0] > 0:
            problems.append(f"no snapshot at or before the end offset, and the log starts at {segments[0][0]}: "
                            f"the records before it are missing from the image")
    cuts: List[LogCut] = []
    batches, log_records, last_offset, stopped = _replay_log(loader, segments, start, as_of_offset, last_offset,
                                                             seen, cuts)
    if stopped is not None:
        problems.append(f"read stopped: {stopped} (the image is as of offset {last_offset + 1})")
    warnings: List[str] = []
    for cut in cuts:
        # A torn tail is how a crash leaves the log: the broker starts fine. Damage followed by intact
        # batches costs committed records: a problem.
        if cut.torn:
            warnings.append(cut.describe())
        else:
            problems.append(f"{cut.describe()} (the image is as of offset {last_offset + 1})")
    if snapshot is None and log_records == 0 and src.checkpoint is None and src.bootstrap is not None:
        loader.snapshot = os.path.basename(src.bootstrap)
        for b in read_file_batches(src.bootstrap):
            for rec in b.records:
                loader._apply(rec)
                records_read += 1
        notes.append(f"no snapshot and no log records: the image is {src.bootstrap}'s")
        source["bootstrap"] = src.bootstrap
    problems.extend(_newer_version_problems(newer))
    if loader.txn is not None:
        notes.append(f"a metadata transaction begun at offset {loader.txn_start} is not finished: its "
                     f"{len(loader.txn)} record(s) are not in the image (as in Kafka)")
    if loader.aborted:
        notes.append(f"{loader.aborted} aborted metadata transaction(s) left out")
    if image.features.metadata_version_level not in METADATA_VERSIONS:
        problems.append(f"metadata.version feature level {image.features.metadata_version_level} is newer than this "
                        f"kstore knows (up to {max(METADATA_VERSIONS)})")
    source.update({"snapshot_records": records_read, "log_batches": batches, "log_records": log_records,
                   "as_of_offset": as_of_offset, "as_of_time": as_of_time, "end_offset": last_offset + 1,
                   "open_transaction_start": loader.txn_start, "stopped": stopped,
                   "cut": None if not cuts else {"file": cuts[0].path, "position": cuts[0].position,
                                                 "bytes": cuts[0].size, "torn": cuts[0].torn,
                                                 "later_segments": cuts[0].later, "what": cuts[0].what}})
    return LoadResult(image, source, problems, notes, warnings)


def _snapshots_and_segments(src: MetadataSource) -> Tuple[List[Tuple[int, int, str]], List[Tuple[int, str]]]:
    """The snapshots (end offset, epoch, path) and log segments (base offset, path) to load from: a
    checkpoint file given alone, else the metadata dir's."""
    if src.checkpoint is not None:
        snapshots = [(0, 0, src.checkpoint)]
        m = _SNAPSHOT_NAME.match(os.path.basename(src.checkpoint))
        if m:
            snapshots = [(int(m.group(1)), int(m.group(2)), src.checkpoint)]
        return snapshots, []
    if src.metadata_dir is not None:
        return _snapshots(src.metadata_dir), _segments(src.metadata_dir)
    return [], []


def _end_offset_at_time(segments: List[Tuple[int, str]], as_of_time: int) -> Optional[int]:
    """The end offset as of a time: the first log batch with a later timestamp (None: the log's end)."""
    for b in _log_batches(segments, 1 << 62):  # timestamps only
        if b.max_timestamp > as_of_time:
            return b.base_offset
    return None


def _load_snapshot(loader: "_Loader", path: str, seen: Callable[[MetadataRecord, str], None]) -> int:
    """Every record of a snapshot (MetadataLoader's snapshot load); the number of records read."""
    loader.snapshot = os.path.basename(path)
    records_read = 0
    for b in read_file_batches(path):
        for rec in b.records:
            seen(rec, os.path.basename(path))
            loader._apply(rec)  # a snapshot holds no transactions: every record applies
            records_read += 1
    loader.snapshot = None
    return records_read


def _replay_log(loader: "_Loader", segments: List[Tuple[int, str]], start: int, as_of_offset: Optional[int],
                last_offset: int, seen: Callable[[MetadataRecord, str], None], cuts: List[LogCut]
                ) -> Tuple[int, int, int, Optional[str]]:
    """The log's records from `start` up to the end offset (MetadataLoader's log replay): batches and records
    read, the last offset applied, and why the read stopped early (a record newer than kstore knows). Where
    Kafka's recovery cuts the log is appended to `cuts`."""
    log_records = 0
    batches = 0
    try:
        for b in _log_batches(segments, start, cuts):
            if as_of_offset is not None and b.last_offset >= as_of_offset:
                break
            if b.last_offset < start:
                continue
            batches += 1
            for rec in b.records:
                if rec.offset < start:
                    continue
                seen(rec, "the log")
                loader.load(rec)
                log_records += 1
            last_offset = b.last_offset
    except NewerRecordError as e:
        return batches, log_records, last_offset, str(e)
    return batches, log_records, last_offset, None


def _newer_version_problems(newer: Dict[Tuple[str, int], List[int]]) -> List[str]:
    return [f"{count} {what.split(' in ')[0]} record(s) of version {version} in "
            f"{what.split(' in ', 1)[1]} (first at offset {first}) "
            + ("are newer than this kstore knows: read with the fields it knows, as Kafka 4.0 reads them; what the "
               "newer version adds is not in the image" if version >= 0 else
               "(an unsigned varint over 0x7FFFFFFF, which Kafka reads as a negative int): read as the lowest "
               "version, as Kafka 4.0's generated reader reads them")
            for (what, version), (first, count) in sorted(newer.items())]


# ------------------------------------------------------------------------------------------------
# Views of the image


def image_json(image: MetadataImage) -> List[Dict[str, Any]]:
    """The image as JSON objects (one per entity), in the oracle's ``metadata-image`` field names."""
    out: List[Dict[str, Any]] = [{
        "type": "features", "metadata_version": image.features.metadata_version,
        "metadata_version_level": image.features.metadata_version_level,
        "finalized_versions": dict(sorted(image.features.finalized_versions.items())),
        "zk_migration_state": image.features.zk_migration_state,
    }]
    for _id, b in sorted(image.cluster.brokers.items()):
        out.append({"type": "broker", **b})
    for _id, c in sorted(image.cluster.controllers.items()):
        out.append({"type": "controller", **c})
    for t in sorted(image.topics.by_id.values(), key=lambda t: t["name"]):
        out.append({"type": "topic", "name": t["name"], "id": t["id"],
                    "partitions": [p for _n, p in sorted(t["partitions"].items())]})
    for (rtype, name), data in sorted(image.configs.resource_data.items()):
        out.append({"type": "config", "resource_type": rtype, "name": name, "configs": dict(sorted(data.items()))})
    out.append({"type": "producer_ids", "next_producer_id": image.producer_ids.next_producer_id})
    for _id, a in sorted(image.acls.acls.items()):
        out.append({"type": "acl", **a})
    for entity, quotas in sorted(image.client_quotas.entities.items(), key=lambda e: str(e[0])):
        out.append({"type": "client_quota", "entity": {k: v for k, v in entity},
                    "quotas": dict(sorted(quotas.items()))})
    for mech, users in sorted(image.scram.mechanisms.items()):
        for user in sorted(users):
            out.append({"type": "scram_user", "mechanism": mech, "name": user})
    for token_id, owner in sorted(image.delegation_tokens.tokens.items()):
        out.append({"type": "delegation_token", "id": token_id, "owner": owner})
    return out
