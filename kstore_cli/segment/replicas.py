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
lacks below the leader's log end it would fetch. Batches below the truncation point are compared byte
for byte (CRC and bytes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.segment.checkpoint import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from kstore_cli.segment.logdir import Partition, resolve
from kstore_cli.segment.reader import read_batches
from kstore_cli.segment.scope import left_alone_reason
from kstore_cli.segment.unified_log import DataDirState, log_offsets

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


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
        return {"path": self.path, "role": self.role, "logStartOffset": self.log_start_offset,
                "logEndOffset": self.log_end_offset, "highWatermark": self.high_watermark,
                "leaderEpochs": [list(e) for e in self.epochs], "truncateTo": self.truncate_to, "rule": self.rule,
                "diverged": None if self.diverged is None else list(self.diverged),
                "mismatchedBatches": self.mismatches}


@dataclass
class PartitionCopies:
    """Every copy of one partition, reconciled."""

    topic: str
    partition: int
    copies: List[Copy]

    @property
    def leader(self) -> Copy:
        return next(c for c in self.copies if c.role == "leader")

    @property
    def divergent(self) -> bool:
        return any(c.diverged is not None or c.mismatches for c in self.copies)

    def to_dict(self) -> dict:
        return {"type": "partition", "topic": self.topic, "partition": self.partition, "divergent": self.divergent,
                "leader": self.leader.path, "copies": [c.to_dict() for c in self.copies]}


def load_copy(partition: Partition) -> Copy:
    state = DataDirState(partition.data_dir, tolerant=True)
    offsets = log_offsets(partition, state)
    path = os.path.join(partition.path, LEADER_EPOCH_CHECKPOINT)
    epochs = read_leader_epoch_checkpoint(path) if os.path.exists(path) else []
    copy = Copy(partition.path, offsets.log_start_offset, offsets.log_end_offset, offsets.high_watermark,
                [(e, s) for e, s in epochs if s < offsets.log_end_offset])  # truncateFromEnd at load
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
    return PartitionCopies(topic, partition, copies)


def find_copies(paths: Iterable[str]) -> Dict[Tuple[str, int], List[Partition]]:
    """Partitions present in two or more of the given dirs, by (topic, partition)."""
    found: Dict[Tuple[str, int], List[Partition]] = {}
    for target in resolve(paths):
        p = target.partition
        if p.partition < 0 or p.name.endswith(("-delete", "-future", "-stray")) or left_alone_reason(p) is not None:
            continue
        bucket = found.setdefault((p.topic, p.partition), [])
        if all(os.path.realpath(q.path) != os.path.realpath(p.path) for q in bucket):
            bucket.append(p)
    return {k: v for k, v in sorted(found.items()) if len(v) >= 2}


def compare(paths: Iterable[str], leader_path: Optional[str] = None) -> List[PartitionCopies]:
    """Every partition with two or more copies among `paths`, reconciled."""
    out = []
    for (topic, partition), parts in find_copies(paths).items():
        leader = leader_path if leader_path and any(
            os.path.realpath(p.path) == os.path.realpath(leader_path) for p in parts) else None
        out.append(reconcile(topic, partition, [load_copy(p) for p in parts], leader))
    return out
