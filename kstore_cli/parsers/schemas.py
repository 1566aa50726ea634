"""Kafka's message schemas, as of the Kafka build the goldens came from (4.0.0-SNAPSHOT, October 2024).

Facts (names, types, versions, order, tags, defaults) are those of Kafka's message JSON files; the
form is ours: ``M(name, validVersions, flexibleVersions, fields)`` and ``F(name, type, versions, ...)``.
Coordinator keys are declared with the versions Kafka gave them then: a key's version IS its record type.
"""

from __future__ import annotations

from typing import Dict, Tuple

from kstore_cli.parsers.schema import F, Field, Message

M = Message


def _topic_partitions(name: str = "TopicPartitions") -> Field:
    return F(name, "[]TopicPartitions", fields=[F("TopicId", "uuid"), F("Partitions", "[]int32")])


# ----------------------------------------------------------------------------- group coordinator

OFFSET_COMMIT_KEY = M("OffsetCommitKey", "0-1", "none", [
    F("Group", "string", "0-1"), F("Topic", "string", "0-1"), F("Partition", "int32", "0-1")])
OFFSET_COMMIT_VALUE = M("OffsetCommitValue", "0-4", "4+", [
    F("Offset", "int64"),
    F("LeaderEpoch", "int32", "3+", default=-1),
    F("Metadata", "string"),
    F("CommitTimestamp", "int64"),
    F("ExpireTimestamp", "int64", "1", default=-1),
])
GROUP_METADATA_KEY = M("GroupMetadataKey", "2", "none", [F("Group", "string", "2")])
GROUP_METADATA_VALUE = M("GroupMetadataValue", "0-4", "4+", [
    F("ProtocolType", "string"),
    F("Generation", "int32"),
    F("Protocol", "string", nullable="0+"),
    F("Leader", "string", nullable="0+"),
    F("CurrentStateTimestamp", "int64", "2+", default=-1),
    F("Members", "[]MemberMetadata", fields=[
        F("MemberId", "string"),
        F("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
        F("ClientId", "string"),
        F("ClientHost", "string"),
        F("RebalanceTimeout", "int32", "1+"),
        F("SessionTimeout", "int32"),
        F("Subscription", "bytes"),
        F("Assignment", "bytes"),
    ]),
])


def _group_key(name: str, record_type: int, member: bool = False) -> Message:
    v = str(record_type)
    fields = [F("GroupId", "string", v)]
    if member:
        fields.append(F("MemberId", "string", v))
    return M(name, v, "none", fields)


CONSUMER_GROUP_METADATA_VALUE = M("ConsumerGroupMetadataValue", "0", "0+", [F("Epoch", "int32")])
CONSUMER_GROUP_PARTITION_METADATA_VALUE = M("ConsumerGroupPartitionMetadataValue", "0", "0+", [
    F("Topics", "[]TopicMetadata", fields=[
        F("TopicId", "uuid"),
        F("TopicName", "string"),
        F("NumPartitions", "int32"),
        F("PartitionMetadata", "[]PartitionMetadata", fields=[
            F("Partition", "int32"), F("Racks", "[]string")]),
    ]),
])
CONSUMER_GROUP_MEMBER_METADATA_VALUE = M("ConsumerGroupMemberMetadataValue", "0", "0+", [
    F("InstanceId", "string", nullable="0+"),
    F("RackId", "string", nullable="0+"),
    F("ClientId", "string"),
    F("ClientHost", "string"),
    F("SubscribedTopicNames", "[]string"),
    F("SubscribedTopicRegex", "string", nullable="0+"),
    F("RebalanceTimeoutMs", "int32", default=-1),
    F("ServerAssignor", "string", nullable="0+"),
    F("ClassicMemberMetadata", "ClassicMemberMetadata", nullable="0+", default="null",
      tagged="0+", tag=0, fields=[
          F("SupportedProtocols", "[]ClassicProtocol", fields=[
              F("Name", "string"), F("Metadata", "bytes")]),
      ]),
])
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = M(
    "ConsumerGroupTargetAssignmentMetadataValue", "0", "0+", [F("AssignmentEpoch", "int32")])
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = M(
    "ConsumerGroupTargetAssignmentMemberValue", "0", "0+", [_topic_partitions("TopicPartitions")])
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = M("ConsumerGroupCurrentMemberAssignmentValue", "0", "0+", [
    F("MemberEpoch", "int32"),
    F("PreviousMemberEpoch", "int32"),
    F("State", "int8"),
    _topic_partitions("AssignedPartitions"),
    _topic_partitions("PartitionsPendingRevocation"),
])
SHARE_GROUP_PARTITION_METADATA_VALUE = M("ShareGroupPartitionMetadataValue", "0", "0+", [
    F("Topics", "[]TopicMetadata", fields=[
        F("TopicId", "uuid"),
        F("TopicName", "string"),
        F("NumPartitions", "int32"),
        F("PartitionMetadata", "[]PartitionMetadata", fields=[
            F("Partition", "int32"), F("Racks", "[]string")]),
    ]),
])
SHARE_GROUP_MEMBER_METADATA_VALUE = M("ShareGroupMemberMetadataValue", "0", "0+", [
    F("RackId", "string", nullable="0+"),
    F("ClientId", "string"),
    F("ClientHost", "string"),
    F("SubscribedTopicNames", "[]string"),
])
SHARE_GROUP_METADATA_VALUE = M("ShareGroupMetadataValue", "0", "0+", [F("Epoch", "int32")])
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = M(
    "ShareGroupTargetAssignmentMetadataValue", "0", "0+", [F("AssignmentEpoch", "int32")])
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = M(
    "ShareGroupTargetAssignmentMemberValue", "0", "0+", [_topic_partitions("TopicPartitions")])
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = M("ShareGroupCurrentMemberAssignmentValue", "0", "0+", [
    F("MemberEpoch", "int32"),
    F("PreviousMemberEpoch", "int32"),
    F("State", "int8"),
    _topic_partitions("AssignedPartitions"),
])

#: record type -> (key message, value message), as GroupCoordinatorRecordSerde knew them in Oct 2024.
GROUP_COORDINATOR_RECORDS: Dict[int, Tuple[Message, Message]] = {
    0: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    1: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    2: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE),
    3: (_group_key("ConsumerGroupMetadataKey", 3), CONSUMER_GROUP_METADATA_VALUE),
    4: (_group_key("ConsumerGroupPartitionMetadataKey", 4), CONSUMER_GROUP_PARTITION_METADATA_VALUE),
    5: (_group_key("ConsumerGroupMemberMetadataKey", 5, True), CONSUMER_GROUP_MEMBER_METADATA_VALUE),
    6: (_group_key("ConsumerGroupTargetAssignmentMetadataKey", 6),
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    7: (_group_key("ConsumerGroupTargetAssignmentMemberKey", 7, True),
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    8: (_group_key("ConsumerGroupCurrentMemberAssignmentKey", 8, True),
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
    9: (_group_key("ShareGroupPartitionMetadataKey", 9), SHARE_GROUP_PARTITION_METADATA_VALUE),
    10: (_group_key("ShareGroupMemberMetadataKey", 10, True), SHARE_GROUP_MEMBER_METADATA_VALUE),
    11: (_group_key("ShareGroupMetadataKey", 11), SHARE_GROUP_METADATA_VALUE),
    12: (_group_key("ShareGroupTargetAssignmentMetadataKey", 12), SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    13: (_group_key("ShareGroupTargetAssignmentMemberKey", 13, True), SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    14: (_group_key("ShareGroupCurrentMemberAssignmentKey", 14, True),
         SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
}

# ----------------------------------------------------------------------------- consumer protocol

CONSUMER_PROTOCOL_SUBSCRIPTION = M("ConsumerProtocolSubscription", "0-3", "none", [
    F("Topics", "[]string"),
    F("UserData", "bytes", nullable="0+", default="null"),
    F("OwnedPartitions", "[]TopicPartition", "1+", fields=[
        F("Topic", "string", "1+"), F("Partitions", "[]int32", "1+")]),
    F("GenerationId", "int32", "2+", default=-1),
    F("RackId", "string", "3+", nullable="3+", default="null"),
])
CONSUMER_PROTOCOL_ASSIGNMENT = M("ConsumerProtocolAssignment", "0-3", "none", [
    F("AssignedPartitions", "[]TopicPartition", fields=[F("Topic", "string"), F("Partitions", "[]int32")]),
    F("UserData", "bytes", nullable="0+", default="null"),
])

# ----------------------------------------------------------------------------- share coordinator

_STATE_BATCH = [F("FirstOffset", "int64"), F("LastOffset", "int64"), F("DeliveryState", "int8"),
                F("DeliveryCount", "int16")]
SHARE_SNAPSHOT_KEY = M("ShareSnapshotKey", "0", "none", [
    F("GroupId", "string", "0"), F("TopicId", "uuid", "0"), F("Partition", "int32", "0")])
SHARE_UPDATE_KEY = M("ShareUpdateKey", "1", "none", [
    F("GroupId", "string", "1"), F("TopicId", "uuid", "1"), F("Partition", "int32", "1")])
SHARE_SNAPSHOT_VALUE = M("ShareSnapshotValue", "0", "0+", [
    F("SnapshotEpoch", "int32"), F("StateEpoch", "int32"), F("LeaderEpoch", "int32"),
    F("StartOffset", "int64"), F("StateBatches", "[]StateBatch", fields=_STATE_BATCH)])
SHARE_UPDATE_VALUE = M("ShareUpdateValue", "0", "0+", [
    F("SnapshotEpoch", "int32"), F("LeaderEpoch", "int32"), F("StartOffset", "int64"),
    F("StateBatches", "[]StateBatch", fields=_STATE_BATCH)])

SHARE_COORDINATOR_RECORDS: Dict[int, Tuple[Message, Message]] = {
    0: (SHARE_SNAPSHOT_KEY, SHARE_SNAPSHOT_VALUE),
    1: (SHARE_UPDATE_KEY, SHARE_UPDATE_VALUE),
}

# ----------------------------------------------------------------------------- transaction log

TRANSACTION_LOG_KEY = M("TransactionLogKey", "0", "none", [F("TransactionalId", "string")])
TRANSACTION_LOG_VALUE = M("TransactionLogValue", "0-1", "1+", [
    F("ProducerId", "int64"),
    F("PreviousProducerId", "int64", "1+", tagged="1+", tag=0, default=-1),
    F("NextProducerId", "int64", "1+", tagged="1+", tag=1, default=-1),
    F("ProducerEpoch", "int16"),
    F("TransactionTimeoutMs", "int32"),
    F("TransactionStatus", "int8"),
    F("TransactionPartitions", "[]PartitionsSchema", nullable="0+", fields=[
        F("Topic", "string"), F("PartitionIds", "[]int32")]),
    F("TransactionLastUpdateTimestampMs", "int64"),
    F("TransactionStartTimestampMs", "int64"),
    F("ClientTransactionVersion", "int16", "1+", tagged="1+", tag=2, default=0),
])

# ----------------------------------------------------------------------------- KRaft control records

LEADER_CHANGE_MESSAGE = M("LeaderChangeMessage", "0", "0+", [
    F("Version", "int16"),
    F("LeaderId", "int32"),
    F("Voters", "[]Voter", fields=[F("VoterId", "int32")]),
    F("GrantingVoters", "[]Voter", fields=[F("VoterId", "int32")]),
])
SNAPSHOT_HEADER_RECORD = M("SnapshotHeaderRecord", "0", "0+", [
    F("Version", "int16"), F("LastContainedLogTimestamp", "int64")])
SNAPSHOT_FOOTER_RECORD = M("SnapshotFooterRecord", "0", "0+", [F("Version", "int16")])
KRAFT_VERSION_RECORD = M("KRaftVersionRecord", "0", "0+", [F("Version", "int16"), F("KRaftVersion", "int16")])
VOTERS_RECORD = M("VotersRecord", "0", "0+", [
    F("Version", "int16"),
    F("Voters", "[]Voter", fields=[
        F("VoterId", "int32"),
        F("VoterDirectoryId", "uuid"),
        F("Endpoints", "[]Endpoint", fields=[F("Name", "string"), F("Host", "string"), F("Port", "uint16")]),
        F("KRaftVersionFeature", "KRaftVersionFeature", fields=[
            F("MinSupportedVersion", "int16"), F("MaxSupportedVersion", "int16")]),
    ]),
])

# Cluster metadata records: kstore_cli/parsers/metadata_records.py, generated from Kafka's schema files.
