"""``kstore repair``: what doctor finds missing or wrong and Kafka needs, written as Kafka writes it.

Only doctor's own findings are repaired: :func:`plan_repair` runs the same checks
(:func:`~kstore_cli.operations.layout_findings.layout_issues`,
:func:`~kstore_cli.operations.partition_findings.partition_issues`) and maps each check id to a change:

* ``partition-metadata-missing`` / ``-malformed``: partition.metadata (PartitionMetadataFile) with the topic ID
  the KRaft metadata image among the PATHs has for the topic, else the one every other copy of the topic has;
* ``checkpoint-malformed`` of a ``leader-epoch-checkpoint``: rebuilt from the batches' partition leader epochs
  as LogSegment.recover fills LeaderEpochFileCache (an entry where the epoch rises), then truncateFromStart
  at the log start offset (LogLoader.load);
* ``meta-properties-*`` (missing, unreadable, no node id, no cluster id, unknown version): the fields the other
  data dirs of the same node agree on, as MetaProperties writes them (never a directory.id: the broker makes one);
* ``stray-directory``: a dir whose name ends in ``-delete``/``-stray``/``-future`` without the unique id is
  renamed as LocalLog.logDeleteDirName (``-delete``) or logStrayDirName (the others) names it; any other is moved
  out of the data dir into the quarantine root (Kafka cannot parse its name);
* ``topic-id-unknown`` (an error: the metadata has another ID for the topic): renamed ``-stray``, as
  LogManager.loadLog does at startup (LogManager.isStrayKraftReplica).

A file replaced is first copied into a quarantine dir (``<data dir>/../kstore-quarantine/<dir>/<time>-<tag>-repair``,
with a ``kind: repair`` manifest), the writes go through :mod:`kstore_cli.log.fileops` (temp file, fsync,
rename, dir fsync; owner and mode kept) and a rerun after a kill finishes (it reuses a killed run's quarantine dir).
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Dict, List, Optional, Tuple, Union

from kstore_cli.errors import KstoreError, UnsafeFileError
from kstore_cli.log import fileops, names
from kstore_cli.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    format_leader_epoch_checkpoint,
    format_meta_properties,
    format_partition_metadata,
    read_partition_metadata,
)
from kstore_cli.log.logdir import Partition, holds_data_dir_files, loaded
from kstore_cli.log.scope import symlinked_reason, write_refusal
from kstore_cli.log.unified_log import log_start_offset
from kstore_cli.operations.partition_findings import partition_issues
from kstore_cli.operations.quarantine import (
    MANIFEST_VERSION,
    new_quarantine_dir,
    quarantine_dirs_of,
    read_manifest,
    sha256_of,
    tidy_quarantine,
    write_manifest,
)
from kstore_cli.operations.retention import truncate_epochs_from_start
from kstore_cli.operations.runner import Outcome, PartitionRunner
from kstore_cli.operations.layout_findings import layout_issues
from kstore_cli.operations.startup import (
    ERROR,
    NOTE,
    DataDirInfo,
    Issue,
    Survey,
    metadata_image_of,
    survey,
)
from kstore_cli.record.reader import read_batches

QUARANTINE_DIR = "kstore-quarantine"
REPAIR_KIND = "repair"
_META_CHECKS = ("meta-properties-missing", "meta-properties-unreadable", "meta-properties-node-id",
                "meta-properties-cluster-id", "meta-properties-version")
_TOPIC_ID_CHECKS = ("partition-metadata-missing", "partition-metadata-malformed")
#: The doctor checks repair answers (a finding of any other check is doctor's to explain).
REPAIRED_CHECKS = frozenset(_META_CHECKS + _TOPIC_ID_CHECKS + ("stray-directory", "topic-id-unknown")
                            + ("checkpoint-malformed",))


class Change:
    """One repair: a file written (`data`), or a directory renamed (`move_to`) or moved out (`move_out`)."""

    def __init__(self, check: str, path: str, message: str, *, data: Optional[bytes] = None,
                 move_to: Optional[str] = None, move_out: bool = False, owner: Optional[str] = None,
                 data_dir: Optional[str] = None) -> None:
        self.check = check
        #: The data dir the change is in (its quarantine root is beside it).
        self.data_dir = data_dir
        self.path = path
        self.message = message
        self.data = data
        self.move_to = move_to
        self.move_out = move_out
        #: The dir whose quarantine dir keeps the replaced file (a partition dir or a data dir).
        self.owner = owner
        #: Where the old file (or the moved-out dir) went, once applied.
        self.quarantine_dir: Optional[str] = None

    @property
    def action(self) -> str:
        return "write" if self.data is not None else "move-out" if self.move_out else "rename"

    def to_dict(self) -> dict:
        return {"type": "change", "check": self.check, "path": self.path, "action": self.action,
                "to": self.move_to, "message": self.message, "quarantine_dir": self.quarantine_dir}


class Unrepaired:
    """A finding repair answers but cannot fix here, and why."""

    def __init__(self, check: str, path: str, reason: str) -> None:
        self.check, self.path, self.reason = check, path, reason

    def to_dict(self) -> dict:
        return {"type": "not_repaired", "check": self.check, "path": self.path, "reason": self.reason}


Planned = Union[Change, Unrepaired]


class RepairPlan(Outcome):
    """What repair does (or did): the changes, the findings it cannot repair, the findings of other checks."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.changes: List[Change] = []
        self.unrepaired: List[Unrepaired] = []
        self.others: List[Issue] = []

    def add(self, outcome: Optional[Planned]) -> None:
        if isinstance(outcome, Change):
            if all(c.path != outcome.path for c in self.changes):
                self.changes.append(outcome)
        elif outcome is not None:
            self.unrepaired.append(outcome)

    def problem_lines(self) -> List[Tuple[str, str]]:
        """A finding repair answers but could not fix makes the run exit 1."""
        return [(u.path, f"not repaired ({u.check}): {u.reason}") for u in self.unrepaired]

    def summary(self) -> dict:
        return {"type": "summary", "dry_run": self.dry_run, "changes": len(self.changes),
                "not_repaired": len(self.unrepaired), "other_findings": len(self.others)}


# --------------------------------------------------------------------------- planning


def plan_repair(found: Survey, *, dry_run: bool = False, now_ms: Optional[int] = None) -> RepairPlan:
    """The changes for doctor's findings on `found` (nothing is written)."""
    plan = RepairPlan(dry_run)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    issues = layout_issues(found, check_lock=False)
    for partition, only in found.targets:
        if only is None:
            issues += partition_issues(found, partition, None)
    images = _metadata_images(found)
    meta: Dict[str, List[Issue]] = {}
    for issue in issues:
        check = issue.check
        if issue.severity == NOTE:  # nothing the judged broker needs (e.g. a ZooKeeper broker writes it itself)
            plan.others.append(issue)
        elif check in _META_CHECKS and issue.data_dir is not None:
            meta.setdefault(issue.data_dir, []).append(issue)
        elif check in _TOPIC_ID_CHECKS:
            plan.add(_topic_id_change(found, issue, images))
        elif check == "checkpoint-malformed" and os.path.basename(issue.file or "") == LEADER_EPOCH_CHECKPOINT:
            plan.add(_epochs_change(found, issue))
        elif check == "stray-directory":
            plan.add(_stray_dir_change(issue))
        elif check == "topic-id-unknown" and issue.partition:
            plan.add(_stray_partition_change(issue))
        else:
            plan.others.append(issue)
    for data_dir, dir_issues in meta.items():
        plan.add(_meta_change(found, found.data_dirs[data_dir], dir_issues, now))
    return plan


def _metadata_images(found: Survey) -> Dict[Optional[str], Tuple[str, object]]:
    """cluster id -> (source, image) of the KRaft metadata logs among the PATHs (as doctor reads them)."""
    images: Dict[Optional[str], Tuple[str, object]] = {}
    for info in found.data_dirs.values():
        partition = info.holding(names.METADATA_PARTITION_DIR)
        if partition is not None and info.cluster_id not in images:
            image = metadata_image_of(loaded(partition), found)
            if image is not None:
                images[info.cluster_id] = (partition.path, image)
    return images


def _topic_id_change(found: Survey, issue: Issue, images) -> Planned:
    """partition.metadata from the metadata image, else from every other copy of the topic (one ID)."""
    path = issue.file or os.path.join(str(issue.partition), PARTITION_METADATA)
    partition_dir = os.path.dirname(path)
    symlinked = symlinked_reason(partition_dir)
    if symlinked is not None:
        return Unrepaired(issue.check, path, symlinked)
    topic = (names.parse_partition_dir(partition_dir) or (None, None))[0]
    cluster = found.data_dirs[issue.data_dir].cluster_id if issue.data_dir in found.data_dirs else None
    if cluster in images:
        source, image = images[cluster]
        ids = [tid for tid, t in image.topics.by_id.items() if t["name"] == topic]  # type: ignore[attr-defined]
        if not ids:
            return Unrepaired(issue.check, path, f"the cluster metadata ({source}) has no topic {topic}: no topic "
                                                 "ID to write (a KRaft broker treats the log as stray)")
        topic_id, origin = ids[0], f"the cluster metadata ({source})"
    else:
        copies: Dict[str, List[str]] = {}
        for info in found.data_dirs.values():
            for other in info.partitions:
                if None not in (info.cluster_id, cluster) and info.cluster_id != cluster:
                    continue  # another cluster's topic of the same name
                if other.topic != topic or other.path == partition_dir:
                    continue
                try:
                    tid = str(read_partition_metadata(os.path.join(other.path, PARTITION_METADATA))["topicId"])
                except KstoreError:
                    continue
                copies.setdefault(tid, []).append(other.path)
        if len(copies) != 1:
            why = ("the copies of topic {} among the paths have {} topic IDs ({})".format(
                topic, len(copies), ", ".join(sorted(copies))) if copies else
                f"no other copy of topic {topic} among the paths has a partition.metadata, and no cluster "
                "metadata log is among them")
            return Unrepaired(issue.check, path, why + ": give the data dir holding __cluster_metadata-0 "
                                                       "or another replica's dir too")
        [(topic_id, paths)] = copies.items()
        origin = f"partition.metadata of {paths[0]}" + (f" and {len(paths) - 1} more" if len(paths) > 1 else "")
    return Change(issue.check, path, f"write partition.metadata: topic ID {topic_id}, from {origin}",
                  data=format_partition_metadata(topic_id), owner=partition_dir, data_dir=issue.data_dir)


def epochs_from_batches(partition: Partition) -> Tuple[List[Tuple[int, int]], Optional[KstoreError]]:
    """The leader epoch entries LogSegment.recover assigns while it reads the segments: (epoch, base offset)
    of each v2 batch whose partition leader epoch is >= 0 and above the latest; and the damage it stopped
    at (Kafka's recovery cuts the log there), or None."""
    entries: List[Tuple[int, int]] = []
    for segment in partition.segments:
        try:
            for batch in read_batches(segment.log):
                epoch = batch.partition_leader_epoch if batch.magic >= 2 else -1
                if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                    entries.append((epoch, batch.base_offset))
        except KstoreError as exc:
            return entries, exc
    return entries, None


def _epochs_change(found: Survey, issue: Issue) -> Planned:
    path = str(issue.file)
    partition = Partition(os.path.dirname(path))
    reason = write_refusal(partition)
    if reason is not None:
        return Unrepaired(issue.check, path, reason)
    entries, damage = epochs_from_batches(partition)
    if partition.segments:
        lso = (found.data_dir_of(partition).checkpoints.get(LOG_START_OFFSET_CHECKPOINT) or {}).get(
            (partition.topic, partition.partition))
        entries = truncate_epochs_from_start(entries, log_start_offset(partition.segments[0].base_offset, lso))
    text = ", ".join(f"epoch {e} from {o}" for e, o in entries) or "no entry (no batch carries a leader epoch)"
    if damage is not None:
        text += f" (read up to the damage at {damage.path} byte {damage.position}, where Kafka's recovery cuts)"
    return Change(issue.check, path, f"rebuild leader-epoch-checkpoint from the batches: {text}",
                  data=format_leader_epoch_checkpoint(entries).encode(), owner=partition.path,
                  data_dir=found.data_dir_of(partition).path)


def _meta_change(found: Survey, info: DataDirInfo, issues: List[Issue], now_ms: int) -> Planned:
    """meta.properties fields from the other data dirs of the same node (all agreeing), as MetaProperties writes."""
    path = os.path.join(info.path, META_PROPERTIES)
    checks = "/".join(sorted({i.check for i in issues}))
    others = [d for d in found.data_dirs.values() if d is not info and d.meta is not None and d.node_id is not None]
    if info.node_id is not None:
        peers = [d for d in others if d.node_id == info.node_id]
    else:
        nodes = sorted({d.node_id for d in others})
        if len(nodes) > 1:
            return Unrepaired(checks, path, f"the other data dirs checked belong to nodes {nodes}: which one this "
                                            "dir is cannot be told (name only the dirs of this broker)")
        peers = others
    if not peers:
        return Unrepaired(checks, path, "no other data dir of this broker among the paths says what it must hold")
    versions = {d.meta.get("version", "0").strip() for d in peers}  # type: ignore[union-attr]
    clusters = {d.cluster_id for d in peers if d.cluster_id}
    node = peers[0].node_id
    if len(versions) != 1 or len(clusters) > 1 or not versions <= {"0", "1"}:
        return Unrepaired(checks, path, f"the other data dirs of node {node} disagree (versions {sorted(versions)}, "
                                        f"cluster ids {sorted(clusters)})")
    props = dict(info.meta or {})
    version = props.get("version", "").strip()
    if info.meta is None or version not in ("0", "1"):
        props["version"] = version = next(iter(versions))
    if info.node_id is None:
        props["node.id" if version == "1" else "broker.id"] = str(node)
    if info.cluster_id is None:
        if not clusters:
            return Unrepaired(checks, path, f"no other data dir of node {node} has a cluster.id")
        props["cluster.id"] = next(iter(clusters))
    changed = ", ".join(f"{k}={v}" for k, v in props.items() if (info.meta or {}).get(k) != v)
    sources = ", ".join(d.path for d in peers)
    return Change(checks, path, f"{'write' if info.meta is None else 'set'} {changed} in meta.properties, as the "
                                f"other data dirs of node {node} have it ({sources})"
                                + ("; the broker writes a new directory.id" if info.meta is None else ""),
                  data=format_meta_properties(props, now_ms), owner=info.path, data_dir=info.path)


def kafka_dir_name(topic: str, partition: int, suffix: str) -> str:
    """LocalLog.logDirNameWithSuffixCappedLength: ``<topic>-<partition>.<uuid without dashes><suffix>``, the
    topic cut so that the name stays within 255 characters (logDeleteDirName, logStrayDirName)."""
    full_suffix = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    return topic[: min(len(topic), 255 - len(full_suffix))] + full_suffix


def _stray_dir_change(issue: Issue) -> Planned:
    child = str(issue.file)
    name, parent = os.path.basename(child), os.path.dirname(child)
    parsed = None if holds_data_dir_files(child) else names.parse_partition_dir(name)
    if parsed is not None and name.endswith(names.REPLICA_DIR_SUFFIXES):
        suffix = "-delete" if name.endswith("-delete") else "-stray"
        new = kafka_dir_name(parsed[0], parsed[1], suffix)
        what = ("Kafka deletes it after file.delete.delay.ms, as its name asked (LocalLog.logDeleteDirName)"
                if suffix == "-delete" else "Kafka loads it as a stray log and never serves it (LocalLog.logStrayDirName)")
        return Change(issue.check, child, f"rename {name} to {new}: {what}", move_to=os.path.join(parent, new))
    return Change(issue.check, child, f"move {name} out of the data dir into {QUARANTINE_DIR} beside it "
                                      f"({issue.message})", move_out=True, owner=child, data_dir=issue.data_dir)


def _stray_partition_change(issue: Issue) -> Planned:
    path = str(issue.partition)
    if issue.severity != ERROR:
        return Unrepaired(issue.check, path, "the metadata may be older than the data: left for the broker, "
                                             "which decides once it has caught up with the controller")
    topic, number = names.parse_partition_dir(path) or (os.path.basename(path), -1)
    new = kafka_dir_name(topic, number, "-stray")
    return Change(issue.check, path, f"rename {os.path.basename(path)} to {new}, as a KRaft broker does at startup "
                                     "(LogManager.isStrayKraftReplica, LocalLog.logStrayDirName): kept, never served",
                  move_to=os.path.join(os.path.dirname(path), new))


# --------------------------------------------------------------------------- applying


def _quarantine_root(data_dir: str, owner: str) -> str:
    """``<data dir>/../kstore-quarantine/<owner's name>``: beside the data dir, as recover's and salvage's."""
    return os.path.join(os.path.dirname(os.path.realpath(data_dir)), QUARANTINE_DIR, os.path.basename(owner))


def _repair_qdir(owner: str, root: str, entry: dict) -> Tuple[str, dict]:
    """The quarantine dir of this change: a killed run's (its manifest lists the same entry), else a new one."""
    partition = Partition(owner)
    tidy_quarantine(root, partition)
    for qdir in reversed(quarantine_dirs_of(root, partition)):
        manifest = read_manifest(qdir)
        if qdir.endswith("-" + REPAIR_KIND) and manifest is not None and entry in manifest.get("files", []) + [
                manifest.get("moved")]:
            return qdir, manifest
    qdir = new_quarantine_dir(root, partition, REPAIR_KIND)
    fileops.make_dirs(qdir, like=owner if os.path.isdir(owner) else os.path.dirname(owner))
    return qdir, {"version": MANIFEST_VERSION, "kind": REPAIR_KIND, "partition": os.path.realpath(owner)}


def _save_old_file(change: Change) -> None:
    """Copy the file about to be replaced into its quarantine dir (the manifest first)."""
    name = os.path.basename(change.path)
    entry = {"file": name, "savedAs": name, "size": os.path.getsize(change.path), "sha256": sha256_of(change.path)}
    owner = str(change.owner)
    qdir, manifest = _repair_qdir(owner, _quarantine_root(str(change.data_dir), owner), entry)
    if entry not in manifest.get("files", []):
        manifest["files"] = manifest.get("files", []) + [entry]
        write_manifest(qdir, manifest)
    saved = os.path.join(qdir, name)
    if not os.path.lexists(saved):
        fileops.copy_file(change.path, saved, follow_links=False)
    change.quarantine_dir = qdir


def _refuse_dir_link(path: str) -> None:
    """A directory to rename must be one (a link to one elsewhere is not renamed: refused)."""
    if os.path.islink(path) or not os.path.isdir(path):
        raise UnsafeFileError("is not a directory (a symbolic link?); refusing to move it", path=path)


def _move_out(change: Change) -> None:
    """Move a dir Kafka cannot parse out of the data dir, into a quarantine dir beside it."""
    _refuse_dir_link(change.path)
    name = os.path.basename(change.path)
    entry = {"from": change.path, "to": name}
    qdir, manifest = _repair_qdir(change.path, _quarantine_root(str(change.data_dir), change.path), entry)
    if manifest.get("moved") != entry:
        manifest["moved"] = entry
        write_manifest(qdir, manifest)
    fileops.rename(change.path, os.path.join(qdir, name))
    fileops.fsync_dir(os.path.dirname(change.path))
    fileops.fsync_dir(qdir)
    change.quarantine_dir = qdir


def apply_change(change: Change) -> None:
    """Make one change (crash-safe: a rerun finds what is left to do)."""
    if change.data is not None:
        if os.path.lexists(change.path):
            _save_old_file(change)
        fileops.atomic_write(change.path, change.data)
    elif change.move_out:
        _move_out(change)
    elif change.move_to is not None:
        _refuse_dir_link(change.path)
        fileops.rename(change.path, change.move_to)
        fileops.fsync_dir(os.path.dirname(change.path))


def repair(paths: List[str], *, topics: Optional[str] = None, dry_run: bool = False, force: bool = False,
           now_ms: Optional[int] = None) -> RepairPlan:
    """``kstore repair``: doctor's checks on the PATHs, then (under every data dir's ``.lock``, checked again
    there) the changes that answer them; a dry run plans only. A data dir's symlinked child is not changed."""
    found = survey(paths, replicas=True, topics=topics)
    if dry_run:
        return plan_repair(found, dry_run=True, now_ms=now_ms)
    # not the dir a data dir's symlinked child points into: nothing there is changed (scope.symlinked_reason)
    held = [d for d, info in found.data_dirs.items()
            if info.whole or any(symlinked_reason(p.path) is None for p in info.partition_dirs)]
    with PartitionRunner({d: [] for d in held}, force=force).locked():
        plan = plan_repair(survey(paths, replicas=True, topics=topics), now_ms=now_ms)
        for change in plan.changes:
            apply_change(change)
    return plan
