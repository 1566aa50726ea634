"""`kstore metadata` against Kafka's own MetadataImage (the oracle's metadata-image), field by field.

The fixtures (fixtures/kraft-cluster/, made by tests/make_metadata_cluster.py) hold a cluster's history as
a controller writes it: features, brokers registering/unfencing/fencing/unregistering, controlled shutdown,
topics with partition changes (ISR, leader, ELR, directories, leader recovery), configs set and deleted,
ACLs added and removed, client quotas, SCRAM users, delegation tokens, producer-id blocks, metadata
transactions ended and aborted, an unfinished transaction at the end, and a snapshot with the log after
it (or only the log after it). One JVM loads every case and every --as-of offset.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from kstore_cli.cluster.metadata_image import image_json
from kstore_cli.cluster.metadata_loader import find_metadata, load_image
from tests.make_metadata_cluster import BASE_TS

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "fixtures" / "kraft-cluster"
SPANS = [tuple(map(int, line.split())) for line in (CASES / "SPANS.txt").read_text().splitlines()[1:]]
SNAPSHOT_END = int((CASES / "SPANS.txt").read_text().splitlines()[0].split("=")[1])
#: every batch end, and an offset inside three batches of several records (whole batches only, as Kafka)
_INSIDE = [b + 1 for b, last in SPANS if last > b]
AS_OF = sorted({last + 1 for _b, last in SPANS} | {_INSIDE[0], _INSIDE[len(_INSIDE) // 2], _INSIDE[-1]})


def _mdir(case: str) -> Path:
    return CASES / case / "__cluster_metadata-0"


LEVELS = range(1, 26)  # metadata.version feature levels of Kafka 4.0; the "levels" case has a batch (2 records) each
CALLS = ([("metadata-image", [str(_mdir(c)), "--no-check"]) for c in ("full", "trimmed", "newer")]
         + [("metadata-image", [str(_mdir("full")), "--no-check", "--as-of", str(o)]) for o in AS_OF]
         + [("metadata-image", [str(_mdir("levels")), "--no-check", "--as-of", str(2 * n)]) for n in LEVELS])


def _write_faults_case(root: Path) -> Path:
    """Records that do not apply (what Kafka's loader hands its fault handler): a replica change without
    directories for a partition that has them, a fence with a stale broker epoch, a removal of an unknown ACL."""
    from kstore_cli.record.builder import RecordSpec, build_v2_batch
    from tests.make_metadata_cluster import TOPIC_ORDERS, history, rec, uid

    H = history()[:5] + [("data", [
        rec("PartitionChangeRecord", 0, PartitionId=0, TopicId=TOPIC_ORDERS, Replicas=[3, 1], Isr=[3, 1]),
        rec("FenceBrokerRecord", 0, Id=1, Epoch=9),
        rec("RemoveAccessControlEntryRecord", 0, Id=uid(999)),
        rec("ProducerIdsRecord", 0, BrokerId=1, BrokerEpoch=10, NextProducerId=5000)])]
    d = root / "faults" / "__cluster_metadata-0"
    d.mkdir(parents=True)
    data, offset = bytearray(), 0
    for kind, pairs in H:
        data += build_v2_batch([RecordSpec(offset + i, BASE_TS + offset * 1000, k, v) for i, (k, v) in enumerate(pairs)],
                               is_control=kind == "control", partition_leader_epoch=1)
        offset += len(pairs)
    (d / "00000000000000000000.log").write_bytes(bytes(data))
    return d


@pytest.fixture(scope="module")
def faults_dir(tmp_path_factory) -> Path:
    return _write_faults_case(tmp_path_factory.mktemp("md"))


@pytest.fixture(scope="module")
def kafka(oracle, faults_dir) -> Dict[tuple, list]:
    calls = CALLS + [("metadata-image", [str(faults_dir), "--no-check"])]
    results = oracle.run_many(calls)
    out = {}
    for (_tool, args), res in zip(calls, results):
        assert res.rc == 0, res.stdout[-2000:]
        out[tuple(args[:1] + args[2:])] = res.records
    return out


def _kafka_entities(records: list) -> List[dict]:
    out = []
    for r in records:
        if r["type"] in ("source", "partition_metadata_check"):
            continue
        r = dict(r)
        if r["type"] == "features":
            for k in ("metadata_version_level_in_records", "metadata_version_known_to_this_build"):
                r.pop(k)
        out.append(r)
    return out


#: the batch of the AbortTransactionRecord (history batch 14) and the topic created in the aborted transaction
ABORT_BATCH, AFTER_ABORT = SPANS[14], SPANS[15]
ABORTED_TOPIC = "aborted"


def _without_loader_quirk(theirs: List[dict], as_of: int) -> List[dict]:
    """Kafka's MetadataBatchLoader drops an aborted transaction's records only when the commit it loads ends
    right after the AbortTransactionRecord: a later record in the same commit turns the state back to
    NO_TRANSACTION and the aborted records are applied with it (the harness hands it the whole log as one
    commit, as MetadataLoader.handleCommit does for a catching-up broker). kstore leaves them out, as the
    controller that aborted them meant. Checked here, not hidden: past the abort Kafka shows the topic."""
    names = [e.get("name") for e in theirs if e["type"] == "topic"]
    if as_of > AFTER_ABORT[1]:  # (whole batches: the batch after the abort is in)
        assert ABORTED_TOPIC in names
        return [e for e in theirs if not (e["type"] == "topic" and e["name"] == ABORTED_TOPIC)]
    assert ABORTED_TOPIC not in names
    return theirs


def _ours(entities: List[dict]) -> List[dict]:
    out = []
    for r in entities:
        r = dict(r)
        if r["type"] == "features":
            r.pop("metadata_version_level")
        if r["type"] == "delegation_token":
            r.pop("owner")  # Kafka's harness prints the id only
        if r["type"] == "topic":  # the CLI's --json adds the names of reserved directory ids; Kafka has none
            r["partitions"] = [{k: v for k, v in p.items() if k != "directoryNames"} for p in r["partitions"]]
        out.append(r)
    return out


def _kstore(case: str, **kw) -> list:
    return _ours(image_json(load_image(find_metadata([str(_mdir(case))]), **kw).image))


def _assert_same(ours: List[dict], theirs: List[dict]) -> None:
    assert [(e["type"], e.get("name", e.get("id"))) for e in ours] == \
        [(e["type"], e.get("name", e.get("id"))) for e in theirs]
    for a, b in zip(ours, theirs):
        assert a == b, f"{a['type']}: kstore {a} != Kafka {b}"


@pytest.mark.parametrize("case", ["full", "trimmed", "newer"])
def test_image_matches_kafka(kafka, case):
    theirs = kafka[(str(_mdir(case)),)]
    source = theirs[0]
    assert source["faults"] == [], source["faults"]  # Kafka loads every record kstore wrote
    _assert_same(_kstore(case), _without_loader_quirk(_kafka_entities(theirs), 10**9))


def test_the_history_is_all_there(kafka):
    """The fixture really exercises what it claims (a test of the test data): Kafka's image at the end."""
    ents = _without_loader_quirk(_kafka_entities(kafka[(str(_mdir("full")),)]), 10**9)
    by = {}
    for e in ents:
        by.setdefault(e["type"], []).append(e)
    assert [t["name"] for t in by["topic"]] == ["__consumer_offsets", "orders", "txn-topic"]  # aborted/open out
    orders = by["topic"][1]["partitions"]
    assert orders[0]["elr"] == [3] and orders[0]["leaderEpoch"] == 1 and orders[0]["isr"] == [1, 2]
    assert orders[2]["replicas"] == [3, 1] and orders[2]["leaderRecoveryState"] == "RECOVERED"
    assert [b["fenced"] for b in by["broker"]] == [False, False, True]
    assert by["broker"][1]["in_controlled_shutdown"] is True
    assert {(c["resource_type"], c["name"]) for c in by["config"]} == {("BROKER", ""), ("BROKER", "1"),
                                                                       ("TOPIC", "orders")}
    assert by["producer_ids"][0]["next_producer_id"] == 2000
    assert len(by["acl"]) == 2 and len(by["client_quota"]) == 3 and len(by["scram_user"]) == 2


@pytest.mark.parametrize("as_of", AS_OF)
def test_as_of_offset_matches_kafka(kafka, as_of):
    theirs = kafka[(str(_mdir("full")), "--as-of", str(as_of))]
    _assert_same(_kstore("full", as_of_offset=as_of), _without_loader_quirk(_kafka_entities(theirs), as_of))
    src = load_image(find_metadata([str(_mdir("full"))]), as_of_offset=as_of).source
    assert src["snapshot"] == (None if as_of < SNAPSHOT_END else f"{SNAPSHOT_END:020d}-{1:010d}.checkpoint")
    assert (theirs[0]["snapshot"] is None) == (src["snapshot"] is None)


def test_as_of_time_is_the_offset_of_the_batches_up_to_it(kafka):
    """--as-of TIME: the batches with timestamps up to TIME (every batch of the fixture has its own)."""
    for base, last in SPANS[1:]:
        when = _dt.datetime.fromtimestamp((BASE_TS + base * 1000) / 1000, tz=_dt.timezone.utc)
        ms = int(when.timestamp() * 1000)
        theirs = kafka[(str(_mdir("full")), "--as-of", str(last + 1))]
        _assert_same(_kstore("full", as_of_time=ms), _without_loader_quirk(_kafka_entities(theirs), last + 1))


def test_cli_json_matches_kafka(kafka):
    """The real command (a subprocess), --json: the same entities as Kafka; the source line names the snapshot."""
    proc = subprocess.run([sys.executable, "-m", "kstore_cli", "metadata", "--json", str(CASES / "full")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["type"] == "source" and lines[0]["snapshot"].endswith(".checkpoint")
    assert lines[0]["cluster_id"] == "kstoreClusterIdTest0001"
    assert lines[0]["meta_properties"] == kafka[(str(_mdir("full")),)][0]["meta_properties"]
    _assert_same(_ours(lines[1:]), _without_loader_quirk(_kafka_entities(kafka[(str(_mdir("full")),)]), 10**9))
    assert "not finished" in proc.stderr  # the open transaction is said, not silently dropped


def test_every_metadata_version_and_migration_state_is_named_as_kafka_names_it(kafka):
    for n in LEVELS:
        theirs = _kafka_entities(kafka[(str(_mdir("levels")), "--as-of", str(2 * n))])
        ours = _kstore("levels", as_of_offset=2 * n)
        assert ours[0] == theirs[0], n


def test_records_that_do_not_apply_are_faults_in_both(kafka, faults_dir):
    theirs = kafka[(str(faults_dir),)]
    faults = theirs[0]["faults"]
    assert len(faults) == 3, faults
    result = load_image(find_metadata([str(faults_dir)]))
    assert len(result.problems) == 3, result.problems
    assert "The lengths for replicas and directories do not match." in result.problems[0]
    assert "The lengths for replicas and directories do not match." in faults[0]
    _assert_same(_ours(image_json(result.image)), _kafka_entities(theirs))  # the rest still applies


#: how a metadata log can end where Kafka's recovery cuts it: a crash's torn tail (a write cut short, the
#: last batch short of its end, the last batch failing its CRC) and damage with intact batches after it
CUT_CASES = ("partial-write", "last-batch-short", "last-batch-crc", "damage-in-the-middle")


def _cut_case(root: Path, how: str) -> Path:
    import shutil

    from kstore_cli.record.reader import read_batches

    d = root / how
    shutil.copytree(CASES / "full", d)
    log = d / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    positions = [b.position for b in read_batches(str(log))]
    if how == "partial-write":
        data += data[:30]
    elif how == "last-batch-short":
        del data[-5:]
    elif how == "last-batch-crc":
        data[-3] ^= 0xFF
    else:
        data[positions[-4] + 70] ^= 0xFF  # a batch after the snapshot's end, three intact ones after it
    log.write_bytes(bytes(data))
    return d / "__cluster_metadata-0"


@pytest.fixture(scope="module")
def cut_cases(oracle, tmp_path_factory) -> Dict[str, tuple]:
    root = tmp_path_factory.mktemp("cut")
    dirs = {how: _cut_case(root, how) for how in CUT_CASES}
    results = oracle.run_many([("metadata-image", [str(dirs[how]), "--no-check"]) for how in CUT_CASES])
    out = {}
    for how, res in zip(CUT_CASES, results):
        assert res.rc == 0, res.stdout[-2000:]
        out[how] = (dirs[how], res.records)
    return out


@pytest.mark.parametrize("how", CUT_CASES)
def test_a_log_cut_by_recovery_loads_as_kafka_loads_it(cut_cases, how):
    mdir, theirs = cut_cases[how]
    result = load_image(find_metadata([str(mdir)]))
    assert result.source["end_offset"] == theirs[0]["log_end_offset"]
    assert result.source["cut"]["torn"] is (how != "damage-in-the-middle")
    if how == "damage-in-the-middle":
        assert len(result.problems) == 1 and "damage, not a torn write" in result.problems[0]
        assert result.warnings == []
    else:
        assert result.problems == [] and len(result.warnings) == 1 and "a torn tail" in result.warnings[0]
    _assert_same(_ours(image_json(result.image)),
                 _without_loader_quirk(_kafka_entities(theirs), theirs[0]["log_end_offset"]))
