"""Committed offsets of consumer groups, loaded from ``__consumer_offsets-N`` as the group coordinator does.

Loading follows Kafka's group coordinator (CoordinatorLoaderImpl feeding GroupMetadataManager /
OffsetMetadataManager.replay): records in offset order, the latest record per key wins, a null value
(tombstone) deletes; offset commits in a transactional batch are pending until their producer's
COMMIT marker applies them (an ABORT marker discards them). Lag is joined from the high watermark
and log end offset of partitions found in the same data dirs (kstore_cli.log.unified_log.log_offsets).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.parsers.coordinator import _UnknownRecordType, deserialize
from kstore_cli.parsers.schemas import GROUP_COORDINATOR_RECORDS
from kstore_cli.parsers.wire import JavaError
from kstore_cli.record.batch import COMMIT, parse_control_key
from kstore_cli.cluster.coordinator import coordinator_batches, partition_for
from kstore_cli.cluster.group_members import Member, ModernGroup, classic_members
from kstore_cli.log.checkpoint import PARTITION_METADATA, read_partition_metadata
from kstore_cli.log.logdir import Partition, coordinator_partitions
from kstore_cli.log.unified_log import HW_CHECKPOINT, DataDirStates, log_offsets

OFFSETS_TOPIC = "__consumer_offsets"
#: offsets.topic.num.partitions default (GroupCoordinatorConfig).
DEFAULT_OFFSETS_PARTITIONS = 50

# Record types of CoordinatorRecordType (the key's version prefix).
_OFFSET_COMMIT = (0, 1)
_GROUP_METADATA = 2
#: XGroupMetadata, XGroupPartitionMetadata, XGroupMemberMetadata, XGroupTargetAssignmentMetadata,
#: XGroupTargetAssignmentMember, XGroupCurrentMemberAssignment: consumer (KIP-848) and share groups.
_MODERN = {3: ("consumer", "group"), 4: ("consumer", "names"), 5: ("consumer", "member"),
           6: ("consumer", "target_epoch"), 7: ("consumer", "target"), 8: ("consumer", "current"),
           9: ("share", "names"), 10: ("share", "member"), 11: ("share", "group"),
           12: ("share", "target_epoch"), 13: ("share", "target"), 14: ("share", "current")}
# 15 ShareGroupStatePartitionMetadata: which share-partitions were initialized, no membership.


@dataclass
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    log_end_offset: Optional[int] = None
    high_watermark: Optional[int] = None

    @property
    def lag(self) -> Optional[int]:
        """High watermark minus committed offset (what kafka-consumer-groups.sh shows), None if unknown."""
        if self.high_watermark is None:
            return None
        return max(self.high_watermark - self.offset, 0)


@dataclass
class Group:
    group_id: str
    coordinator_partition: int
    #: classic (GroupMetadata), consumer (KIP-848), share, or "offsets-only" (no live group record).
    kind: str = "offsets-only"
    protocol_type: Optional[str] = None
    generation: Optional[int] = None
    #: The classic group's assignor (GroupMetadataValue.protocol) and leader member.
    protocol: Optional[str] = None
    leader: Optional[str] = None
    #: As the coordinator would describe it after loading: Empty, Stable (classic, share), Assigning,
    #: Reconciling (consumer), Dead (its group record tombstoned, only offsets left).
    state: str = "Empty"
    members: List[Member] = field(default_factory=list)
    #: KIP-848 / share: the target assignment epoch (ConsumerGroupTargetAssignmentMetadataValue).
    assignment_epoch: Optional[int] = None
    offsets: Dict[Tuple[str, int], CommittedOffset] = field(default_factory=dict)

    @property
    def last_commit_timestamp(self) -> Optional[int]:
        """The latest commitTimestamp of its offsets (epoch ms), None without offsets."""
        return max((c.commit_timestamp for c in self.offsets.values()), default=None)

    @property
    def total_lag(self) -> Optional[int]:
        """The sum of its offsets' lags where the high watermark is known; None where none is."""
        lags = [c.lag for c in self.offsets.values() if c.lag is not None]
        return sum(lags) if lags else None

    @property
    def lag_unknown(self) -> int:
        """How many of its offsets have no known lag (their partition not in the paths or not checkpointed)."""
        return sum(1 for c in self.offsets.values() if c.lag is None)


@dataclass
class GroupsState:
    groups: Dict[str, Group]
    num_partitions: int
    loaded_partitions: List[int]
    missing_partitions: List[int]
    #: Groups asked for by name whose coordinator partition is not in the dirs.
    unknown_groups: Dict[str, int]
    #: (path, offset, why) of records the loader could not decode or apply (not applied).
    skipped: List[Tuple[str, int, str]]
    #: Topic ids of KIP-848/share assignments no record or partition.metadata names (shown as ids).
    unresolved_topic_ids: List[str] = field(default_factory=list)
    #: (path, offset, group, what) of group records applied whose members' consumer protocol bytes did not decode.
    member_problems: List[Tuple[str, int, str, str]] = field(default_factory=list)


class _Loader:
    def __init__(self, num_partitions: int) -> None:
        self.num_partitions = num_partitions
        self.groups: Dict[str, Group] = {}
        #: group id -> the persisted part of a live consumer/share group
        self.modern: Dict[str, ModernGroup] = {}
        #: topic id -> name, from every partition-metadata record seen
        self.topic_names: Dict[str, str] = {}
        self.pending: Dict[int, List[Tuple[str, str, int, Optional[dict]]]] = {}
        self.skipped: List[Tuple[str, int, str]] = []
        self.member_problems: List[Tuple[str, int, str, str]] = []

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, partition_for(group_id, self.num_partitions))
        return group

    def _apply_offset(self, group_id: str, topic: str, partition: int, value: Optional[dict]) -> None:
        if value is None:
            group = self.groups.get(group_id)
            if group is not None:
                group.offsets.pop((topic, partition), None)
            return
        self._group(group_id).offsets[(topic, partition)] = CommittedOffset(
            topic, partition, value["offset"], value.get("leaderEpoch", -1), value.get("metadata") or "",
            value["commitTimestamp"])

    def load_partition(self, partition: Partition) -> None:
        for path, batch in coordinator_batches(partition):
            if batch.is_control:
                pending = self.pending.pop(batch.producer_id, [])
                for record in batch.records():
                    if parse_control_key(record.key)[1] == COMMIT:
                        for args in pending:
                            self._apply_offset(*args)
                continue
            transactional = batch.is_transactional
            for record in batch.records():
                self._replay(path, record, transactional, batch.producer_id if transactional else -1)

    def _replay(self, path: str, record, transactional: bool, producer_id: int) -> None:
        if record.key is None:
            self.skipped.append((path, record.offset, "record without a key"))
            return
        try:
            rtype, _km, key, _vv, _vm, value = deserialize(GROUP_COORDINATOR_RECORDS, record.key, record.value)
        except _UnknownRecordType as exc:
            self.skipped.append((path, record.offset, f"unknown record type {exc.record_type}"))
            return
        except JavaError as exc:
            self.skipped.append((path, record.offset, exc.text))
            return
        if rtype in _OFFSET_COMMIT:
            if value is not None and key["group"] in self.groups:
                self.groups[key["group"]].state = _simple_group_state(self.groups[key["group"]])
            args = (key["group"], key["topic"], key["partition"], value)
            if transactional:
                self.pending.setdefault(producer_id, []).append(args)
            else:
                self._apply_offset(*args)
        elif rtype == _GROUP_METADATA:
            problems = self._classic_record(key["group"], value)
            self.member_problems.extend((path, record.offset, key["group"], p) for p in problems)
        elif rtype in _MODERN:
            problem = self._modern_record(*_MODERN[rtype], key, value)
            if problem:
                self.skipped.append((path, record.offset, problem))

    def _remove(self, group_id: str) -> None:
        """GroupMetadataManager.removeGroup: the group is gone (Dead); its offsets have their own records."""
        self.modern.pop(group_id, None)
        group = self.groups[group_id]
        group.kind, group.protocol_type, group.generation, group.protocol, group.leader = (
            "offsets-only", None, None, None, None)
        group.members, group.assignment_epoch, group.state = [], None, "Dead"
        if not group.offsets:
            del self.groups[group_id]

    def _classic_record(self, group_id: str, value: Optional[dict]) -> List[str]:
        """GroupMetadataManager.replay(GroupMetadataKey, GroupMetadataValue); the decoding problems."""
        if value is None:
            if group_id in self.groups:
                self._remove(group_id)
            return []
        self.modern.pop(group_id, None)
        group = self._group(group_id)
        members, problems = classic_members(value)
        group.kind, group.protocol_type = "classic", value.get("protocolType")
        group.generation = value.get("generation")
        group.protocol, group.leader, group.members = value.get("protocol"), value.get("leader"), members
        group.assignment_epoch, group.state = None, "Stable" if members else "Empty"
        return problems

    def _modern_record(self, kind: str, what: str, key: dict, value: Optional[dict]) -> Optional[str]:
        """GroupMetadataManager.replay of a consumer or share group record; a problem that stops it, or None."""
        group_id = key["GroupId"]
        if what == "names" and value is not None:
            self.topic_names.update((t["TopicId"], t["TopicName"]) for t in value["Topics"])
        modern = self.modern.get(group_id)
        if modern is None:
            if value is None:
                return None  # getOrMaybeCreatePersistedXGroup(groupId, false): a tombstone for no group is ignored
            existing = self.groups.get(group_id)
            if existing is not None and existing.kind != "offsets-only":
                return (f"group {group_id}: a {kind} group record for a {existing.kind} group (Kafka's loader "
                        f"fails here: IllegalStateException \"is not a {kind} group\")")
            modern = self.modern[group_id] = ModernGroup(kind)
        elif modern.kind != kind:
            return (f"group {group_id}: a {kind} group record for a {modern.kind} group (Kafka's loader "
                    f"fails here: IllegalStateException \"is not a {kind} group\")")
        if what == "group" and value is None:
            self._remove(group_id)
            return None
        if what == "group":
            modern.epoch = value["Epoch"]
        elif what == "member":
            modern.member_metadata(key["MemberId"], value)
        elif what == "current":
            modern.current_assignment(key["MemberId"], value)
        elif what == "target":
            modern.target_member(key["MemberId"], value)
        elif what == "target_epoch":
            modern.assignment_epoch = -1 if value is None else value["AssignmentEpoch"]
        group = self._group(group_id)
        group.kind, group.protocol_type, group.protocol, group.leader = kind, None, None, None
        group.generation, group.assignment_epoch, group.state = modern.epoch, modern.assignment_epoch, modern.state
        return None

    def finish(self, names: Callable[[], Dict[str, str]]) -> Dict[str, Set[str]]:
        """Every live consumer/share group's members with topic names; per group, the topic ids left unnamed.
        `names` (partition.metadata files) is only read when the records leave an id unnamed."""
        unknown = self._name_topics()
        if unknown:
            self.topic_names.update(names())
            unknown = self._name_topics()
        return unknown

    def _name_topics(self) -> Dict[str, Set[str]]:
        unknown: Dict[str, Set[str]] = {}
        for group_id, modern in self.modern.items():
            self.groups[group_id].members, missing = modern.resolved_members(self.topic_names)
            if missing:
                unknown[group_id] = missing
        return unknown


def _simple_group_state(group: Group) -> str:
    """An offset commit for a removed group recreates it as a simple (empty, memberless) classic group
    (OffsetMetadataManager.replay)."""
    return "Empty" if group.state == "Dead" else group.state


def _topic_names(partitions: List[Partition]) -> Dict[str, str]:
    """topic id -> name from the partition.metadata files of the partitions found (unreadable ones skipped:
    the id is then shown as it is)."""
    names: Dict[str, str] = {}
    seen = set()
    for p in partitions:
        path = os.path.join(p.path, PARTITION_METADATA)
        if p.topic in seen or not os.path.isfile(path):
            continue
        try:
            names[str(read_partition_metadata(path)["topicId"])] = p.topic
            seen.add(p.topic)
        except KstoreError:
            continue
    return names


def load_groups(paths: Iterable[str], *, num_partitions: int = DEFAULT_OFFSETS_PARTITIONS,
                groups: Optional[List[str]] = None, topics: Optional[Callable[[str], bool]] = None) -> GroupsState:
    """Committed offsets of every group in the ``__consumer_offsets`` partitions under `paths`; with `topics`,
    only the offsets of the topics it accepts (and the groups that have some)."""
    partitions, offsets_parts, found = coordinator_partitions(
        paths, OFFSETS_TOPIC, num_partitions, "--offsets-partitions to offsets.topic.num.partitions")
    loader = _Loader(num_partitions)
    for partition in offsets_parts:
        loader.load_partition(partition)
    unresolved = loader.finish(lambda: _topic_names(partitions))
    state = loader.groups
    if groups:
        state = {g: state[g] for g in groups if g in state}
    if topics:
        for group in state.values():
            group.offsets = {k: v for k, v in group.offsets.items() if topics(k[0])}
        state = {g: grp for g, grp in state.items() if grp.offsets}
    missing = [n for n in range(num_partitions) if n not in found]
    unknown = {}
    for g in groups or []:
        if g not in state and partition_for(g, num_partitions) in missing:
            unknown[g] = partition_for(g, num_partitions)
    _join_log_ends(partitions, state)
    unnamed = sorted({t for g in state for t in unresolved.get(g, ())})
    problems = [p for p in loader.member_problems if p[2] in state]
    return GroupsState(state, num_partitions, found, missing, unknown, loader.skipped, unnamed, problems)


def _join_log_ends(partitions: List[Partition], state: Dict[str, Group]) -> None:
    """Each committed offset's partition's log end offset and high watermark, as its broker reports them
    (:func:`~kstore_cli.log.unified_log.log_offsets`); no high watermark when no checkpoint lists it."""
    wanted = {k for g in state.values() for k in g.offsets}
    by_key = {(p.topic, p.partition): p for p in partitions if (p.topic, p.partition) in wanted}
    states = DataDirStates()
    ends: Dict[Tuple[str, int], Tuple[Optional[int], Optional[int]]] = {}
    for key, partition in by_key.items():
        offsets = log_offsets(partition, states[partition.data_dir])
        listed = offsets.high_watermark_source == HW_CHECKPOINT
        ends[key] = (offsets.log_end_offset, offsets.high_watermark if listed else None)
    for group in state.values():
        for key, committed in group.offsets.items():
            committed.log_end_offset, committed.high_watermark = ends.get(key, (None, None))


def _csv_field(text: str) -> str:
    """A CSV field as Jackson's CsvMapper reads it (ConsumerGroupCommand's CsvUtils): quoted, with doubled
    quotes, when it holds a comma or a quote. parseResetPlan splits the file on newlines first, so a field
    holding one cannot be carried at all."""
    if "\n" in text or "\r" in text:
        raise UsageError(f"group {text!r} holds a line break: kafka-consumer-groups.sh --from-file splits the file "
                         "on newlines and cannot read it; reset that group with --to-offset instead")
    if "," in text or '"' in text or text != text.strip():
        return '"' + text.replace('"', '""') + '"'
    return text


def reset_offsets_csv(groups: List[Group], *, single_group: bool) -> str:
    """``kafka-consumer-groups.sh --reset-offsets --from-file`` input. ConsumerGroupCommand.parseResetPlan
    takes ``TOPIC,PARTITION,OFFSET`` only when exactly one ``--group`` is given, ``GROUP,TOPIC,PARTITION,OFFSET``
    otherwise (several groups, ``--all-groups``): `single_group` says the plan is for one named group.
    Topic names never need quoting (``[a-zA-Z0-9._-]``); group ids may."""
    if single_group and len(groups) == 1:
        return "".join(f"{c.topic},{c.partition},{c.offset}\n" for _k, c in sorted(groups[0].offsets.items()))
    return "".join(f"{_csv_field(g.group_id)},{c.topic},{c.partition},{c.offset}\n"
                   for g in sorted(groups, key=lambda g: g.group_id) for _k, c in sorted(g.offsets.items()))
