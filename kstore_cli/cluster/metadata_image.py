"""The cluster as a KRaft controller sees it: the metadata image ``__cluster_metadata-0`` replays into.

The image holds the parts Kafka's ``MetadataImage`` holds: FeaturesImage, ClusterImage, TopicsImage,
ConfigurationsImage, ProducerIdsImage, AclsImage, ClientQuotasImage, ScramImage and DelegationTokenImage.
SCRAM credentials and delegation tokens are kept by name only: their salts, keys and HMACs are never stored
here, so no output can carry them. :mod:`kstore_cli.cluster.metadata_delta` applies records to it and
:mod:`kstore_cli.cluster.metadata_loader` replays the metadata log (Kafka's MetadataLoader).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from kstore_cli.parsers.metadata_versions import METADATA_VERSIONS
from kstore_cli.record.resync import next_intact_batch

#: the image's metadata.version before any FeatureLevelRecord (``MetadataVersion.MINIMUM_KRAFT_VERSION``)
DEFAULT_METADATA_VERSION = 1
#: Kafka's reserved directory ids (``org.apache.kafka.common.DirectoryId``, as the Kafka of the oracle defines them;
#: early 3.7 code had UNASSIGNED and MIGRATING the other way round): MIGRATING = Uuid(0, 0), the dir of a replica
#: whose record predates directory assignment; UNASSIGNED = Uuid(0, 1), a replica not yet placed in a dir;
#: LOST = Uuid(0, 2), an unspecified offline dir
MIGRATING_DIR = "AAAAAAAAAAAAAAAAAAAAAA"
UNASSIGNED_DIR = "AAAAAAAAAAAAAAAAAAAAAQ"
LOST_DIR = "AAAAAAAAAAAAAAAAAAAAAg"
RESERVED_DIRECTORY_IDS: Dict[str, str] = {UNASSIGNED_DIR: "UNASSIGNED", LOST_DIR: "LOST", MIGRATING_DIR: "MIGRATING"}


@dataclass
class FeaturesImage:
    """metadata.version (its feature level) and the other finalized feature levels."""

    metadata_version_level: int = DEFAULT_METADATA_VERSION
    finalized_versions: Dict[str, int] = field(default_factory=dict)
    zk_migration_state: str = "NONE"

    @property
    def metadata_version(self) -> str:
        """Its name (``4.1-IV0``); "unknown to kstore" for a level newer than kstore's table."""
        return METADATA_VERSIONS.get(self.metadata_version_level, "unknown to kstore")


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


def directory_label(directory: str) -> str:
    """A replica's directory id as printed: the name of a reserved id (``MIGRATING``), else the id."""
    return RESERVED_DIRECTORY_IDS.get(directory, directory)


def is_torn_tail(path: str, position: int, after: int, *, last_segment: bool) -> bool:
    """Whether the metadata log's valid data ending at `position` of segment `path` (the last offset before it
    `after`) is a torn tail: in the last segment, with no whole batch continuing the log after it (salvage's
    resync scan finds none). Otherwise intact batches follow: damage, not a write cut short by a crash."""
    return last_segment and next_intact_batch(path, position + 1, after) is None


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
