"""doctor's checks of the data dirs themselves, before their partitions (what LogManager and
KafkaRaftServer trip over at startup): meta.properties (KafkaRaftServer.initializeLogDirs,
MetaPropertiesEnsemble.verify) judged by the broker that wrote the dir, the ``.lock`` held by a live process
(LogManager.lockLogDirs), directories a broker cannot parse as partitions, the same partition twice in one
broker, topic IDs across the copies checked and against the KRaft metadata log, partitions the metadata
log assigns to a node but no data dir holds. Nothing here writes.
"""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from kstore_cli.log import names
from kstore_cli.log.checkpoint import META_PROPERTIES, PARTITION_METADATA
from kstore_cli.log.locks import is_locked
from kstore_cli.log.logdir import Chain, holds_data_dir_files, lock_path
from kstore_cli.operations.broker_version import BrokerJudgement
from kstore_cli.operations.startup import (
    ERROR,
    NOTE,
    REMOTE_INDEX_CACHE,
    WARNING,
    Broker,
    DataDirInfo,
    Issue,
    Survey,
    unparseable_reason,
    metadata_image_and_newer,
)

if TYPE_CHECKING:  # only the annotations need it here
    from kstore_cli.cluster.metadata_image import MetadataImage

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
                      repair="`kstore repair` on all of the broker's data dirs (writes the cluster.id, node.id and "
                             "version they agree on; the old file is quarantined)")]
    if info.meta is None:
        return _missing_meta(info, found)
    out = []
    version = info.meta.get("version", "0").strip()
    if version not in ("0", "1"):
        out.append(Issue(ERROR, "meta-properties-version", f"unknown version {version!r}", data_dir=info.path,
                         file=path, kafka="fail: MetaProperties refuses an unknown version",
                         repair="`kstore repair` on all of the broker's data dirs (sets the version they have)"))
    if info.node_id is None:
        key = "node.id" if version == "1" else "broker.id"
        out.append(Issue(ERROR, "meta-properties-node-id", f"no valid {key}", data_dir=info.path, file=path,
                         kafka="fail: 'node.id was not specified' / 'node ID not found' (MetaPropertiesEnsemble.verify)",
                         repair=f"`kstore repair` on all of the broker's data dirs (sets {key} as they have it), or "
                                f"set {key} to the broker's node.id (server.properties)"))
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
                  repair="`kstore repair` on all of the broker's data dirs (writes the cluster.id, node.id and "
                         "version they agree on, without a directory.id: the broker writes one)")]


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
                 repair="`kstore repair` on all of the broker's data dirs (sets the cluster.id they have)")


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
    metadata_dirs = []
    earlier: List[DataDirInfo] = []
    for info in broker.data_dirs:
        if not info.whole:
            continue
        if os.path.isdir(os.path.join(info.path, names.METADATA_PARTITION_DIR)):
            metadata_dirs.append(info.path)
        for partition in info.partition_dirs if earlier else ():
            if partition.name == names.METADATA_PARTITION_DIR:
                continue
            # the first data dir before this one holding it (looked up by name: no map of 10,000 names)
            other = next((o.path for o in (e.holding(partition.name) for e in earlier) if o is not None), None)
            if other is not None and other != partition.path:
                issues.append(Issue(
                    ERROR, "duplicate-partition", f"{partition.name} is also in {os.path.dirname(other)} "
                    f"(both are data dirs of node {broker.node_id})", data_dir=info.path, partition=partition.path,
                    kafka="fail: IllegalStateException 'Duplicate log directories for <partition> are found in both "
                          "...' (LogManager.loadLog)",
                    repair="move one copy out of the broker's data dirs (keep the one with the higher log end offset "
                           "and leader epoch: compare with `kstore inspect`)"))
        earlier.append(info)
    if len(metadata_dirs) > 1:
        issues.append(Issue(
            ERROR, "duplicate-metadata-log", f"{names.METADATA_PARTITION_DIR} is in {len(metadata_dirs)} data dirs of node "
            f"{broker.node_id}: {', '.join(metadata_dirs)}", data_dir=metadata_dirs[1],
            partition=os.path.join(metadata_dirs[1], names.METADATA_PARTITION_DIR),
            kafka="fail: 'Found unexpected metadata location in data directory' (KafkaRaftServer.initializeLogDirs)",
            repair="keep the copy in metadata.log.dir (or the first log.dirs entry) and move the other away"))
    return issues


def _directory_issues(info: DataDirInfo) -> List[Issue]:
    """Children LogManager.loadLogs trips over (parseTopicPartitionName) or treats specially, in name order."""
    found = []
    with os.scandir(info.path) as children:  # one name at a time (10,000 partitions), the few found sorted
        for entry in children:
            issue = _child_issue(info, entry.name)
            if issue is not None:
                found.append((entry.name, issue))
    return [issue for _name, issue in sorted(found, key=lambda f: f[0])]


def _child_issue(info: DataDirInfo, name: str) -> Optional[Issue]:
    """What a broker makes of the data dir's child `name` that needs saying, if anything."""
    child = os.path.join(info.path, name)
    if not info.holds(child):  # a partition the survey found is a dir without data-dir files
        if not os.path.isdir(child) or name == REMOTE_INDEX_CACHE:
            return None
        if holds_data_dir_files(child):
            return _stray_dir(info, child, "a data directory of its own (meta.properties, checkpoints "
                                           "or .lock) inside this data dir")
    reason = unparseable_reason(name)
    if reason is not None:
        return _stray_dir(info, child, reason)
    if name.endswith("-delete"):
        return Issue(NOTE, "replica-delete", "a replica marked for deletion", data_dir=info.path,
                     partition=child, kafka="delete: loaded, then removed after file.delete.delay.ms",
                     repair="none needed")
    if name.endswith("-future"):
        return Issue(NOTE, "replica-future", "a replica being moved into this dir (alter log dirs)",
                     data_dir=info.path, partition=child, kafka="ignore: loaded as the future replica; the move resumes",
                     repair="none needed")
    if name.endswith("-stray"):
        return Issue(NOTE, "replica-stray", "a replica the broker marked stray (not in the metadata, "
                     "or without a topic ID)", data_dir=info.path, partition=child,
                     kafka="ignore: loaded as a stray log, never served",
                     repair="none needed; remove it once you are sure its data is not needed")
    return None


def _stray_dir(info: DataDirInfo, child: str, reason: str) -> Issue:
    return Issue(
        ERROR, "stray-directory", reason, data_dir=info.path, file=child,
        kafka=f"fail: KafkaException 'Found directory {child}, '{os.path.basename(child)}' is not in the form of "
              "topic-partition or topic-partition.uniqueId-delete (if marked for deletion).' - the broker stops "
              "(UnifiedLog.parseTopicPartitionName in LogManager.loadLogs)",
        repair="`kstore repair` on the data dir (renames a -delete/-stray/-future name as Kafka names it, or moves "
               "the directory out of the data dir into kstore-quarantine beside it)")


def _topic_id_issues(found: Survey) -> List[Issue]:
    """The same topic with different topic IDs among the copies checked (one cluster id at a time), and
    copies whose topic ID the cluster's metadata log (when one is among them) does not have for the topic;
    partitions the metadata assigns to a node whose data dirs do not hold them."""
    copies: Dict[Tuple[Optional[str], str], Dict[str, List[Sequence[str]]]] = {}
    images: Dict[Optional[str], Tuple[str, "MetadataImage"]] = {}
    incomplete: List[str] = []
    newer_issues: List[Issue] = []
    for info in found.data_dirs.values():
        partition = info.holding(names.METADATA_PARTITION_DIR)
        if partition is not None:
            image, newer = metadata_image_and_newer(partition, found)
            newer_issues.extend(newer)
            if image is None:
                if not newer:  # else the warning says why
                    incomplete.append(partition.path)
            elif info.cluster_id not in images or len(image.topics.by_id) > len(images[info.cluster_id][1].topics.by_id):
                images[info.cluster_id] = (partition.path, image)
        for topic, by_id in info.topic_ids.items():  # read by the survey's scan; unreadable ones reported per partition
            for topic_id, paths in by_id.items():
                copies.setdefault((info.cluster_id, topic), {}).setdefault(topic_id, []).append(paths)
    issues = [Issue(NOTE, "metadata-log-incomplete", "its records before the first segment are in no snapshot "
                    "(or it could not be read whole): topic IDs are compared between the copies checked instead, "
                    "and partitions assigned to this node are not checked",
                    data_dir=os.path.dirname(path), partition=path, kafka="ignore", repair="none needed")
              for path in incomplete] + newer_issues
    for (cluster, topic), pieces in sorted(copies.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        by_id = {tid: Chain(paths) for tid, paths in pieces.items()}  # each data dir's, not one list of them all
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
                        "data is not needed (the broker refetches the current one from the leader)"
                        + ("; `kstore repair` renames it -stray now, as the broker would" if known or owner else ""))))
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
        moving = {(p.topic, p.partition) for i in infos for p in i.partition_dirs if p.name.endswith("-future")}
        for tid, topic in sorted(image.topics.by_id.items(), key=lambda kv: kv[1]["name"]):
            for pid, reg in sorted(topic["partitions"].items()):
                if node not in reg["replicas"] or (topic["name"], pid) in moving or any(
                        i.holding(f"{topic['name']}-{pid}") is not None for i in infos):
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
                    f"given holds it", data_dir=infos[0].path, partition=None, topic_partition=(topic["name"], pid),
                    gist=(f"the cluster metadata ({source}) assigns these partitions (topic ID {tid}) to node {node}"
                          + (", their only in-sync replica" if alone else "") + f", but no data dir of node {node} "
                          "given holds them"),
                    kafka=("the broker creates the log empty and fetches it from the leader" if not alone else
                           "the broker creates the log empty; this node is the only in-sync replica, so the "
                           "partition's data is lost unless a copy of the directory is found"),
                    repair="find the partition's directory (another disk, a backup) and put it back in a data dir of "
                           f"node {node} before starting the broker, or let it refetch from the leader"))
    return issues
