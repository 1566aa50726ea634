"""``kafka-reassign-partitions.sh --generate``, offline, for a cluster that lost brokers: the reassignment that
restores each partition's replication factor, moving the fewest bytes.

Inputs: the KRaft metadata image (partitions' replicas and ISR, brokers registered and fenced: the newest
``__cluster_metadata-0`` among the data dirs given, by end offset) and the copies in the data dirs given (which
broker holds which partition, and its ``UnifiedLog.size``; a broker is its data dirs' ``meta.properties`` node id; a
copy whose ``partition.metadata`` names another topic id is an older incarnation of the topic and does not count).

Per partition with a replica on a lost broker (the live brokers are ``--brokers``, else the registered unfenced
ones):

* the live replicas stay; the first of them (the preferred leader) is the one holding the most bytes;
* each lost replica is replaced by a live broker outside the replica set: first those already holding a copy
  (a new replica fetches the leader's log minus what it already has: ``max(0, leader bytes - its bytes)``, so
  taking the largest holdings first moves the fewest bytes), then brokers on racks the partition does not use
  yet (when racks are registered), then the brokers with the fewest replicas, then the lowest id;
* a partition with no live replica, or whose live replicas are all known to hold no copy (the data dir the
  metadata places the replica in was given, or all the dirs its broker registered: else it may hold one we do not
  see), cannot be restored by a reassignment (a new replica fetches from a leader, and there is none with the
  data): it is named, with the copies outside its replica set, for ``kstore replicas``/``merge``/``salvage``;
* so is one with too few live brokers outside its replica set to restore its replication factor;
* a partition whose live replicas are all out of the ISR gets its plan, and a note: it has no leader until an
  unclean leader election (only ISR members are elected), so the new replicas cannot fetch until then.

The JSON is ``ReassignPartitionsCommand.formatAsReassignmentJson``'s (``{"version":1,"partitions":[{"topic",
"partition","replicas","log_dirs"}]}``, partitions by topic then partition, ``log_dirs`` all ``"any"``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from kstore_cli.cluster.metadata_image import RESERVED_DIRECTORY_IDS, MetadataImage
from kstore_cli.cluster.metadata_loader import LoadResult, find_metadata, load_image
from kstore_cli.errors import KstoreError, UsageError
from kstore_cli.log import names
from kstore_cli.log.checkpoint import PARTITION_METADATA, read_partition_metadata
from kstore_cli.operations.log_dirs import is_future, log_size
from kstore_cli.operations.startup import Survey, survey

ANY_LOG_DIR = "any"
TopicPartition = Tuple[str, int]
#: what cannot be restored by a reassignment points here
REPAIR = "kstore replicas / merge / salvage on the copies"


@dataclass
class Move:
    """One partition's reassignment."""

    topic: str
    partition: int
    current: List[int]
    proposed: List[int]
    #: new broker -> bytes it has to fetch (the leader's bytes minus its own copy's)
    fetch_bytes: Dict[int, int]
    #: the largest live copy's bytes (None: no live replica's data dirs were given)
    leader_bytes: Optional[int]
    #: what else it takes (no live replica in the ISR: an unclean leader election first)
    note: Optional[str] = None

    @property
    def bytes_moved(self) -> int:
        return sum(self.fetch_bytes.values())


@dataclass
class Unrestorable:
    topic: str
    partition: int
    replicas: List[int]
    reason: str


@dataclass
class ReassignPlan:
    metadata_dir: str
    metadata_end_offset: int
    live_brokers: List[int]
    moves: List[Move] = field(default_factory=list)
    unrestorable: List[Unrestorable] = field(default_factory=list)
    #: facts that make the plan incomplete (metadata problems, data dirs without a node id): exit 1
    problems: List[str] = field(default_factory=list)

    @property
    def bytes_moved(self) -> int:
        return sum(m.bytes_moved for m in self.moves)


def reassignment_json(assignment: Dict[TopicPartition, List[int]]) -> dict:
    """ReassignPartitionsCommand.formatAsReassignmentJson (no log dir assignment: every log dir "any")."""
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": [ANY_LOG_DIR] * len(r)}
        for (t, p), r in sorted(assignment.items())]}


def _newest_metadata(found: Survey) -> LoadResult:
    """The image of the most advanced ``__cluster_metadata-0`` among the data dirs (highest end offset)."""
    candidates = sorted(info.path for info in found.data_dirs.values()
                        if os.path.isdir(os.path.join(info.path, names.METADATA_PARTITION_DIR)))
    if not candidates:
        raise UsageError(f"no {names.METADATA_PARTITION_DIR} in the given paths: add a KRaft node's metadata log dir")
    loaded = [load_image(find_metadata([c])) for c in candidates]
    return max(loaded, key=lambda r: r.source["end_offset"])  # the first of equals: candidates in path order


def _topic_ids(image: MetadataImage) -> Dict[str, str]:
    return {t["name"]: t["id"] for t in image.topics.by_id.values()}


@dataclass
class Holdings:
    """The copies in the data dirs given: bytes per partition and broker, and which data dirs were given."""

    #: (topic, partition) -> {broker: bytes of its current copy}
    sizes: Dict[TopicPartition, Dict[int, int]] = field(default_factory=dict)
    #: broker -> the directory ids (meta.properties) of its data dirs given
    dir_ids: Dict[int, Set[str]] = field(default_factory=dict)

    def complete(self, image: MetadataImage, broker: int, directory: Optional[str]) -> bool:
        """Whether the data dirs given show all of `broker`'s copies of a partition: the dir the metadata places
        the replica in was given, or every dir the broker registered. Else the broker may hold a copy we do
        not see, and is never said to hold none."""
        given = self.dir_ids.get(broker, set())
        if directory is not None and directory not in RESERVED_DIRECTORY_IDS and directory in given:
            return True
        registered = set((image.cluster.brokers.get(broker) or {}).get("log_dirs") or [])
        return bool(registered) and registered <= given


def holdings(found: Survey, topic_ids: Dict[str, str]) -> Holdings:
    """Each broker's current copies (bytes) of the image's topics, and the directory ids of its data dirs."""
    out = Holdings()
    for broker in found.brokers:
        if broker.node_id is None:
            continue
        out.dir_ids.setdefault(broker.node_id, set()).update(
            info.directory_id for info in broker.data_dirs if info.directory_id)
        for info in broker.data_dirs:
            for p in info.partitions:
                if p.partition < 0 or is_future(p) or p.topic not in topic_ids:
                    continue
                meta = os.path.join(p.path, PARTITION_METADATA)
                try:
                    if os.path.exists(meta) and str(read_partition_metadata(meta)["topicId"]) != topic_ids[p.topic]:
                        continue  # an older incarnation of the topic: Partition.checkOrSetTopicId refuses it
                except KstoreError:
                    continue
                sizes = out.sizes.setdefault((p.topic, p.partition), {})
                sizes[broker.node_id] = max(sizes.get(broker.node_id, 0), log_size(p))
    return out


def _replica_counts(image: MetadataImage) -> Dict[int, int]:
    counts: Dict[int, int] = {}
    for t in image.topics.by_id.values():
        for p in t["partitions"].values():
            for r in p["replicas"]:
                counts[r] = counts.get(r, 0) + 1
    return counts


class _Placer:
    """Chooses new replicas: fewest bytes to fetch, then an unused rack, then the fewest replicas, then the id."""

    def __init__(self, image: MetadataImage, live: List[int]) -> None:
        self.live = live
        self.racks = {b: (image.cluster.brokers.get(b) or {}).get("rack") for b in live}
        counts = _replica_counts(image)
        self.load = {b: counts.get(b, 0) for b in live}

    def place(self, replicas: List[int], lost: int, sizes: Dict[int, int], leader_bytes: int
              ) -> Optional[Dict[int, int]]:
        """{new broker: bytes it fetches} for `lost` replacements, or None when too few live brokers remain."""
        chosen: Dict[int, int] = {}
        for _ in range(lost):
            used_racks = {self.racks.get(b) for b in list(replicas) + list(chosen)} - {None}
            free = [b for b in self.live if b not in replicas and b not in chosen]
            if not free:
                return None
            best = min(free, key=lambda b: (max(0, leader_bytes - sizes.get(b, 0)),
                                            self.racks.get(b) in used_racks, self.load[b], b))
            chosen[best] = max(0, leader_bytes - sizes.get(best, 0))
            self.load[best] += 1
        return chosen


def _no_copy(topic: str, partition: int, replicas: List[int], why: str, sizes: Dict[int, int]) -> Unrestorable:
    outside = ", ".join(f"broker {b} ({n} bytes)" for b, n in sorted(sizes.items()) if b not in replicas)
    where = f"; copies outside the replica set: {outside}" if outside else ""
    return Unrestorable(topic, partition, replicas, f"{why}{where}: a reassignment cannot restore it ({REPAIR})")


def _plan_partition(topic: str, partition: int, registration: dict, live: Set[int], sizes: Dict[int, int],
                    complete: Callable[[int, Optional[str]], bool], placer: _Placer) -> "Move | Unrestorable":
    replicas: List[int] = registration["replicas"]
    dirs = dict(zip(replicas, registration["directories"]))
    alive = [r for r in replicas if r in live]
    lost = [r for r in replicas if r not in live]
    if not alive:
        return _no_copy(topic, partition, replicas, f"every replica ({_ids(lost)}) is on a lost broker", sizes)
    if all(r not in sizes and complete(r, dirs.get(r)) for r in alive):
        return _no_copy(topic, partition, replicas, f"no live replica ({_ids(alive)}) holds a copy", sizes)
    leader = max(alive, key=lambda r: (sizes.get(r, -1), -alive.index(r)))
    leader_bytes = max((sizes[r] for r in alive if r in sizes), default=None)
    new = placer.place(alive, len(lost), sizes, leader_bytes or 0)
    if new is None:
        return Unrestorable(topic, partition, replicas,
                            f"{len(replicas)} replicas but only {len(placer.live)} live brokers: the replication "
                            "factor cannot be restored (name more live brokers with --brokers)")
    proposed = [leader] + [r for r in alive if r != leader] + list(new)
    move = Move(topic, partition, list(replicas), proposed, new, leader_bytes)
    if not any(r in registration["isr"] for r in alive):
        # PartitionChangeBuilder elects a leader from the ISR only: the new replicas have no leader to fetch from
        move.note = (f"no live replica is in the ISR {registration['isr']}: the partition stays offline until an "
                     f"unclean leader election (kafka-leader-election.sh --election-type unclean) makes broker "
                     f"{leader} its leader, and the reassignment completes only then")
    return move


def _ids(brokers: Iterable[int]) -> str:
    return ",".join(str(b) for b in brokers)


def generate(paths: Iterable[str], brokers: Optional[List[int]] = None, topics: Optional[str] = None) -> ReassignPlan:
    """The reassignment restoring every partition (of `topics`, comma-separated globs) with a replica on a lost
    broker; `brokers` the live ones (None: the image's registered unfenced brokers)."""
    paths = list(paths)
    found = survey(paths, topics=topics)
    result = _newest_metadata(found)
    image = result.image
    live = sorted(set(brokers) if brokers is not None else
                  {b for b, reg in image.cluster.brokers.items() if not reg["fenced"]})
    plan = ReassignPlan(result.source["metadata_dir"], result.source["end_offset"], live)
    plan.problems.extend(f"metadata: {p}" for p in result.problems)
    unnamed = [info.path for b in found.brokers if b.node_id is None for info in b.data_dirs]
    if unnamed:
        plan.problems.append("no node id in meta.properties, their copies are not counted: " + ", ".join(unnamed))
    held = holdings(found, _topic_ids(image))
    placer = _Placer(image, live)
    live_set = set(live)
    for t in sorted(image.topics.by_id.values(), key=lambda t: t["name"]):
        if not found.wanted(t["name"]):
            continue
        for n, p in sorted(t["partitions"].items()):
            if all(r in live_set for r in p["replicas"]):
                continue
            out = _plan_partition(t["name"], n, p, live_set, held.sizes.get((t["name"], n), {}),
                                  lambda b, d: held.complete(image, b, d), placer)
            (plan.moves if isinstance(out, Move) else plan.unrestorable).append(out)
    return plan
