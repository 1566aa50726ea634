"""Several copies of one partition (several brokers' data dirs, or copies of them), compared as Kafka's
replication would reconcile them.

The copy with the highest leader epoch (then the highest log end offset) is taken as the leader, or the
one named. Every other copy is a follower of it, and truncates where Kafka's follower would after
OffsetsForLeaderEpoch (``AbstractFetcherThread.getOffsetTruncationState``):

* the follower asks for the end offset of its latest epoch; the leader answers with
  ``LeaderEpochFileCache.endOffsetFor`` (its log end for its own latest epoch; else the start of the first
  epoch above the requested one, with the largest epoch at or below it);
* an undefined answer: the follower truncates to its high watermark;
* when the leader's epoch differs from the follower's, the follower looks up its own end offset for the
  leader's epoch and asks again with that epoch; once they agree, it truncates to the smaller of the
  two end offsets (never past its own log end).

Offsets at and after that point are the follower's diverged data (the leader never had them); offsets it
lacks below the leader's log end it would fetch. Kafka's truncation removes whole batches
(``LogSegment.truncateTo`` cuts the file at the position of the first batch whose last offset reaches the
truncation offset), so a batch that straddles the point is diverged from its base offset on. Batches below
the truncation point are compared byte for byte (CRC and bytes).

The merged log (:func:`merge_plan`, what ``kstore merge`` writes) is the leader's batches, with the batches
below the leader's first segment taken from a copy of the same lineage. Every offset of every copy that is
not in the merged log, byte for byte, is listed per copy with the reason (:attr:`Copy.left_out`); both
``kstore replicas`` and ``kstore merge`` report exactly those. Copies whose ``partition.metadata`` name
different topic ids are different topics (Kafka's ``Partition.checkOrSetTopicId`` refuses a log whose topic id
is not the partition's): each id's copies are reconciled on their own; a copy without ``partition.metadata``
(data written before Kafka 2.8) takes whatever id it is given (``UnifiedLog.assignTopicId``), so it goes with
the one id the other copies have (on its own when they have several).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.log.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    read_leader_epoch_checkpoint,
    read_partition_metadata,
)
from kstore_cli.log.logdir import Partition, resolve
from kstore_cli.record.reader import read_batches
from kstore_cli.log.scope import split_left_alone
from kstore_cli.log.unified_log import DataDirState, log_offsets

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
#: Why a copy's offsets are not in the merged log.
DIVERGED = "diverged"  # in the batch holding the truncation point or after it: Kafka's follower truncates them
DIFFERS = "differs"  # below the truncation point, but not the merged log's batch (other bytes, or none there)
REASONS = {DIVERGED: "diverged from the leader's lineage (at or after the truncation point)",
           DIFFERS: "below the truncation point, but not the merged log's batch (other bytes or none there)"}


def end_offset_for(epochs: List[Tuple[int, int]], requested: int, log_end_offset: int) -> Tuple[int, int]:
    """LeaderEpochFileCache.endOffsetFor: (epoch, end offset) for a requested epoch."""
    if requested == UNDEFINED_EPOCH or not epochs:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    latest = epochs[-1][0]
    if requested == latest:
        return requested, log_end_offset
    higher = next(((e, s) for e, s in epochs if e > requested), None)
    if higher is None:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    floor = [(e, s) for e, s in epochs if e <= requested]
    return (floor[-1][0] if floor else requested), higher[1]


def truncation_offset(leader: "Copy", follower: "Copy") -> Tuple[int, str]:
    """Where `follower` truncates when it follows `leader`, and the rule that decided it."""
    if not follower.epochs:
        return min(follower.high_watermark, follower.log_end_offset), "no leader epochs: the high watermark"
    requested = follower.epochs[-1][0]
    for _round in range(len(follower.epochs) + len(leader.epochs) + 1):
        epoch, end = end_offset_for(leader.epochs, requested, leader.log_end_offset)
        if end == UNDEFINED_OFFSET:
            return min(follower.high_watermark, follower.log_end_offset), \
                f"the leader knows no epoch at or below {requested}: the high watermark"
        follower_epoch, follower_end = end_offset_for(follower.epochs, epoch, follower.log_end_offset)
        if follower_end == UNDEFINED_OFFSET:
            return min(end, follower.log_end_offset), f"epoch {epoch} is unknown to the follower"
        if follower_epoch != epoch:
            requested = follower_epoch  # another round with the follower's epoch (KIP-279)
            continue
        return min(follower_end, end, follower.log_end_offset), \
            f"epoch {epoch} ends at {end} on the leader and at {follower_end} here"
    raise KstoreError("the leader epochs of the copies do not converge", path=follower.path)


@dataclass
class Copy:
    """One copy of the partition."""

    path: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    epochs: List[Tuple[int, int]]
    #: (base offset, last offset, crc, position, size, log) of every batch, in log order
    batches: List[Tuple[int, int, int, int, int, str]] = field(default_factory=list)
    role: str = "follower"
    truncate_to: Optional[int] = None
    rule: str = ""
    mismatches: List[int] = field(default_factory=list)  # base offsets whose batch differs below truncate_to
    topic_id: Optional[str] = None  # partition.metadata's; None when the copy has none (before Kafka 2.8)
    first_segment_base: Optional[int] = None
    #: (first, last, reason) of every offset range not in the merged log (see merge_plan)
    left_out: List[Tuple[int, int, str]] = field(default_factory=list)
    #: the batches behind left_out, in log order
    left_out_batches: List[Tuple[int, int, int, int, int, str]] = field(default_factory=list)

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else UNDEFINED_EPOCH

    @property
    def diverged(self) -> Optional[Tuple[int, int]]:
        """[first, last] offsets only this copy holds (what it truncates away), or None."""
        if self.truncate_to is None or self.truncate_to >= self.log_end_offset:
            return None
        return self.truncate_to, self.log_end_offset - 1

    def to_dict(self) -> dict:
        return {"path": self.path, "role": self.role, "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset, "high_watermark": self.high_watermark,
                "leader_epochs": [list(e) for e in self.epochs], "truncate_to": self.truncate_to, "rule": self.rule,
                "diverged": None if self.diverged is None else list(self.diverged),
                "mismatched_batches": self.mismatches, "topic_id": self.topic_id,
                "left_out": [{"first_offset": a, "last_offset": b, "reason": r} for a, b, r in self.left_out]}


@dataclass
class PartitionCopies:
    """Every copy of one partition, reconciled."""

    topic: str
    partition: int
    copies: List[Copy]
    #: the merged log: (copy, batch) in offset order (merge_plan)
    plan: List[Tuple[Copy, Tuple[int, int, int, int, int, str]]] = field(default_factory=list)
    donor: Optional[Copy] = None  # the copy the batches below the leader's first segment come from
    #: other topic ids found for this topic-partition among the paths -> their copies' paths
    other_topic_ids: Dict[str, List[str]] = field(default_factory=dict)

    @property
    def leader(self) -> Copy:
        return next(c for c in self.copies if c.role == "leader")

    @property
    def limit(self) -> int:
        """The leader's first segment's base offset: below it, the merged log's batches are the donor's."""
        leader = self.leader
        return leader.first_segment_base if leader.first_segment_base is not None else leader.log_end_offset

    @property
    def topic_id(self) -> Optional[str]:
        return next((c.topic_id for c in self.copies if c.topic_id is not None), None)

    @property
    def divergent(self) -> bool:
        """A copy holds offsets the merged log does not have, or other copies are another topic (id)."""
        return bool(self.other_topic_ids) or any(
            c.diverged is not None or c.mismatches or c.left_out for c in self.copies)

    def to_dict(self) -> dict:
        return {"type": "partition", "topic": self.topic, "partition": self.partition, "divergent": self.divergent,
                "leader": self.leader.path, "topic_id": self.topic_id, "other_topic_ids": self.other_topic_ids,
                "copies": [c.to_dict() for c in self.copies]}


def load_copy(partition: Partition) -> Copy:
    """A copy's offsets, leader epochs, topic id and batches (a damaged batch is refused)."""
    state = DataDirState(partition.data_dir, tolerant=True)
    offsets = log_offsets(partition, state)
    path = os.path.join(partition.path, LEADER_EPOCH_CHECKPOINT)
    epochs = read_leader_epoch_checkpoint(path) if os.path.exists(path) else []
    copy = Copy(partition.path, offsets.log_start_offset, offsets.log_end_offset, offsets.high_watermark,
                [(e, s) for e, s in epochs if s < offsets.log_end_offset])  # truncateFromEnd at load
    metadata = os.path.join(partition.path, PARTITION_METADATA)
    if os.path.exists(metadata):
        copy.topic_id = str(read_partition_metadata(metadata)["topicId"])
    copy.first_segment_base = partition.segments[0].base_offset if partition.segments else None
    for segment in partition.segments:
        for batch in read_batches(segment.log, check_crc=True):
            if not batch.is_valid:
                raise KstoreError(f"a damaged batch at offset {batch.base_offset} (run kstore salvage or "
                                  "rebuild-index --truncate on this copy first)", path=segment.log,
                                  position=batch.position)
            batch.ensure_valid_offsets()
            copy.batches.append((batch.base_offset, batch.last_offset, batch.crc, batch.position, batch.size,
                                 segment.log))
    return copy


def _same_bytes(a: Tuple, b: Tuple) -> bool:
    if a[:3] != b[:3] or a[4] != b[4]:
        return False
    with open(a[5], "rb") as fa, open(b[5], "rb") as fb:
        fa.seek(a[3])
        fb.seek(b[3])
        # The partition leader epoch (bytes 12..16) is the leader's to set; the rest is the batch.
        x, y = fa.read(a[4]), fb.read(b[4])
        return x[:12] + x[16:] == y[:12] + y[16:]


def reconcile(topic: str, partition: int, copies: List[Copy], leader_path: Optional[str] = None) -> PartitionCopies:
    """Choose the leader and apply Kafka's truncation rule to every other copy."""
    if leader_path is not None:
        chosen = [c for c in copies if os.path.realpath(c.path) == os.path.realpath(leader_path)]
        if not chosen:
            raise UsageError(f"--leader {leader_path} is not a copy of {topic}-{partition}")
        leader = chosen[0]
    else:
        leader = max(copies, key=lambda c: (c.latest_epoch, c.log_end_offset, c.high_watermark))
    leader.role = "leader"
    leader.truncate_to = leader.log_end_offset
    leader.rule = "chosen: " + ("--leader" if leader_path else "the highest leader epoch, then log end offset")
    by_base = {b[0]: b for b in leader.batches}
    for copy in copies:
        if copy is leader:
            continue
        copy.truncate_to, copy.rule = truncation_offset(leader, copy)
        for b in copy.batches:
            if b[1] >= copy.truncate_to:
                break
            other = by_base.get(b[0])
            if other is not None and not _same_bytes(b, other):
                copy.mismatches.append(b[0])
    pc = PartitionCopies(topic, partition, copies)
    pc.donor, pc.plan = merge_plan(pc)
    _left_out(pc)
    return pc


def _donor(pc: PartitionCopies, limit: int) -> Optional[Copy]:
    """The copy of the leader's lineage (no batch differing from the leader's, not truncated below `limit`)
    with the most history below `limit`, the leader's first segment."""
    best = None
    for c in pc.copies:
        if c.role == "leader" or c.truncate_to is None or c.truncate_to < limit or c.mismatches:
            continue
        below = [b for b in c.batches if limit > b[1] >= c.log_start_offset]
        if below and (best is None or below[0][0] < best[1]):
            best = (c, below[0][0])
    return best[0] if best else None


def merge_plan(pc: PartitionCopies) -> Tuple[Optional[Copy], List[Tuple[Copy, Tuple]]]:
    """The merged log: the donor's batches below the leader's first segment, then every leader batch."""
    leader, limit = pc.leader, pc.limit
    donor = _donor(pc, limit)
    plan: List[Tuple[Copy, Tuple]] = []
    if donor is not None:
        plan.extend((donor, b) for b in donor.batches if limit > b[1] >= donor.log_start_offset)
    plan.extend((leader, b) for b in leader.batches)
    return donor, plan


def _left_out(pc: PartitionCopies) -> None:
    """Fill each copy's left_out: its batches (from its log start) that the merged log does not hold byte for
    byte. A batch reaching the truncation point is diverged whole, as Kafka's truncation removes it whole."""
    merged = {b[0]: (c, b) for c, b in pc.plan}
    for copy in pc.copies:
        copy.left_out, copy.left_out_batches = [], []
        if copy.role == "leader":
            continue
        for b in copy.batches:
            if b[1] < copy.log_start_offset:
                continue
            if b[1] >= copy.truncate_to:
                reason = DIVERGED
            else:
                source = merged.get(b[0])
                if source is not None and (source[1] is b or _same_bytes(b, source[1])):
                    continue
                reason = DIFFERS
            first = max(b[0], copy.log_start_offset)
            copy.left_out_batches.append(b)
            if copy.left_out and copy.left_out[-1][2] == reason and copy.left_out[-1][1] + 1 == first:
                copy.left_out[-1] = (copy.left_out[-1][0], b[1], reason)
            else:
                copy.left_out.append((first, b[1], reason))


def find_copies(paths: Iterable[str]) -> Tuple[Dict[Tuple[str, int], List[Partition]], List[Tuple[str, str]]]:
    """(partitions present in two or more of the given dirs, by (topic, partition); the (partition path,
    reason) of every log the walk met and left out, as no command may rewrite it: scope.split_left_alone)."""
    found: Dict[Tuple[str, int], List[Partition]] = {}
    targets, skipped = split_left_alone(resolve(paths))
    for target in targets:
        p = target.partition
        if p.partition < 0 or p.name.endswith(("-delete", "-future", "-stray")):
            continue
        bucket = found.setdefault((p.topic, p.partition), [])
        if all(os.path.realpath(q.path) != os.path.realpath(p.path) for q in bucket):
            bucket.append(p)
    return {k: v for k, v in sorted(found.items()) if len(v) >= 2}, skipped


def no_copies(paths: Iterable[str], skipped: List[Tuple[str, str]]) -> UsageError:
    """The usage error of a walk that found no partition with two or more copies (naming what it left out)."""
    reasons = {reason: [path for path, why in skipped if why == reason] for _path, reason in skipped}
    aside = "".join(f"; left out: {', '.join(where)}: {reason}" for reason, where in reasons.items())
    return UsageError("no partition has two or more copies in " + ", ".join(paths) + aside)


def by_topic_id(copies: List[Copy]) -> Dict[Optional[str], List[Copy]]:
    """The copies grouped by topic id; copies without one join the only id there is (else stay apart, as None)."""
    groups: Dict[Optional[str], List[Copy]] = {}
    for c in copies:
        groups.setdefault(c.topic_id, []).append(c)
    ids = [k for k in groups if k is not None]
    if len(ids) == 1 and None in groups:
        groups[ids[0]] = [c for c in copies if c.topic_id in (None, ids[0])]
        del groups[None]
    return groups


def compare(paths: Iterable[str], leader_path: Optional[str] = None
            ) -> Tuple[List[PartitionCopies], List[Tuple[str, str]]]:
    """(every partition with two or more copies among `paths`, reconciled (per topic id: copies with
    different topic ids are different topics, each listed with the other ids); the logs left out, with why:
    :func:`find_copies`). None found is a usage error (:func:`no_copies`)."""
    out = []
    copies, skipped = find_copies(paths)
    if not copies:
        raise no_copies(paths, skipped)
    for (topic, partition), parts in copies.items():
        groups = by_topic_id([load_copy(p) for p in parts])
        for tid, group in groups.items():
            leader = leader_path if leader_path and any(
                os.path.realpath(c.path) == os.path.realpath(leader_path) for c in group) else None
            pc = reconcile(topic, partition, group, leader)
            pc.other_topic_ids = {k or "none": [c.path for c in g] for k, g in groups.items() if k != tid}
            out.append(pc)
    return out, skipped
