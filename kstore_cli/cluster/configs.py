"""Topic configs from the cluster itself: the dynamic configs of the KRaft metadata log found in the data dirs
(ConfigRecords of topics and brokers), and the resolver that puts them in Kafka's order
(:class:`kstore_cli.log.config.ConfigResolver`, whose module docstring gives the order)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.log.checkpoint import read_properties
from kstore_cli.log.config import TOPIC_CONFIGS, ConfigResolver, parse_value
from kstore_cli.log.names import METADATA_PARTITION_DIR


class ClusterConfigs:
    """The dynamic configs of a KRaft cluster, from its metadata log (:mod:`kstore_cli.cluster.metadata_image`)."""

    def __init__(self, metadata_dir: str, resource_data: Mapping[Tuple[str, str], Mapping[str, str]],
                 set_at: Mapping[Tuple[str, str], Mapping[str, str]], end_offset: int,
                 topic_ids: Optional[Mapping[str, str]] = None, warnings: Sequence[str] = ()) -> None:
        self.metadata_dir = metadata_dir
        self.resource_data = resource_data
        self.set_at = set_at
        self.end_offset = end_offset
        #: Topic name -> the topic ID of its current incarnation (the image's TopicRecord).
        self.topic_ids = dict(topic_ids or {})
        #: what the load got past as Kafka's does (a torn tail left out)
        self.warnings = list(warnings)

    def _where(self, resource: Tuple[str, str], key: str) -> str:
        at = self.set_at.get(resource, {}).get(key, "")
        return f"cluster metadata {'@ ' + at if at.startswith('offset') else at}".rstrip()

    def topic(self, topic: str) -> Dict[str, Tuple[Any, str]]:
        """The topic's overrides: {topic key: (value, source)}; keys Kafka does not know are skipped
        (a newer Kafka's configs), as LogConfig ignores them. A value LogConfig's ConfigDef rejects raises
        :class:`InvalidConfigError`."""
        resource = ("TOPIC", topic)
        out: Dict[str, Tuple[Any, str]] = {}
        for key, raw in self.resource_data.get(resource, {}).items():
            if key in TOPIC_CONFIGS:
                where = self._where(resource, key)
                out[key] = (parse_value(key, raw, where), where)
        return out

    def broker(self, node_id: Optional[str]) -> Tuple[Dict[str, str], Dict[str, str]]:
        """Broker keys set dynamically for this node: (props, {key: source}); the node's own config
        over the cluster default, as DynamicBrokerConfig layers them."""
        props: Dict[str, str] = {}
        sources: Dict[str, str] = {}
        for name, label in (("", "cluster default"), (node_id, f"broker {node_id}")):
            if name is None:
                continue
            for key, raw in self.resource_data.get(("BROKER", name), {}).items():
                props[key] = raw
                sources[key] = f"{self._where(('BROKER', name), key)} ({label})"
        return props, sources


def load_cluster_configs(metadata_dir: str) -> ClusterConfigs:
    """Replay the metadata log at `metadata_dir` (a ``__cluster_metadata-0`` dir) for its configs.

    A log that cannot be read whole raises: a retention or cleaning decision must not rest on a
    partial view (``--no-cluster-metadata`` leaves the metadata out). A torn tail is not that: the configs
    are those Kafka loads once its recovery cut it, and the cut is in the result's ``warnings``."""
    # Imported here: the replay and its record tables (~30 ms) load only when a metadata log is found.
    from kstore_cli.cluster.metadata_loader import MetadataSource, load_image

    try:
        loaded = load_image(MetadataSource(metadata_dir))
    except KstoreError as exc:
        exc.message = f"{exc.message} (reading the cluster metadata for topic configs; --no-cluster-metadata ignores it)"
        raise
    if loaded.problems:
        raise UsageError(f"the cluster metadata log cannot be read whole for topic configs: {loaded.problems[0]} "
                         "(--no-cluster-metadata ignores it)", path=metadata_dir)
    configs = loaded.image.configs
    topic_ids = {t["name"]: tid for tid, t in loaded.image.topics.by_id.items()}
    return ClusterConfigs(metadata_dir, configs.resource_data, configs.set_at, loaded.source["end_offset"],
                          topic_ids, loaded.warnings)


def _node_id(data_dir: str) -> Optional[str]:
    path = os.path.join(data_dir, "meta.properties")
    if not os.path.isfile(path):
        return None
    props = read_properties(path)
    return props.get("node.id") or props.get("broker.id")


def cluster_configs_for(data_dirs: List[str], static_props: Optional[Mapping[str, str]] = None
                        ) -> Dict[str, Tuple[ClusterConfigs, Optional[str]]]:
    """Each data dir's cluster metadata and node id, as its broker would see them: the metadata log
    in a data dir of the same node (meta.properties node.id), or in server.properties'
    ``metadata.log.dir`` (default: the first of ``log.dirs``), else another node's replica (every
    replica holds the whole cluster's configs). Nothing found: an empty mapping (no cluster layer)."""
    props = static_props or {}
    candidates: List[str] = [os.path.join(d, METADATA_PARTITION_DIR) for d in data_dirs]
    configured = props.get("metadata.log.dir") or (props.get("log.dirs") or props.get("log.dir") or "").split(",")[0]
    if configured.strip():
        candidates.append(os.path.join(configured.strip(), METADATA_PARTITION_DIR))
    by_node: Dict[Optional[str], str] = {}
    for path in candidates:
        if os.path.isdir(path):
            by_node.setdefault(_node_id(os.path.dirname(os.path.abspath(path))) or props.get("node.id"), path)
    if not by_node:
        return {}
    loaded: Dict[str, ClusterConfigs] = {}
    out: Dict[str, Tuple[ClusterConfigs, Optional[str]]] = {}
    for data_dir in data_dirs:
        node = _node_id(data_dir) or props.get("node.id")
        # Every replica of the metadata log holds the whole cluster's configs (every broker's too): this
        # node's own replica when it is here, else another node's.
        path = by_node.get(node) or next(iter(by_node.values()))
        real = os.path.realpath(path)
        if real not in loaded:
            loaded[real] = load_cluster_configs(path)
        out[os.path.abspath(data_dir)] = (loaded[real], node)
    return out


def resolver_from_files(config: Optional[str] = None, topic_config: Optional[str] = None,
                        flags: Optional[Mapping[str, Tuple[Any, str]]] = None, *,
                        data_dirs: Optional[List[str]] = None, cluster_metadata: bool = True,
                        kafka_defaults: bool = False) -> ConfigResolver:
    """The resolver for these files and flags; with `data_dirs`, the cluster metadata log found for them
    (see :func:`cluster_configs_for`) unless `cluster_metadata` is False."""

    def cluster(props: Mapping[str, str]) -> Dict[str, Tuple[ClusterConfigs, Optional[str]]]:
        return cluster_configs_for(list(data_dirs), props) if data_dirs and cluster_metadata else {}

    return ConfigResolver.from_files(config, topic_config, flags, kafka_defaults=kafka_defaults, cluster=cluster)


def _stderr_warning(text: str) -> None:
    sys.stderr.write(f"kstore: warning: {text}\n")
    sys.stderr.flush()


@dataclass
class PartitionsRequest:
    """What a command that changes partitions by their topic configs is given: the paths (partition or data
    dirs), topic globs, topic-level flags (``{key: (value, "--flag")}``), the config files, whether the KRaft
    metadata log's configs count, the clock, and the run's mode."""

    paths: Sequence[str]
    topics: Optional[str] = None
    flags: Dict[str, Tuple[Any, str]] = field(default_factory=dict)
    config_file: Optional[str] = None
    topic_config: Optional[str] = None
    cluster_metadata: bool = True
    #: Kafka's built-in defaults may delete data (--kafka-defaults).
    kafka_defaults: bool = False
    now: Optional[int] = None
    dry_run: bool = False
    force: bool = False
    #: where a warning goes (a library caller may collect them instead)
    warn: Callable[[str], None] = field(default=lambda text: _stderr_warning(text), repr=False)

    def resolver(self, data_dirs: Sequence[str]) -> ConfigResolver:
        """The topic configs for these data dirs, in Kafka's order (flags, --topic-config, the cluster's, --config);
        what the cluster metadata's load got past (a torn tail) is said on stderr."""
        resolver = resolver_from_files(self.config_file, self.topic_config, self.flags, data_dirs=list(data_dirs),
                                       cluster_metadata=self.cluster_metadata, kafka_defaults=self.kafka_defaults)
        for warning in resolver.warnings:
            self.warn(f"{warning} (reading the cluster metadata for topic configs)")
        return resolver
