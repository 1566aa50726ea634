"""kstore reassign --generate: a plan ReassignPartitionsCommand accepts (its parsePartitionReassignmentData and
parseExecuteAssignmentArgs rules), that restores every replication factor, moves the fewest bytes (checked against
every other choice), spreads new replicas, and names what no reassignment can restore."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from kstore_cli.operations.reassign import generate, reassignment_json
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from tests.make_metadata_cluster import CLUSTER_ID, _batches, broker, partition, rec, uid

T = 1_700_000_000_000
TOPIC_IDS = {"orders": uid(1), "lost": uid(2), "empty": uid(3), "wide": uid(4)}


def dir_id(node: int) -> str:
    return uid(200 + node)


def write_metadata(data_dir: Path, brokers: Dict[int, Tuple[bool, Optional[str]]],
                   topics: Dict[str, List[List[int]]], extra_dirs: Dict[int, str] = {},
                   isrs: Optional[Dict[Tuple[str, int], List[int]]] = None) -> None:
    """A KRaft metadata log: `brokers` id -> (fenced, rack), each registered with its data dir (dir_id) and those of
    `extra_dirs`; `topics` name -> each partition's replicas (all in the ISR, but for `isrs`)."""
    regs = [broker(b, 10 + b, [dir_id(b)] + ([extra_dirs[b]] if b in extra_dirs else []), rack)
            for b, (_f, rack) in sorted(brokers.items())]
    unfence = [rec("UnfenceBrokerRecord", 0, Id=b, Epoch=10 + b) for b, (fenced, _r) in sorted(brokers.items())
               if not fenced]
    history = [("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=21)]),
               ("data", regs)] + ([("data", unfence)] if unfence else [])
    for name, parts in topics.items():
        history.append(("data", [rec("TopicRecord", 0, Name=name, TopicId=TOPIC_IDS[name])]
                        + [partition(TOPIC_IDS[name], n, r, [], version=0) for n, r in enumerate(parts)]))
    for (name, n), isr in (isrs or {}).items():
        history.append(("data", [rec("PartitionChangeRecord", 0, PartitionId=n, TopicId=TOPIC_IDS[name], Isr=isr)]))
    (data_dir / "__cluster_metadata-0").mkdir(parents=True)
    (data_dir / "__cluster_metadata-0" / f"{0:020d}.log").write_bytes(_batches(history)[0])


def write_copy(data_dir: Path, topic: str, n: int, value_bytes: int, topic_id: Optional[str] = None) -> int:
    """A partition copy holding one batch with a `value_bytes` value; its .log size."""
    part = data_dir / f"{topic}-{n}"
    part.mkdir(parents=True)
    data = build_v2_batch([RecordSpec(0, T, b"k", b"v" * value_bytes)])
    (part / f"{0:020d}.log").write_bytes(data)
    (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id or TOPIC_IDS[topic]}\n")
    return len(data)


def data_dir(root: Path, node: int) -> Path:
    d = root / f"broker-{node}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER_ID}\nnode.id={node}\ndirectory.id={dir_id(node)}\n")
    return d


@pytest.fixture()
def cluster(tmp_path):
    """Brokers 1-5 registered, 3 fenced (lost). orders-0 [1,2,3]: broker 1 holds 1000 B, broker 2 3000 B, broker 4
    a 2000 B copy outside the replica set, broker 5 a copy of another incarnation (other topic id). orders-1 [2,3,4],
    orders-2 [4,5,1] (nothing lost, on broker 1). lost-0 [3]: only on the lost broker. empty-0 [3,1]: broker 1 holds no copy."""
    write_metadata(data_dir(tmp_path, 1), {b: (b == 3, None) for b in range(1, 6)},
                   {"orders": [[1, 2, 3], [2, 3, 4], [4, 5, 1]], "lost": [[3]], "empty": [[3, 1]]})
    sizes = {}
    sizes[(1, 0)] = write_copy(data_dir(tmp_path, 1), "orders", 0, 1000)
    sizes[(2, 0)] = write_copy(data_dir(tmp_path, 2), "orders", 0, 3000)
    sizes[(4, 0)] = write_copy(data_dir(tmp_path, 4), "orders", 0, 2000)
    sizes[(5, 0)] = write_copy(data_dir(tmp_path, 5), "orders", 0, 2900, topic_id=uid(77))
    sizes[(2, 1)] = write_copy(data_dir(tmp_path, 2), "orders", 1, 500)
    sizes[(4, 1)] = write_copy(data_dir(tmp_path, 4), "orders", 1, 700)
    sizes[(1, 2)] = write_copy(data_dir(tmp_path, 1), "orders", 2, 800)
    return tmp_path, sizes


# ---- ReassignPartitionsCommand's parsing rules ----------------------------------------------------------------

def parse_reassignment(text: str) -> Dict[Tuple[str, int], List[int]]:
    """parsePartitionReassignmentData (version 1; topic, partition, replicas; log_dirs as many as replicas) and
    parseExecuteAssignmentArgs (not empty, no empty replica list, no duplicate partition, no duplicate replica)."""
    js = json.loads(text)
    assert js.get("version", 1) == 1, "Not supported version field value"
    out: Dict[Tuple[str, int], List[int]] = {}
    entries = js.get("partitions", [])
    assert entries, "Partition reassignment list cannot be empty"
    for p in entries:
        topic, n, replicas = p["topic"], p["partition"], p["replicas"]
        assert isinstance(topic, str) and type(n) is int and all(type(r) is int for r in replicas)
        log_dirs = p.get("log_dirs", ["any"] * len(replicas))
        assert all(isinstance(d, str) for d in log_dirs)
        assert len(log_dirs) == len(replicas), "Size of replicas list is different from size of log dirs list"
        assert replicas, "Partition replica list cannot be empty"
        assert len(set(replicas)) == len(replicas), "Partition replica lists may not contain duplicate entries"
        assert (topic, n) not in out, "Partition reassignment contains duplicate topic partitions"
        out[(topic, n)] = replicas
    return out


def test_plan_restores_rf_with_fewest_bytes(cluster):
    root, sizes = cluster
    plan = generate([str(root)])
    assert plan.live_brokers == [1, 2, 4, 5]
    moves = {(m.topic, m.partition): m for m in plan.moves}
    assert set(moves) == {("orders", 0), ("orders", 1)}  # orders-2 lost nothing
    o0 = moves[("orders", 0)]
    # broker 2 holds the most: first (preferred leader); broker 4's copy saves the most bytes; broker 5's copy is
    # another topic id and does not count
    assert o0.proposed == [2, 1, 4]
    assert o0.fetch_bytes == {4: sizes[(2, 0)] - sizes[(4, 0)]}
    o1 = moves[("orders", 1)]
    assert o1.proposed == [4, 2, 5]  # broker 4 holds more than 2; 5 has fewer replicas than 1
    held = {1: {1: sizes[(1, 0)], 2: sizes[(2, 0)], 4: sizes[(4, 0)]}, 2: {2: sizes[(2, 1)], 4: sizes[(4, 1)]}}
    for m in plan.moves:
        assert len(m.proposed) == len(m.current) and len(set(m.proposed)) == len(m.proposed)
        assert set(m.proposed) <= set(plan.live_brokers)
        sizes_here = held[1] if m.partition == 0 else held[2]
        leader = max(sizes_here[r] for r in m.current if r in plan.live_brokers)
        free = [b for b in plan.live_brokers if b not in m.current]
        lost = len([r for r in m.current if r not in plan.live_brokers])
        best = min(sum(max(0, leader - sizes_here.get(b, 0)) for b in pick) for pick in itertools.combinations(free, lost))
        assert m.bytes_moved == best
    named = {(u.topic, u.partition): u.reason for u in plan.unrestorable}
    assert set(named) == {("lost", 0), ("empty", 0)}
    assert "every replica (3) is on a lost broker" in named[("lost", 0)]
    assert "no live replica (1) holds a copy" in named[("empty", 0)] and "kstore replicas" in named[("empty", 0)]


def test_brokers_option_and_topics(cluster):
    root, sizes = cluster
    plan = generate([str(root)], brokers=[1, 2, 3, 5], topics="orders")
    assert [u.topic for u in plan.unrestorable] == []
    moves = {(m.topic, m.partition): m for m in plan.moves}
    assert set(moves) == {("orders", 1), ("orders", 2)}  # broker 4 is the lost one now
    assert moves[("orders", 1)].proposed[0] == 2  # the live replica holding the most
    too_few = generate([str(root)], brokers=[1, 2], topics="orders")
    assert {(u.topic, u.partition) for u in too_few.unrestorable} == {("orders", 0), ("orders", 1), ("orders", 2)}
    assert "only 2 live brokers" in too_few.unrestorable[0].reason


def test_spread_and_racks(tmp_path):
    """Broker 9 lost from 12 partitions: its replicas go evenly to the others, racks the partition lacks first."""
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 9: "c"}
    parts = [[9, 1 + i % 4] for i in range(12)]
    write_metadata(data_dir(tmp_path, 1), {b: (b == 9, r) for b, r in racks.items()}, {"wide": parts})
    for n, (_lost, kept) in enumerate(parts):
        write_copy(data_dir(tmp_path, kept), "wide", n, 10)
    plan = generate([str(tmp_path)])
    new = [m.proposed[-1] for m in plan.moves]
    assert len(plan.moves) == 12 and all(m.proposed[0] == m.current[1] for m in plan.moves)
    for m in plan.moves:  # the other rack than the kept replica's
        assert racks[m.proposed[0]] != racks[m.proposed[1]]
    counts = {b: new.count(b) for b in (1, 2, 3, 4)}
    assert max(counts.values()) - min(counts.values()) <= 1, counts


def test_reassignment_json_is_kafkas_format():
    text = json.dumps(reassignment_json({("b", 1): [3, 1], ("a", 10): [1], ("a", 2): [2]}), separators=(",", ":"))
    assert text == ('{"version":1,"partitions":[{"topic":"a","partition":2,"replicas":[2],"log_dirs":["any"]},'
                    '{"topic":"a","partition":10,"replicas":[1],"log_dirs":["any"]},'
                    '{"topic":"b","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}')
    assert parse_reassignment(text) == {("a", 2): [2], ("a", 10): [1], ("b", 1): [3, 1]}


def test_no_false_no_copy_when_a_dir_is_missing(tmp_path):
    """Broker 1 registered two data dirs and only one is given: its replica of empty-0 may be in the other, so the
    partition is restorable (broker 1 first, nothing known to fetch), not named as lost."""
    write_metadata(data_dir(tmp_path, 1), {1: (False, None), 2: (False, None), 3: (True, None)}, {"empty": [[3, 1]]},
                   extra_dirs={1: uid(999)})
    plan = generate([str(tmp_path)])
    assert plan.unrestorable == [] and [m.proposed for m in plan.moves] == [[1, 2]]
    assert plan.moves[0].leader_bytes is None  # its size is not known, and is never taken for 0


def test_live_replicas_out_of_the_isr_are_said(tmp_path):
    """wide-0 [3,1] with ISR [3]: broker 1's copy is restorable only after an unclean leader election."""
    write_metadata(data_dir(tmp_path, 1), {1: (False, None), 2: (False, None), 3: (True, None)}, {"wide": [[3, 1]]},
                   isrs={("wide", 0): [3]})
    write_copy(data_dir(tmp_path, 1), "wide", 0, 100)
    plan = generate([str(tmp_path)])
    assert [m.proposed for m in plan.moves] == [[1, 2]]
    assert "no live replica is in the ISR [3]" in plan.moves[0].note and "unclean" in plan.moves[0].note
    healthy = generate([str(tmp_path)], brokers=[1, 2, 3])
    assert healthy.moves == []
