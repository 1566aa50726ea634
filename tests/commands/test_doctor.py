"""``kstore doctor`` (and the data-dir checks verify-index shares with it) on damaged copies of the
Kafka-written corpus: each finding, its file and byte, what Kafka does and what to run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner

from kstore_cli.cli import cli, _register_commands
from tests.conftest import CORPUS, ROOT, lock_held

_register_commands()

LOGS = CORPUS / "logs"
CHECKPOINTS = ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint")
TOPIC_ID = "ZacG7npp8PBwZfzuq0OGqQ"  # v2-none-0's partition.metadata


def make_data_dir(root: Path, name: str = "data", partitions=("v2-none-0", "transactional-0"), node: "int | None" = 1,
                  cluster: str = "MkU3OEVBNTcwNTJENDM2Qg", directory_id: "str | None" = None) -> Path:
    """A data dir holding copies of corpus partitions, the corpus checkpoints and (optionally) meta.properties."""
    data = root / name
    data.mkdir(parents=True)
    for p in partitions:
        shutil.copytree(LOGS / p, data / p)
    for c in CHECKPOINTS:
        shutil.copy2(LOGS / c, data / c)
    if node is not None:
        lines = ["#", "#Mon Nov 23 21:00:00 UTC 2026", f"node.id={node}", "version=1", f"cluster.id={cluster}"]
        if directory_id:
            lines.append(f"directory.id={directory_id}")
        (data / "meta.properties").write_text("\n".join(lines) + "\n")
    return data


def doctor(*paths, json_out: bool = True):
    """(exit code, JSON records or text) of `kstore doctor` through Click's runner."""
    args = ["doctor"] + (["--json"] if json_out else []) + [str(p) for p in paths]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    if json_out:
        return result.exit_code, [json.loads(line) for line in result.output.splitlines()]
    return result.exit_code, result.output


def findings(records: List[dict], check: "str | None" = None) -> List[dict]:
    return [r for r in records if r["type"] == "finding" and (check is None or r["check"] == check)]


def verify(*paths):
    result = CliRunner().invoke(cli, ["verify-index", "--json"] + [str(p) for p in paths], catch_exceptions=False)
    return result.exit_code, [json.loads(line) for line in result.output.splitlines()]


# --------------------------------------------------------------------------- healthy


def test_healthy_kafka_written_fixtures_have_zero_findings():
    code, records = doctor(LOGS)
    assert code == 0
    assert findings(records) == []
    parts = [r for r in records if r["type"] == "partition"]
    assert len(parts) == 20 and all(r["healthy"] and r["segments"] > 0 for r in parts)
    summary = records[-1]
    assert summary["type"] == "summary" and summary["healthy"] and summary["healthy_partitions"] == 20


def test_healthy_formatted_data_dir_text_output(tmp_path):
    data = make_data_dir(tmp_path)
    code, text = doctor(data, json_out=False)
    assert code == 0, text
    assert f"data dir {data}: node 1, cluster MkU3OEVBNTcwNTJENDM2Qg; 2 partition(s)" in text
    assert f"{data / 'v2-none-0'}: 4 segment(s), healthy" in text
    assert ": error:" not in text and ": warning:" not in text
    assert text.endswith("2 partition(s) in 1 data dir(s) of 1 broker(s): 2 healthy; no errors or warnings\n")


# --------------------------------------------------------------------------- several brokers


def test_multi_broker_folder_is_recognised_and_every_partition_checked(tmp_path):
    # Data dirs named like partitions (kafka-1, kafka-2): the folder used to be taken for a data dir
    # holding two empty partitions, "0 segment(s), healthy".
    folder = tmp_path / "brokers"
    make_data_dir(folder, "kafka-1", node=1)
    make_data_dir(folder, "kafka-2", node=2, partitions=("v2-none-0",))
    code, records = doctor(folder)
    assert code == 0, findings(records)
    brokers = [r for r in records if r["type"] == "broker"]
    assert [(b["node_id"], b["data_dirs"]) for b in brokers] == [
        (1, [str(folder / "kafka-1")]), (2, [str(folder / "kafka-2")])]
    parts = {r["partition"]: r["segments"] for r in records if r["type"] == "partition"}
    assert parts == {str(folder / "kafka-1" / "v2-none-0"): 4, str(folder / "kafka-1" / "transactional-0"): 8,
                     str(folder / "kafka-2" / "v2-none-0"): 4}
    # verify-index walks the same folder the same way.
    code, records = verify(folder)
    assert code == 0
    assert {r["partition"]: r["segments"] for r in records if r["type"] == "partition"} == parts


def test_one_broker_with_two_cluster_ids_fails(tmp_path):
    a = make_data_dir(tmp_path, "d1", node=3, cluster="AAAAAAAAAAAAAAAAAAAAAA", partitions=("v2-none-0",))
    b = make_data_dir(tmp_path, "d2", node=3, cluster="BBBBBBBBBBBBBBBBBBBBBB", partitions=("transactional-0",))
    code, records = doctor(a, b)
    assert code == 1
    [f] = findings(records, "meta-properties-cluster-mismatch")
    assert f["file"] == str(b / "meta.properties") and f["kafka"].startswith("fail: 'Invalid cluster.id")


def test_meta_properties_checks(tmp_path):
    a = make_data_dir(tmp_path, "d1", node=3, directory_id="b5gSAvyuQ2-iA3eBd4wCHA", partitions=("v2-none-0",))
    b = make_data_dir(tmp_path, "d2", node=3, directory_id="b5gSAvyuQ2-iA3eBd4wCHA", partitions=("transactional-0",))
    c = make_data_dir(tmp_path, "d3", node=None, partitions=())
    d = make_data_dir(tmp_path, "d4", node=None, partitions=())
    (d / "meta.properties").write_text("version=1\ncluster.id=x\n")
    code, records = doctor(a, b, c, d)
    assert code == 1
    got = {(f["check"], f["data_dir"]) for f in findings(records) if f["check"].startswith("meta-")}
    assert got == {("meta-properties-duplicate-directory-id", str(b)), ("meta-properties-missing", str(c)),
                   ("meta-properties-node-id", str(d))}


def test_same_partition_in_two_dirs_of_one_broker(tmp_path):
    a = make_data_dir(tmp_path, "d1", node=3, partitions=("v2-none-0",))
    b = make_data_dir(tmp_path, "d2", node=3, partitions=("v2-none-0",))
    code, records = doctor(a, b)
    assert code == 1
    [f] = findings(records, "duplicate-partition")
    assert f["partition"] == str(b / "v2-none-0") and "Duplicate log directories" in f["kafka"]


# --------------------------------------------------------------------------- partitions


def test_partition_without_logs(tmp_path):
    data = make_data_dir(tmp_path)
    part = data / "transactional-0"
    for f in part.glob("*.log"):
        f.unlink()
    code, records = doctor(data)
    assert code == 1
    [f] = findings(records, "partition-without-logs")
    assert f["severity"] == "error" and f["partition"] == str(part)
    assert "recovery-point-offset-checkpoint 481" in f["message"] and "producer snapshot(s)" in f["message"]
    assert "starts it empty at offset 0" in f["kafka"]
    code, records = verify(data)
    assert code == 1 and any(r.get("check") == "partition-without-logs" for r in records)


def test_log_start_offset_beyond_the_log(tmp_path):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    (data / "log-start-offset-checkpoint").write_text("0\n1\nv2-none 0 900\n")
    code, records = doctor(data)
    assert code == 1
    [f] = findings(records, "log-start-beyond-end")
    assert f["offset"] == 900 and "Deleting all segments" in f["kafka"]


@pytest.mark.parametrize("name,text,check,severity", [
    ("recovery-point-offset-checkpoint", "0\n1\nv2-none 0 700\n", "recovery-point-beyond-end", "warning"),
    ("replication-offset-checkpoint", "0\n1\nv2-none 0 700\n", "high-watermark-beyond-end", "warning"),
    ("cleaner-offset-checkpoint", "0\n1\nv2-none 0 700\n", "cleaner-offset-out-of-range", "note"),
    ("v2-none-0/leader-epoch-checkpoint", "0\n2\n0 0\n1 600\n", "leader-epoch-beyond-end", "note"),
])
def test_checkpoint_offsets_past_the_log_end(tmp_path, name, text, check, severity):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    (data / name).write_text(text)
    code, records = doctor(data)
    [f] = findings(records)
    assert (f["check"], f["severity"], f["file"]) == (check, severity, str(data / name))
    assert f["offset"] in (700, 600) and "520" in f["message"]
    assert code == (0 if severity == "note" else 1)


MALFORMED = [
    # (file under the data dir, text, byte of the bad line)
    ("replication-offset-checkpoint", "0\n2\nv2-none 0 520\ntransactional 0\n", 18),
    ("log-start-offset-checkpoint", "0\n1\nv2-none zero 0\n", 4),
    ("recovery-point-offset-checkpoint", "1\n0\n", 0),
    ("v2-none-0/leader-epoch-checkpoint", "0\n3\n0 0\n1 150\n", 2),  # the count line
    ("v2-none-0/leader-epoch-checkpoint", "0\n2\n0 0\n1 x150\n", 8),
]


@pytest.mark.parametrize("name,text,position", MALFORMED)
def test_each_malformed_checkpoint(tmp_path, name, text, position):
    data = make_data_dir(tmp_path)
    (data / name).write_text(text)
    code, records = doctor(data)
    assert code == 1
    [f] = findings(records, "checkpoint-malformed")
    assert f["file"] == str(data / name) and f["position"] == position and f["severity"] == "error"
    assert f["kafka"].split(":")[0] in ("fail", "ignore")
    code, records = verify(data)  # verify-index used to pass all of these with exit 0
    assert code == 1
    assert [r["file"] for r in records if r.get("check") == "checkpoint-malformed"] == [str(data / name)]


@pytest.mark.parametrize("name", ["lost+found", "orders", "orders-x", "orders-0-delete"])
def test_stray_directory_stops_the_broker(tmp_path, name):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    (data / name).mkdir()
    code, records = doctor(data)
    assert code == 1
    [f] = findings(records, "stray-directory")
    assert f["file"] == str(data / name) and "is not in the form of topic-partition" in f["kafka"]
    code, records = verify(data)
    assert code == 1 and any(r.get("check") == "stray-directory" for r in records)


def test_unreadable_partition_dir_is_a_finding_not_the_end(tmp_path, monkeypatch):
    from kstore_cli.errors import FileUnreadableError
    from kstore_cli.log import logdir

    data = make_data_dir(tmp_path)
    real = logdir.Partition._scan

    def scan(self):
        if self.path.endswith("transactional-0"):
            raise FileUnreadableError("cannot be listed: Permission denied", path=self.path)
        return real(self)

    monkeypatch.setattr(logdir.Partition, "_scan", scan)
    code, records = doctor(data)
    assert code == 1
    [f] = findings(records, "partition-unreadable")
    assert f["partition"] == str(data / "transactional-0") and "taken offline" in f["kafka"]
    assert [r["partition"] for r in records if r["type"] == "partition"] == [str(data / "v2-none-0")]


def test_replica_directories_are_notes(tmp_path):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    shutil.copytree(data / "v2-none-0", data / "v2-none-1.0123456789abcdef0123456789abcdef-delete")
    code, records = doctor(data)
    assert code == 0
    assert [f["check"] for f in findings(records)] == ["replica-delete"]


def test_future_replica_is_checked_like_a_partition(tmp_path):
    # LogManager loads a -future dir through LogLoader and serves it once the move between log dirs ends.
    data = make_data_dir(tmp_path, partitions=())
    future = data / "v2-none-0.0123456789abcdef0123456789abcdef-future"
    shutil.copytree(LOGS / "v2-none-0", future)
    (future / "00000000000000000174.log").write_bytes(b"\x00" * 20 + (future / "00000000000000000174.log").read_bytes()[20:])
    code, records = doctor(data)
    assert code == 1
    [bad] = [f for f in findings(records) if f["check"] == "log-bad-size"]
    assert bad["partition"] == str(future) and bad["position"] == 0
    assert any(r["type"] == "partition" and r["partition"] == str(future) and r["segments"] == 4 for r in records)


def test_topic_id_mismatch_between_copies(tmp_path):
    dirs = [make_data_dir(tmp_path, f"b{n}", node=n, partitions=("v2-none-0",)) for n in (1, 2, 3)]
    odd = dirs[2] / "v2-none-0" / "partition.metadata"
    odd.write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    code, records = doctor(tmp_path)
    assert code == 1
    [f] = findings(records, "topic-id-mismatch")
    assert f["file"] == str(odd) and "InconsistentTopicIdException" in f["kafka"]
    assert TOPIC_ID in f["message"] and "AAAAAAAAAAAAAAAAAAAAAQ" in f["message"]


def test_topic_ids_against_the_cluster_metadata_log(tmp_path):
    # The golden metadata log: its latest snapshot (end offset 9) holds topic-2 = AAAAAAAAAAIAAAAAAAAAKg.
    data = make_data_dir(tmp_path, partitions=())
    shutil.copytree(ROOT / "fixtures" / "kafka-golden" / "inputs" / "__cluster_metadata-0", data / "__cluster_metadata-0")
    for name, topic_id in (("topic-2-0", "AAAAAAAAAAIAAAAAAAAAKg"), ("topic-2-1", TOPIC_ID), ("topic-9-0", TOPIC_ID)):
        shutil.copytree(LOGS / "v2-none-0", data / name)
        (data / name / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}")
    code, records = doctor(data)
    assert code == 1
    got = {(f["partition"], f["severity"]) for f in findings(records, "topic-id-unknown")}
    assert got == {(str(data / "topic-2-1"), "error"), (str(data / "topic-9-0"), "warning")}
    [wrong] = [f for f in findings(records, "topic-id-unknown") if f["severity"] == "error"]
    assert "has AAAAAAAAAAIAAAAAAAAAKg for topic-2" in wrong["message"] and "-stray" in wrong["kafka"]
    parts = {r["partition"]: r["healthy"] for r in records if r["type"] == "partition"}
    assert parts == {str(data / "__cluster_metadata-0"): True, str(data / "topic-2-0"): True,
                     str(data / "topic-2-1"): False, str(data / "topic-9-0"): False}


def _golden_metadata_data_dir(tmp_path: Path) -> Path:
    data = make_data_dir(tmp_path, partitions=())
    shutil.copytree(ROOT / "fixtures" / "kafka-golden" / "inputs" / "__cluster_metadata-0", data / "__cluster_metadata-0")
    shutil.copytree(LOGS / "v2-none-0", data / "topic-2-1")
    (data / "topic-2-1" / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}")
    return data


def test_a_torn_metadata_log_tail_is_a_warning_and_the_image_still_loads(tmp_path):
    # KafkaMetadataLog recovers the whole log at every start: a crash's torn tail is cut and the rest loads.
    data = _golden_metadata_data_dir(tmp_path)
    log = data / "__cluster_metadata-0" / f"{0:020d}.log"
    size = log.stat().st_size
    log.write_bytes(log.read_bytes() + log.read_bytes()[:30])  # a batch's write cut short after 30 bytes
    code, records = doctor(data)
    [torn] = findings(records, "log-partial-batch")
    assert torn["severity"] == "warning" and torn["position"] == size and "KafkaMetadataLog" in torn["kafka"]
    assert findings(records, "metadata-log-incomplete") == []
    [wrong] = findings(records, "topic-id-unknown")  # checked against the image of the log without its tail
    assert wrong["partition"] == str(data / "topic-2-1") and wrong["severity"] == "error"


def test_metadata_log_damage_with_intact_batches_after_it_stays_an_error(tmp_path):
    data = _golden_metadata_data_dir(tmp_path)
    log = data / "__cluster_metadata-0" / f"{0:020d}.log"
    raw = bytearray(log.read_bytes())
    raw[540 + 70] ^= 0xFF  # the batch of offset 7; the batch of offset 8 after it is intact
    log.write_bytes(bytes(raw))
    code, records = doctor(data)
    [damage] = findings(records, "log-corrupt-batch")
    assert code == 1 and damage["severity"] == "error" and damage["position"] == 540


def test_missing_partition_metadata(tmp_path):
    # A KRaft dir with directory.id: a 3.7+ broker's, which calls the log stray (LogManager.isStrayKraftReplica).
    data = make_data_dir(tmp_path, partitions=("v2-none-0",), directory_id="n9XlzHLvQJm2Bm7I9DqT3w")
    (data / "v2-none-0" / "partition.metadata").unlink()
    code, records = doctor(data)
    assert code == 1
    [f] = findings(records, "partition-metadata-missing")
    assert f["severity"] == "error" and "stray" in f["kafka"]


def test_missing_partition_metadata_before_kraft_3_7(tmp_path):
    # Without directory.id the KRaft broker that wrote it was 3.6 or older: it stops on such a log instead.
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    (data / "v2-none-0" / "partition.metadata").unlink()
    code, records = doctor(data)
    [f] = findings(records, "partition-metadata-missing")
    assert code == 1 and f["severity"] == "error" and "BrokerMetadataPublisher.findStrayPartitions" in f["kafka"]


def test_leftover_swap_files(tmp_path):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    part = data / "v2-none-0"
    shutil.copy2(part / "00000000000000000174.log", part / "00000000000000000174.log.swap")
    code, records = doctor(data)
    assert code == 1
    [f] = findings(records, "leftover-swap")
    assert f["severity"] == "warning" and f["file"] == str(part / "00000000000000000174.log.swap")
    assert f["kafka"].startswith("complete")


def test_crc_error_mid_log(tmp_path):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    log = data / "v2-none-0" / "00000000000000000000.log"
    raw = bytearray(log.read_bytes())
    # The third batch: walk the batch lengths (offset 8, 4 bytes) from the start.
    pos = 0
    for _ in range(2):
        pos += 12 + int.from_bytes(raw[pos + 8:pos + 12], "big")
    raw[pos + 70] ^= 0xFF  # inside the records: only the CRC can tell
    log.write_bytes(bytes(raw))
    code, records = doctor(data)
    assert code == 1
    [f] = [f for f in findings(records) if f["check"].startswith("log-")]
    assert f["check"] == "log-corrupt-batch" and f["file"] == str(log) and f["position"] == pos
    assert f["kafka"].startswith("truncate") and "3 later segment(s)" in f["kafka"]
    # salvage keeps the intact batches past the damage, so it comes first; Kafka's own cut second
    first, second = f["repair"].split("\n")
    assert first.startswith(f"kstore salvage --in-place {data / 'v2-none-0'}  (")
    assert second.startswith(f"kstore rebuild-index --truncate {data / 'v2-none-0'}  (")
    assert [r["command"].split()[1] for r in f["repairs"]] == ["salvage", "rebuild-index"]


def test_held_lock(tmp_path):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    with lock_held(data) as holder:
        code, records = doctor(data)
        v_code, _ = verify(data)
    assert code == 1
    [f] = findings(records, "lock-held")
    assert f"(pid {holder.pid}: python" in f["message"]
    assert f["file"] == str(data / ".lock") and "Failed to acquire lock" in f["kafka"]
    assert v_code == 0  # a running broker holding it is what verify-index's monitoring expects
    code, records = doctor(data)  # released: healthy again
    assert code == 0 and findings(records) == []


# --------------------------------------------------------------------------- read-only, subprocess


def _tree_state(root: Path) -> Dict[str, tuple]:
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            content = Path(path).read_bytes() if os.path.isfile(path) else None
            state[os.path.relpath(path, root)] = (st.st_mode, st.st_size, st.st_mtime_ns, content)
    st = os.lstat(root)
    state["."] = (st.st_mode, st.st_mtime_ns)
    return state


def _damaged_tree(root: Path) -> Path:
    a = make_data_dir(root, "kafka-1", node=1)
    make_data_dir(root, "kafka-2", node=2, partitions=("v2-none-0",))
    (a / "lost+found").mkdir()
    (a / "replication-offset-checkpoint").write_text("0\n5\n")
    for f in (a / "transactional-0").glob("*.log"):
        f.unlink()
    part = a / "v2-none-0"
    shutil.copy2(part / "00000000000000000174.log", part / "00000000000000000174.log.swap")
    (part / "00000000000000000174.index").write_bytes(b"\x00" * 5)
    (part / "00000000000000000497.snapshot").write_bytes(b"\x00\x01garbage")
    return root


def test_read_only_tree_byte_identical_mtimes_too(tmp_path):
    root = _damaged_tree(tmp_path / "tree")
    before = _tree_state(root)
    code, records = doctor(root)
    assert code == 1 and len(findings(records)) >= 6
    code, _ = doctor(root, json_out=False)
    assert code == 1
    verify(root)
    assert _tree_state(root) == before
    assert not (root / "kafka-1" / ".lock").exists()


def test_real_subprocess(tmp_path):
    root = _damaged_tree(tmp_path / "tree")
    proc = subprocess.run([sys.executable, "-m", "kstore_cli", "doctor", str(root)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert "broker node 1" in out and "broker node 2" in out
    assert f"{root / 'kafka-1' / 'lost+found'}: error: stray-directory" in out
    assert f"{root / 'kafka-1' / 'replication-offset-checkpoint'} at byte 2: error: checkpoint-malformed" in out
    assert "    run:   " in out and "    kafka: " in out
    assert f"{root / 'kafka-2' / 'v2-none-0'}: 4 segment(s), healthy" in out
    # Nothing to check is a usage error, one line.
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "kstore_cli", "doctor", str(tmp_path / "empty")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("kstore: error:")


def test_terminal_table_one_row_per_healthy_partition_detail_for_findings(tmp_path, monkeypatch):
    from kstore_cli.commands import doctor as doctor_command

    monkeypatch.setattr(doctor_command, "_is_tty", lambda: True)
    monkeypatch.setattr(doctor_command, "byte_progress", lambda *a, **k: (None, None))
    monkeypatch.setenv("COLUMNS", "200")
    data = make_data_dir(tmp_path)
    (data / "lost+found").mkdir()
    code, text = doctor(data, json_out=False)
    assert code == 1
    assert "partition / file" in text and "status / finding" in text
    rows = [line for line in text.splitlines() if line.startswith("│ ") and not line.startswith("│  ")]
    assert [r.split("│")[1].strip() for r in rows] == ["transactional-0", "v2-none-0"]
    assert all("healthy" in r for r in rows)
    assert "error stray-directory" in text and text.count("kafka:") == 1


def test_a_data_dir_reached_through_a_symlink(tmp_path):
    data = make_data_dir(tmp_path / "real", partitions=("v2-none-0",))
    (data / "lost+found").mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(data)
    code, records = doctor(alias)
    assert code == 1
    dirs = [r for r in records if r["type"] == "datadir"]
    assert [(d["data_dir"], d["partitions"]) for d in dirs] == [(str(data), 1)]
    assert [f["check"] for f in findings(records)] == ["stray-directory"]
    [part] = [r for r in records if r["type"] == "partition"]
    assert part["data_dir"] == str(data) and part["segments"] == 4


def test_a_partition_dir_that_is_a_symlink_is_checked_with_the_data_dir_it_points_into(tmp_path):
    """A data dir's child that is a symlink to a partition elsewhere is checked, once, as a partition of the dir
    it points into (as Partition.data_dir names it), whatever --jobs; the walk holds its partitions by name."""
    data = make_data_dir(tmp_path, partitions=("v2-none-0", "transactional-0"))
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(LOGS / "v2-lz4-0", elsewhere / "linked-0")
    (data / "linked-0").symlink_to(elsewhere / "linked-0")
    outputs = []
    for jobs in ("1", "2"):
        result = CliRunner().invoke(cli, ["doctor", "--json", "--jobs", jobs, str(data)], catch_exceptions=False)
        assert "internal error" not in result.output and result.exit_code in (0, 1), result.output
        records = [json.loads(line) for line in result.output.splitlines()]
        parts = {os.path.basename(r["partition"]): r["data_dir"] for r in records if r["type"] == "partition"}
        assert parts == {"transactional-0": str(data), "v2-none-0": str(data), "linked-0": str(elsewhere)}
        outputs.append(result.output)
    assert outputs[0] == outputs[1]
    code, records = verify(data)
    assert code == 0 and sum(r["type"] == "partition" for r in records) == 3, records


def _cluster_log(data: Path, brokers, partitions, topics=(("orders", "T1"),)) -> None:
    """A __cluster_metadata-0 in `data`: broker registrations (id, [dir ids]), topics (name, uid n) and their
    partitions (topic name, partition, replicas, isr, [dir ids])."""
    from tests.make_metadata_cluster import _batches, broker, rec, uid

    ids = {name: uid(100 + i) for i, (name, _n) in enumerate(topics)}
    parts = [rec("PartitionRecord", 2, PartitionId=p, TopicId=ids[t], Replicas=replicas, Isr=isr, RemovingReplicas=[],
                 AddingReplicas=[], Leader=replicas[0], LeaderEpoch=0, PartitionEpoch=0, Directories=dirs)
             for t, p, replicas, isr, dirs in partitions]
    H = [("data", [rec("FeatureLevelRecord", 0, Name="metadata.version", FeatureLevel=21)]),
         ("data", [broker(b, 10 + b, dirs, None) for b, dirs in brokers]),
         ("data", [rec("TopicRecord", 0, Name=name, TopicId=tid) for name, tid in ids.items()] + parts)]
    (data / "__cluster_metadata-0").mkdir()
    (data / "__cluster_metadata-0" / f"{0:020d}.log").write_bytes(_batches(H)[0])
    return ids


def test_a_topic_id_that_belongs_to_another_topic(tmp_path):
    data = make_data_dir(tmp_path, partitions=())
    ids = _cluster_log(data, [(1, [])], [], topics=(("orders", 1), ("payments", 2)))
    shutil.copytree(LOGS / "v2-none-0", data / "orders-0")
    (data / "orders-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {ids['payments']}")
    code, records = doctor(data)
    [f] = findings(records, "topic-id-unknown")
    assert code == 1 and f["severity"] == "error"
    assert f"which the cluster metadata ({data / '__cluster_metadata-0'}) gives to topic payments" in f["message"]


def test_partitions_assigned_to_this_node_without_a_dir(tmp_path):
    from tests.make_metadata_cluster import uid

    d1, d2 = uid(201), uid(202)
    data = make_data_dir(tmp_path, partitions=(), directory_id=d1)
    _cluster_log(data, [(1, [d1]), (2, [uid(203)])], [
        ("orders", 0, [1, 2], [1, 2], [d1, uid(203)]),   # here
        ("orders", 1, [2, 1], [2, 1], [uid(203), d1]),   # missing; a follower copy: refetched
        ("orders", 2, [1], [1], [d1]),                   # missing; the only in-sync replica: data lost
        ("orders", 3, [2], [2], [uid(203)]),             # not this node's
    ])
    shutil.copytree(LOGS / "v2-none-0", data / "orders-0")
    (data / "orders-0" / "partition.metadata").unlink()
    code, records = doctor(data)
    got = {(f["message"].split(" assigns ")[1].split(" ")[0], f["severity"])
           for f in findings(records, "assigned-partition-missing")}
    assert got == {("orders-1", "warning"), ("orders-2", "error")} and code == 1
    # JBOD: the broker registered a second data dir that was not given; a partition assigned to it is not
    # missing (it lives there), one assigned to the given dir still is.
    (data / "__cluster_metadata-0" / f"{0:020d}.log").unlink()
    (data / "__cluster_metadata-0").rmdir()
    _cluster_log(data, [(1, [d1, d2])], [("orders", 0, [1], [1], [d1]), ("orders", 1, [1], [1], [d2]),
                                        ("orders", 2, [1], [1], [d1])])
    code, records = doctor(data)
    got = {f["message"].split(" assigns ")[1].split(" ")[0] for f in findings(records, "assigned-partition-missing")}
    assert got == {"orders-2"}


def test_topics_limits_doctor_and_verify_index_to_matching_partitions(tmp_path):
    """--topics checks only the selected topics' partitions; their findings (and a stray dir that stops the
    whole broker) are reported, another topic's damage is not; a glob matching nothing is a usage error."""
    data = make_data_dir(tmp_path)
    index = data / "transactional-0" / "00000000000000000000.index"
    index.write_bytes(index.read_bytes()[:-3])  # a torn entry: an error in transactional-0 only
    code, records = doctor("--topics", "v2-*", data)
    assert code == 0, records
    assert [r["partition"] for r in records if r["type"] == "partition"] == [str(data / "v2-none-0")]
    code, records = doctor("--topics", "trans*", data)
    assert code == 1 and findings(records)
    assert {os.path.basename(r["partition"]) for r in records if r["type"] == "partition"} == {"transactional-0"}
    code, rows = verify("--topics", "v2-none", data)
    assert code == 0 and [r["partition"] for r in rows if r["type"] == "partition"] == [str(data / "v2-none-0")]
    code, rows = verify("--topics", "transactional", data)
    assert code == 1 and any(r["type"] == "finding" and r["severity"] == "error" for r in rows)
    for command in ("verify-index", "doctor"):
        out = subprocess.run([sys.executable, "-m", "kstore_cli", command, "--topics", "nothing*", str(data)],
                             capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert out.returncode == 2 and out.stderr.startswith("kstore: error:"), out.stderr
        assert "matching --topics 'nothing*'" in out.stderr
    (data / "not a partition").mkdir()
    code, records = doctor("--topics", "v2-*", data)
    assert code == 1 and findings(records, "stray-directory"), records


@pytest.mark.parametrize("also_index", [False, True], ids=["index-there", "index-missing-too"])
def test_missing_timeindex_says_what_kafka_does_in_each_case(tmp_path, also_index):
    """LogLoader.loadSegmentFiles: beside an .index, LogSegment.sanityCheck leaves a new empty .timeindex that
    nothing fills; without the .index the segment is recovered and both are written (the oracle checks both:
    test_doctor_oracle)."""
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    part = data / "v2-none-0"
    (part / "00000000000000000174.timeindex").unlink()
    if also_index:
        (part / "00000000000000000174.index").unlink()
    code, records = doctor(data)
    [f] = findings(records, "missing-timeindex")
    assert code == 1 and f["file"] == str(part / "00000000000000000174.timeindex")
    if also_index:
        assert f["kafka"].startswith("rebuild: the .index is missing too: 'Could not find offset index file'")
        assert f["message"] == "no .timeindex, nor .index (Kafka recovers the segment at startup, which fills both)"
    else:
        assert f["kafka"].startswith("ignore: the .index is there, so LogSegment.sanityCheck creates an empty "
                                     ".timeindex")
        assert f["message"] == "no .timeindex (Kafka creates an empty one at startup and does not fill it)"
    _code, rows = verify(data)
    [v] = [r for r in rows if r.get("check") == "missing-timeindex"]
    assert v["message"] == f["message"]
