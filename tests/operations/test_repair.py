"""operations.repair: each file repair writes, byte for byte as Kafka writes it; Kafka's loader on the result;
owner and mode kept; a dry run writes nothing; the lock; a kill at every step converging."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import List

import pytest

from kstore_cli.errors import LogDirLockedError
from kstore_cli.log import fileops
from kstore_cli.log.checkpoint import format_leader_epoch_checkpoint
from kstore_cli.operations.partition_findings import partition_issues
from kstore_cli.operations.repair import kafka_dir_name, repair
from kstore_cli.operations.layout_findings import layout_issues
from kstore_cli.operations.startup import survey
from tests.conftest import CORPUS, ROOT, lock_held
from tests.ownership import UID, as_root, kafka_dir, owner, umask077  # noqa: F401 (a fixture)
from tests.safety_data import make_data_dir as make_safety_data_dir
from tests.safety_data import tree_bytes

LOGS = CORPUS / "logs"
TOPIC_ID = "ZacG7npp8PBwZfzuq0OGqQ"  # v2-none-0's partition.metadata, as Kafka wrote it
CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
NOW = 1_795_870_800_000  # 2026-11-28T13:00:00Z
GOLDEN_METADATA = ROOT / "fixtures" / "kafka-golden" / "inputs" / "__cluster_metadata-0"


def data_dir(root: Path, name: str, partitions=("v2-none-0",), meta: "str | None" = None) -> Path:
    """A data dir of corpus partitions (Kafka-written) with the given meta.properties text."""
    d = root / name
    d.mkdir(parents=True)
    for p in partitions:
        shutil.copytree(LOGS / p, d / p)
    if meta is not None:
        (d / "meta.properties").write_text(meta)
    return d


def meta(node: int = 1, cluster: "str | None" = CLUSTER, version: int = 1) -> str:
    key = "node.id" if version == 1 else "broker.id"
    return f"version={version}\n{key}={node}\n" + (f"cluster.id={cluster}\n" if cluster else "")


def checks(*paths: Path) -> List[tuple]:
    """(check, file or partition) of every doctor finding on the paths (the checks repair answers among them)."""
    found = survey([str(p) for p in paths], replicas=True)
    issues = layout_issues(found, check_lock=False)
    for partition, _only in found.targets:
        issues += partition_issues(found, partition, None)
    return [(i.check, i.file or i.partition) for i in issues]


# --------------------------------------------------------------------------- partition.metadata


def test_partition_metadata_from_another_replica_is_the_file_kafka_writes(tmp_path):
    b1 = data_dir(tmp_path, "b1", meta=meta(1))
    b2 = data_dir(tmp_path, "b2", meta=meta(2))
    (b1 / "v2-none-0" / "partition.metadata").unlink()
    plan = repair([str(b1), str(b2)])
    [change] = plan.changes
    assert change.check == "partition-metadata-missing" and str(b2 / "v2-none-0") in change.message
    written = (b1 / "v2-none-0" / "partition.metadata").read_bytes()
    assert written == (LOGS / "v2-none-0" / "partition.metadata").read_bytes()  # Kafka's own bytes: no newline
    assert written == f"version: 0\ntopic_id: {TOPIC_ID}".encode()
    assert checks(b1, b2) == [] and plan.exit_status == 0


def test_partition_metadata_from_the_cluster_metadata_log(tmp_path):
    # The golden metadata log's image has topic-2 = AAAAAAAAAAIAAAAAAAAAKg and no topic-9.
    d = data_dir(tmp_path, "data", partitions=(), meta=meta(1))
    shutil.copytree(GOLDEN_METADATA, d / "__cluster_metadata-0")
    for name in ("topic-2-0", "topic-9-0"):
        shutil.copytree(LOGS / "v2-none-0", d / name)
        (d / name / "partition.metadata").unlink()
    plan = repair([str(d)])
    assert (d / "topic-2-0" / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAIAAAAAAAAAKg"
    assert not (d / "topic-9-0" / "partition.metadata").exists()
    [left] = plan.unrepaired
    assert left.check == "partition-metadata-missing" and "has no topic topic-9" in left.reason
    assert plan.exit_status == 1
    assert not (d / "__cluster_metadata-0" / "partition.metadata").exists()  # the metadata log has none


def test_copies_with_two_topic_ids_are_not_chosen_between(tmp_path):
    dirs = [data_dir(tmp_path, f"b{n}", meta=meta(n)) for n in (1, 2, 3)]
    (dirs[0] / "v2-none-0" / "partition.metadata").unlink()
    (dirs[2] / "v2-none-0" / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    plan = repair([str(d) for d in dirs])
    assert not (dirs[0] / "v2-none-0" / "partition.metadata").exists()
    assert [u.check for u in plan.unrepaired] == ["partition-metadata-missing"]
    assert "2 topic IDs" in plan.unrepaired[0].reason


def test_a_malformed_partition_metadata_is_quarantined_then_replaced(tmp_path):
    b1 = data_dir(tmp_path, "b1", meta=meta(1))
    b2 = data_dir(tmp_path, "b2", meta=meta(2))
    bad = b1 / "v2-none-0" / "partition.metadata"
    bad.write_bytes(b"version: 0\ntopic_id: not-a-uuid")
    [change] = repair([str(b1), str(b2)]).changes
    assert bad.read_bytes() == f"version: 0\ntopic_id: {TOPIC_ID}".encode()
    qdir = Path(change.quarantine_dir)
    assert qdir.parent == tmp_path / "kstore-quarantine" / "v2-none-0" and qdir.name.endswith("-repair")
    assert (qdir / "partition.metadata").read_bytes() == b"version: 0\ntopic_id: not-a-uuid"
    manifest = json.loads((qdir / "kstore-quarantine.json").read_text())
    assert manifest["kind"] == "repair" and manifest["partition"] == str(b1 / "v2-none-0")
    assert [(f["file"], f["size"]) for f in manifest["files"]] == [("partition.metadata", 31)]


# --------------------------------------------------------------------------- leader-epoch-checkpoint


def test_leader_epoch_checkpoint_rebuilt_from_the_batches(tmp_path):
    part = make_safety_data_dir(tmp_path / "data")  # epochs (0, 0), (1, ...), (2, ...) as the factory wrote them
    want = (part / "leader-epoch-checkpoint").read_bytes()
    assert want.count(b"\n") == 5  # three entries
    (part / "leader-epoch-checkpoint").write_text("0\n1\nx y\n")
    [change] = repair([str(tmp_path / "data")]).changes
    assert change.check == "checkpoint-malformed"
    assert (part / "leader-epoch-checkpoint").read_bytes() == want


def test_leader_epoch_checkpoint_starts_at_the_log_start_offset(tmp_path):
    # LogLoader.load: truncateFromStart(logStartOffsetCheckpoint): the entry covering it is re-based to it.
    part = make_safety_data_dir(tmp_path / "data", second_partition=False)
    epochs = [tuple(map(int, line.split())) for line in (part / "leader-epoch-checkpoint").read_text().split("\n")[2:-1]]
    start = epochs[1][1] + 2
    (tmp_path / "data" / "log-start-offset-checkpoint").write_text(f"0\n1\norders 0 {start}\n")
    (part / "leader-epoch-checkpoint").write_text("garbage")
    repair([str(tmp_path / "data")])
    want = format_leader_epoch_checkpoint([(epochs[1][0], start)] + epochs[2:])
    assert (part / "leader-epoch-checkpoint").read_text() == want


def test_leader_epoch_checkpoint_is_the_one_kafkas_recovery_writes(oracle, tmp_path):
    part = make_safety_data_dir(tmp_path / "data", second_partition=False)
    (part / "leader-epoch-checkpoint").write_text("0\n9\n")
    repair([str(tmp_path / "data")])
    ours = (part / "leader-epoch-checkpoint").read_bytes()
    # Kafka: the same partition with no checkpoint, recovered from offset 0 (LogSegment.recover assigns the epochs),
    # then closed (the cache flushed).
    kafka = tmp_path / "kafka" / part.name
    shutil.copytree(part, kafka)
    (kafka / "leader-epoch-checkpoint").unlink()
    result = oracle.run("load-log", str(kafka), "--unclean", "--no-records", "--no-lookup")
    assert result.of_type("summary")[0]["ok"], result.stdout
    assert (kafka / "leader-epoch-checkpoint").read_bytes() == ours


# --------------------------------------------------------------------------- meta.properties


def test_a_missing_cluster_id_is_set_as_the_other_dirs_of_the_node_have_it(tmp_path):
    a = data_dir(tmp_path, "a", meta=meta(1) + "directory.id=AAAAAAAAAAAAAAAAAAAAAQ\n")
    b = data_dir(tmp_path, "b", partitions=("transactional-0",), meta=meta(1, cluster=None)
                 + "directory.id=AAAAAAAAAAAAAAAAAAAAAg\n")
    [change] = repair([str(a), str(b)], now_ms=NOW).changes
    assert change.check == "meta-properties-cluster-id"
    # MetaProperties.toProperties + Properties.store: "#", the date, then ConcurrentHashMap order.
    assert (b / "meta.properties").read_text() == (
        "#\n#Sat Nov 28 13:00:00 UTC 2026\nnode.id=1\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAg\nversion=1\n"
        f"cluster.id={CLUSTER}\n")
    assert (Path(change.quarantine_dir) / "meta.properties").read_text() == meta(1, cluster=None) + \
        "directory.id=AAAAAAAAAAAAAAAAAAAAAg\n"
    assert checks(a, b) == []


def test_a_missing_meta_properties_is_written_without_a_directory_id(tmp_path):
    a = data_dir(tmp_path, "a", meta=meta(7) + "directory.id=AAAAAAAAAAAAAAAAAAAAAQ\n")
    b = data_dir(tmp_path, "b", partitions=("transactional-0",))
    [change] = repair([str(a), str(b)], now_ms=NOW).changes
    assert change.check == "meta-properties-missing" and change.quarantine_dir is None
    assert (b / "meta.properties").read_text() == (
        f"#\n#Sat Nov 28 13:00:00 UTC 2026\nnode.id=7\nversion=1\ncluster.id={CLUSTER}\n")


def test_a_zookeeper_broker_keeps_broker_id(tmp_path):
    a = data_dir(tmp_path, "a", meta=meta(3, version=0))
    b = data_dir(tmp_path, "b", partitions=("transactional-0",), meta="version=0\ncluster.id=" + CLUSTER + "\n")
    repair([str(a), str(b)], now_ms=NOW)
    assert (b / "meta.properties").read_text() == (
        f"#\n#Sat Nov 28 13:00:00 UTC 2026\nbroker.id=3\nversion=0\ncluster.id={CLUSTER}\n")


def test_meta_properties_is_not_guessed_among_several_nodes(tmp_path):
    a = data_dir(tmp_path, "a", meta=meta(1))
    b = data_dir(tmp_path, "b", partitions=("transactional-0",), meta=meta(2))
    c = data_dir(tmp_path, "c", partitions=())
    (c / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    plan = repair([str(a), str(b), str(c)])
    assert not (c / "meta.properties").exists() and plan.changes == []
    [left] = plan.unrepaired
    assert left.check == "meta-properties-missing" and "nodes [1, 2]" in left.reason


# --------------------------------------------------------------------------- stray directories


def test_stray_directories_are_moved_aside_with_kafkas_names(tmp_path):
    d = data_dir(tmp_path, "data", meta=meta(1))
    (d / "orders-3-delete").mkdir()
    (d / "orders-4-stray").mkdir()
    (d / "lost+found").mkdir()
    (d / "lost+found" / "#12").write_bytes(b"an inode")
    plan = repair([str(d)])
    assert sorted(c.action for c in plan.changes) == ["move-out", "rename", "rename"]
    names = sorted(p.name for p in d.iterdir() if p.is_dir())
    assert re.fullmatch(r"orders-3\.[0-9a-f]{32}-delete", names[0]), names
    assert re.fullmatch(r"orders-4\.[0-9a-f]{32}-stray", names[1]), names
    assert names[2:] == ["v2-none-0"]
    [moved] = (tmp_path / "kstore-quarantine" / "lost+found").iterdir()
    assert (moved / "lost+found" / "#12").read_bytes() == b"an inode"
    assert json.loads((moved / "kstore-quarantine.json").read_text())["moved"] == {
        "from": str(d / "lost+found"), "to": "lost+found"}
    assert [c for c in checks(d) if c[0] == "stray-directory"] == []


def test_kafka_dir_names_stay_within_255_characters():
    # LocalLog.logDirNameWithSuffixCappedLength cuts the topic, never the suffix.
    name = kafka_dir_name("t" * 249, 12, "-stray")
    assert len(name) == 255 and name.endswith("-stray") and re.search(r"-12\.[0-9a-f]{32}-stray$", name)


def test_a_partition_the_metadata_gives_another_topic_id_is_renamed_stray(tmp_path):
    d = data_dir(tmp_path, "data", partitions=(), meta=meta(1))
    shutil.copytree(GOLDEN_METADATA, d / "__cluster_metadata-0")
    for name, topic_id in (("topic-2-1", TOPIC_ID), ("topic-9-0", TOPIC_ID)):
        shutil.copytree(LOGS / "v2-none-0", d / name)
    plan = repair([str(d)])
    [change] = plan.changes
    assert change.check == "topic-id-unknown" and re.fullmatch(r"topic-2-1\.[0-9a-f]{32}-stray",
                                                                 os.path.basename(change.move_to))
    assert not (d / "topic-2-1").exists() and Path(change.move_to).is_dir()
    [left] = plan.unrepaired  # topic-9: no such topic in this (maybe older) metadata: the broker decides
    assert left.check == "topic-id-unknown" and left.path == str(d / "topic-9-0") and (d / "topic-9-0").is_dir()


# --------------------------------------------------------------------------- safety


def _all_repairs(root: Path) -> List[Path]:
    a = data_dir(root, "a", meta=meta(1))
    b = data_dir(root, "b", partitions=("transactional-0",),
                 meta=meta(1, cluster=None))
    shutil.copytree(LOGS / "v2-none-0", b / "v2-none-1")
    (a / "v2-none-0" / "partition.metadata").unlink()
    (b / "transactional-0" / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n")
    (a / "junk").mkdir()
    (a / "junk" / "x").write_text("x")
    return [a, b]


def test_dry_run_writes_nothing(tmp_path):
    dirs = _all_repairs(tmp_path / "root")
    before = tree_bytes(tmp_path)
    plan = repair([str(d) for d in dirs], dry_run=True)
    assert len(plan.changes) == 4 and plan.dry_run
    assert tree_bytes(tmp_path, skip=()) == before and not (tmp_path / "root" / "kstore-quarantine").exists()


def test_a_held_lock_refuses_and_changes_nothing(tmp_path):
    dirs = _all_repairs(tmp_path)
    before = tree_bytes(tmp_path)
    with lock_held(dirs[1]):
        with pytest.raises(LogDirLockedError):
            repair([str(d) for d in dirs])
    assert tree_bytes(tmp_path) == before


@as_root
def test_owner_and_mode_are_kept(tmp_path, umask077):
    dirs = [kafka_dir(d, mode=0o640) for d in _all_repairs(tmp_path)]
    repair([str(d) for d in dirs])
    for path in (dirs[0] / "v2-none-0" / "partition.metadata", dirs[1] / "transactional-0" / "leader-epoch-checkpoint",
                 dirs[1] / "meta.properties"):
        assert owner(path) == (UID, UID, 0o640), path  # a new file takes its partition's segment files'


def test_kafka_loads_every_repaired_partition(oracle, tmp_path):
    dirs = _all_repairs(tmp_path)
    repair([str(d) for d in dirs])
    partitions = [dirs[0] / "v2-none-0", dirs[1] / "transactional-0", dirs[1] / "v2-none-1"]
    for result in oracle.load_logs(partitions, clean=True, extra=["--no-records", "--no-lookup"]):
        summary = result.of_type("summary")[0]
        assert summary["ok"] and not summary["truncations"], summary


def test_a_kill_at_every_step_converges(tmp_path):
    """SIGKILL before each file operation (meta.properties included: its date is fixed here), then a rerun: the
    same tree as an uninterrupted run (the quarantine dirs by content), and doctor finds nothing repair answers."""
    template = tmp_path / "template"
    _all_repairs(template)
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    fileops.arm_crash(None)
    repair([str(reference / "a"), str(reference / "b")], now_ms=NOW)
    ops = fileops.operation_count()
    assert ops >= 10
    want = _state(reference)
    for n in range(1, ops + 1):
        work = tmp_path / f"crash-{n}"
        shutil.copytree(template, work)
        pid = os.fork()
        if pid == 0:
            try:
                fileops.arm_crash(n)
                repair([str(work / "a"), str(work / "b")], now_ms=NOW)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"not killed at {n}"
        fileops.arm_crash(None)
        plan = repair([str(work / "a"), str(work / "b")], now_ms=NOW)
        assert plan.exit_status == 0 and _state(work) == want, f"killed before operation {n}: {fileops.journal}"
        assert checks(work / "a", work / "b") == []
        shutil.rmtree(work)


def _state(root: Path) -> dict:
    """The tree's files, the quarantine run dirs (named by time) by their content."""
    out = {}
    for rel, data in tree_bytes(root).items():
        parts = Path(rel).parts
        if parts[0] == "kstore-quarantine":
            if parts[-1] == "kstore-quarantine.json":
                data = json.dumps({k: v for k, v in json.loads(data).items() if k not in ("partition",)},
                                  sort_keys=True).replace(str(root), "").encode()
            rel = "/".join(parts[:2] + parts[3:])
        assert rel not in out, f"{rel} twice"
        out[rel] = data
    return out


def test_restore_refuses_a_repair_quarantine_dir_and_says_how_to_undo_it(tmp_path):
    from kstore_cli.errors import UsageError
    from kstore_cli.operations.restore import restore

    dirs = _all_repairs(tmp_path)
    plan = repair([str(d) for d in dirs])
    qdir = next(c.quarantine_dir for c in plan.changes if c.check == "checkpoint-malformed")
    with pytest.raises(UsageError, match="written by `kstore repair`, which restore does not undo"):
        restore(qdir, dry_run=True)
