"""A group's members and state as the group coordinator loads them from ``__consumer_offsets``.

Classic groups (``GroupMetadataValue``, GroupMetadataManager.replay): the members of the last record, each
with the ``ConsumerProtocol`` subscription and assignment it sent (decoded when the protocol type is
``consumer``). The loaded state is Empty without members, else Stable: PreparingRebalance and
CompletingRebalance are never persisted, and Dead is a group removed by a tombstone.

Consumer (KIP-848) and share groups are built from their records as GroupMetadataManager.replay does:
``XGroupMetadata`` (group epoch), ``XGroupMemberMetadata`` (who the member is), ``XGroupTargetAssignment*``
(what the assignor decided) and ``XGroupCurrentMemberAssignment`` (what the member owns); their state is
ConsumerGroup.maybeUpdateGroupState's (Empty, Assigning, Reconciling, Stable) and ShareGroup's (Empty,
Stable). Their assignments name topics by id: names come from the group's partition-metadata records or
the ``partition.metadata`` files found, else the id is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from kstore_cli.parsers.coordinator import consumer_protocol
from kstore_cli.parsers.schemas import CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION
from kstore_cli.parsers.wire import JavaError

#: ConsumerGroupMember / ShareGroupMember: the epoch of a member that left (LEAVE_GROUP_MEMBER_EPOCH).
LEAVE_GROUP_MEMBER_EPOCH = -1
#: MemberState (org.apache.kafka.coordinator.group.modern.MemberState), by its int8 value.
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS"}

TopicPartitions = List[Tuple[str, int]]


@dataclass
class Member:
    """A group member as the coordinator holds it (ClassicGroupMember, ConsumerGroupMember, ShareGroupMember)."""

    member_id: str
    client_id: str = ""
    client_host: str = ""
    group_instance_id: Optional[str] = None
    rack_id: Optional[str] = None
    session_timeout_ms: Optional[int] = None
    rebalance_timeout_ms: Optional[int] = None
    subscribed_topics: Optional[List[str]] = None
    subscribed_topic_regex: Optional[str] = None
    #: (topic, partition) the member owns; None when not known (a classic group of another protocol type).
    assignment: Optional[TopicPartitions] = None
    #: KIP-848 / share members only.
    member_epoch: Optional[int] = None
    member_state: Optional[str] = None
    target_assignment: Optional[TopicPartitions] = None


def _partitions(assigned: List[Dict[str, Any]], topic_key: str) -> TopicPartitions:
    return sorted((tp[topic_key], p) for tp in assigned for p in tp["Partitions"])


def classic_members(value: Dict[str, Any]) -> Tuple[List[Member], List[str]]:
    """The members of a ``GroupMetadataValue`` and the problems decoding their consumer protocol bytes.
    rebalanceTimeout -1 (value version 0) is the session timeout, as the coordinator loads it."""
    members, problems = [], []
    consumer = value.get("protocolType") == "consumer"
    for m in value.get("members") or []:
        rebalance = m["rebalanceTimeout"]
        member = Member(m["memberId"], m["clientId"], m["clientHost"], m.get("groupInstanceId"),
                        session_timeout_ms=m["sessionTimeout"],
                        rebalance_timeout_ms=m["sessionTimeout"] if rebalance == -1 else rebalance)
        if consumer:
            try:
                # ConsumerGroupCommand reads empty assignment bytes as no partition (a member before SyncGroup)
                if m["assignment"]:
                    assigned = consumer_protocol(CONSUMER_PROTOCOL_ASSIGNMENT, m["assignment"])
                    member.assignment = _partitions(assigned["AssignedPartitions"], "Topic")
                else:
                    member.assignment = []
                if m["subscription"]:
                    member.subscribed_topics = list(
                        consumer_protocol(CONSUMER_PROTOCOL_SUBSCRIPTION, m["subscription"])["Topics"])
            except JavaError as exc:
                problems.append(f"member {m['memberId']}: consumer protocol bytes not decoded: {exc.text}")
        members.append(member)
    return members, problems


@dataclass
class ModernGroup:
    """The persisted part of a consumer (KIP-848) or share group, replayed record by record."""

    kind: str
    epoch: int = 0
    assignment_epoch: int = -1
    members: Dict[str, Member] = field(default_factory=dict)
    #: member id -> [(topic id, partition)] (the target assignment records)
    target: Dict[str, TopicPartitions] = field(default_factory=dict)

    def _member(self, member_id: str) -> Member:
        """getOrMaybeCreateMember: a new member has ConsumerGroupMember.Builder's defaults (epoch 0, STABLE)."""
        member = self.members.get(member_id)
        if member is None:
            member = self.members[member_id] = Member(member_id, member_epoch=0, member_state="STABLE",
                                                      assignment=[])
        return member

    def member_metadata(self, member_id: str, value: Optional[Dict[str, Any]]) -> None:
        """XGroupMemberMetadata: who the member is; a tombstone removes it."""
        if value is None:
            self.members.pop(member_id, None)
            return
        member = self._member(member_id)
        member.client_id, member.client_host = value["ClientId"], value["ClientHost"]
        member.rack_id = value.get("RackId")
        member.group_instance_id = value.get("InstanceId")
        member.subscribed_topics = list(value["SubscribedTopicNames"])
        member.subscribed_topic_regex = value.get("SubscribedTopicRegex")
        if "RebalanceTimeoutMs" in value:
            member.rebalance_timeout_ms = value["RebalanceTimeoutMs"]
        classic = value.get("ClassicMemberMetadata")
        if classic:  # a classic-protocol member of a consumer group (KIP-848 upgrade path)
            member.session_timeout_ms = classic["SessionTimeoutMs"]

    def current_assignment(self, member_id: str, value: Optional[Dict[str, Any]]) -> None:
        """XGroupCurrentMemberAssignment: what the member owns; a tombstone marks it as leaving."""
        if value is None:
            member = self.members.get(member_id)
            if member is not None:
                member.member_epoch, member.assignment = LEAVE_GROUP_MEMBER_EPOCH, []
            return
        member = self._member(member_id)
        member.member_epoch = value["MemberEpoch"]
        member.member_state = MEMBER_STATES.get(value["State"], "UNKNOWN")
        member.assignment = _partitions(value["AssignedPartitions"], "TopicId")

    def target_member(self, member_id: str, value: Optional[Dict[str, Any]]) -> None:
        if value is None:
            self.target.pop(member_id, None)
        else:
            self.target[member_id] = _partitions(value["TopicPartitions"], "TopicId")

    @property
    def state(self) -> str:
        """ConsumerGroup.maybeUpdateGroupState / ShareGroup.maybeUpdateGroupState."""
        if not self.members:
            return "Empty"
        if self.kind == "share":
            return "Stable"
        if self.epoch > self.assignment_epoch:
            return "Assigning"
        for m in self.members.values():  # ModernGroupMember.isReconciledTo
            if m.member_state != "STABLE" or m.member_epoch != self.assignment_epoch:
                return "Reconciling"
        return "Stable"

    def resolved_members(self, names: Dict[str, str]) -> Tuple[List[Member], Set[str]]:
        """The members with topic ids replaced by names where `names` knows them; and the ids it does not."""
        unknown: Set[str] = set()

        def named(parts: Optional[TopicPartitions]) -> Optional[TopicPartitions]:
            if parts is None:
                return None
            unknown.update(t for t, _p in parts if t not in names)
            return sorted((names.get(t, t), p) for t, p in parts)

        out = []
        for member_id, m in sorted(self.members.items()):
            out.append(Member(**{**m.__dict__, "assignment": named(m.assignment),
                                 "target_assignment": named(self.target.get(member_id, []))}))
        return out, unknown
