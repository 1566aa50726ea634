"""Metadata records applied to a metadata image: Kafka's ``MetadataDelta`` and its deltas per area.

``MetadataDelta.replay`` hands each record type to the delta of the image part it changes (FeaturesDelta,
ClusterDelta, TopicsDelta, ConfigurationsDelta, ...), which applies it in place. A record that cannot apply
raises :class:`ReplayFault`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

from kstore_cli.cluster.metadata_image import MIGRATING_DIR, MetadataImage
from kstore_cli.errors import KstoreError

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
NO_LEADER_CHANGE = -2


def _name(table: Dict[int, str], value: int) -> str:
    return table.get(value, f"UNKNOWN({value})")


class ReplayFault(KstoreError):
    """A record that cannot apply to the image (what Kafka's loader hands its fault handler)."""


def config_resource(r: Dict[str, Any]) -> Tuple[str, str]:
    """(resource type name, resource name) of a ConfigRecord."""
    return _name(CONFIG_RESOURCE_TYPES, r["ResourceType"]), r["ResourceName"]


class FeaturesDelta:
    """FeatureLevelRecord and ZkMigrationStateRecord: the FeaturesImage."""

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


class ClusterDelta:
    """Broker and controller registrations and their changes: the ClusterImage."""

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


class TopicsDelta:
    """Topics and their partitions: the TopicsImage (a removed topic takes its configs along)."""

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
    def _clear_elr(img: MetadataImage, r: Dict[str, Any]) -> None:
        """ClearElrRecord (Kafka 4.0+, TopicsDelta.replay / TopicDelta.maybeClearElr): the ELR and last known
        ELR of every partition of the named topic (of every topic when the name is empty) emptied, as a
        PartitionChangeRecord that sets only them would (the partition epoch bumped), where either is not empty."""
        if r["TopicName"]:
            topics = [t for t in img.topics.by_id.values() if t["name"] == r["TopicName"]]
            if not topics:
                raise ReplayFault(f"Unable to clear elr for topic with name {r['TopicName']}: no such topic found.")
        else:
            topics = list(img.topics.by_id.values())
        for topic in topics:
            for pid, p in list(topic["partitions"].items()):
                if p["elr"] or p["lastKnownElr"]:
                    topic["partitions"][pid] = {**p, "elr": [], "lastKnownElr": [],
                                                "partitionEpoch": p["partitionEpoch"] + 1}

    @staticmethod
    def _remove_topic(img: MetadataImage, r: Dict[str, Any]) -> None:
        topic = img.topics.by_id.pop(r["TopicId"], None)
        if topic is None:
            raise ReplayFault(f"Failed to find topic with id {r['TopicId']} to remove")
        img.configs.resource_data.pop(("TOPIC", topic["name"]), None)  # a removed topic takes its configs along
        img.configs.set_at.pop(("TOPIC", topic["name"]), None)


class ConfigurationsDelta:
    """ConfigRecord: the ConfigurationsImage."""

    @staticmethod
    def _config(img: MetadataImage, r: Dict[str, Any]) -> None:
        resource = config_resource(r)
        data = img.configs.resource_data.setdefault(resource, {})
        if r["Value"] is None:
            data.pop(r["Name"], None)
        else:
            data[r["Name"]] = r["Value"]
        if not data:
            del img.configs.resource_data[resource]


class ProducerIdsDelta:
    """ProducerIdsRecord: the ProducerIdsImage."""

    @staticmethod
    def _producer_ids(img: MetadataImage, r: Dict[str, Any]) -> None:
        img.producer_ids.next_producer_id = r["NextProducerId"]


class AclsDelta:
    """AccessControlEntryRecord and RemoveAccessControlEntryRecord: the AclsImage."""

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


class ClientQuotasDelta:
    """ClientQuotaRecord: the ClientQuotasImage."""

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


class ScramDelta:
    """UserScramCredentialRecord and its removal: the ScramImage (user names only)."""

    @staticmethod
    def _scram(img: MetadataImage, r: Dict[str, Any], remove: bool) -> None:
        users = img.scram.mechanisms.setdefault(_name(SCRAM_MECHANISMS, r["Mechanism"]), set())
        if remove:
            users.discard(r["Name"])
        else:
            users.add(r["Name"])  # salt, stored key, server key and iterations are dropped here


class DelegationTokenDelta:
    """DelegationTokenRecord and its removal: the DelegationTokenImage (owners only)."""

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


_HANDLERS: Dict[int, Callable[[MetadataImage, Dict[str, Any]], None]] = {
    0: ClusterDelta._register_broker,
    1: ClusterDelta._unregister_broker,
    2: TopicsDelta._topic,
    3: TopicsDelta._partition,
    4: ConfigurationsDelta._config,
    5: TopicsDelta._partition_change,
    7: lambda img, r: ClusterDelta._fence(img, r, True),
    8: lambda img, r: ClusterDelta._fence(img, r, False),
    9: TopicsDelta._remove_topic,
    10: lambda img, r: DelegationTokenDelta._token(img, r, False),
    11: lambda img, r: ScramDelta._scram(img, r, False),
    12: FeaturesDelta._feature_level,
    14: ClientQuotasDelta._client_quota,
    15: ProducerIdsDelta._producer_ids,
    17: ClusterDelta._broker_change,
    18: AclsDelta._acl,
    19: AclsDelta._remove_acl,
    21: FeaturesDelta._zk_migration,
    22: lambda img, r: ScramDelta._scram(img, r, True),
    26: lambda img, r: DelegationTokenDelta._token(img, r, True),
    27: ClusterDelta._register_controller,
    28: TopicsDelta._clear_elr,
}


class MetadataDelta:
    """Applies metadata records to an image (``MetadataDelta.replay`` per record type)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def replay(self, api_key: int, values: Dict[str, Any]) -> None:
        handler = _HANDLERS.get(api_key)
        if handler is not None:
            handler(self.image, values)
