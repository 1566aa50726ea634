"""The core of doctor: data-dir discovery (logdir), checkpoints read as Kafka's CheckpointFile reads them,
directory names as LocalLog.parseTopicPartitionName parses them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kstore_cli.errors import CorruptCheckpointError
from kstore_cli.log.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from kstore_cli.log.logdir import find_data_dirs, is_data_dir, is_partition_dir, resolve
from kstore_cli.operations.startup import unparseable_reason, survey
from tests.conftest import CORPUS


@pytest.mark.parametrize("text,expected", [
    ("", {}),
    ("0\n", {}),
    ("0\n0\n", {}),
    ("0\n1\nt 0 5\n", {("t", 0): 5}),
    ("0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),      # BufferedReader.readLine takes \r\n and \r
    ("0\n1\nt\t0   +5  \n", {("t", 0): 5}),      # \s+ between fields, trailing ones dropped, parseLong("+5")
    ("0\n1\nt.x-y 2147483647 9223372036854775807", {("t.x-y", 2147483647): 9223372036854775807}),
    ("0\n1\nt 0 0000000000000000000000042\n", {("t", 0): 42}),  # leading zeros: parseLong takes them
])
def test_offset_checkpoint_accepts_what_kafka_accepts(tmp_path, text, expected):
    path = tmp_path / "cp"
    path.write_bytes(text.encode())
    assert read_offset_checkpoint(path) == expected


@pytest.mark.parametrize("text,position,number_format", [
    ("0 \n0\n", 0, False),                  # parseInt("0 ") throws: a malformed line, not version 0
    ("1\n0\n", 0, False),                   # Unrecognised version
    ("0\n-1\n", 2, False),                  # new ArrayList<>(-1)
    ("0\n1_0\n", 2, False),
    ("0\n1\n t 0 5\n", 4, False),           # Java's split keeps the leading empty field: 4 fields
    ("0\n1\nt 0\n", 4, False),
    ("0\n2\nt 0 5\n", 2, False),            # fewer entries than the count: the count line
    ("0\n1\nt 0 5\nu 0 6\n", 10, False),    # more: the first extra entry
    ("0\n1\nt 2147483648 5\n", 4, True),    # parseInt overflow: NumberFormatException
    ("0\n1\nt 0 5x\n", 4, True),
    ("0\n1\nt 0 " + "9" * 5000 + "\n", 4, True),
])
def test_offset_checkpoint_rejects_what_kafka_rejects_at_the_byte(tmp_path, text, position, number_format):
    path = tmp_path / "cp"
    path.write_bytes(text.encode())
    with pytest.raises(CorruptCheckpointError) as info:
        read_offset_checkpoint(path)
    assert info.value.position == position and info.value.path == str(path)
    assert getattr(info.value, "number_format", False) is number_format


def test_checkpoint_that_is_not_utf8_is_corrupt_not_unreadable(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_bytes(b"0\n1\n0 \xff\n")
    with pytest.raises(CorruptCheckpointError) as info:
        read_leader_epoch_checkpoint(path)
    assert info.value.position == 6


@pytest.mark.parametrize("name,ok", [
    ("orders-0", True), ("a.b-c-12", True), ("__cluster_metadata-0", True), ("t-+1", True),
    ("orders-0.0123456789abcdef0123456789abcdef-delete", True), ("orders-3.x-future", True),
    ("orders-3.x-stray", True),
    ("lost+found", False), ("orders", False), ("orders-", False), ("-1", False), ("orders-x", False),
    ("orders-2147483648", False), ("orders-0-delete", False), ("orders-0.-stray", False),
])
def test_directory_names_as_kafka_parses_them(name, ok):
    assert (unparseable_reason(name) is None) is ok


def test_a_data_dir_named_like_a_partition_is_not_a_partition(tmp_path):
    data = tmp_path / "kafka-1"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=x\n")
    assert not is_partition_dir(str(data)) and is_data_dir(str(data))
    part = data / "orders-0"
    part.mkdir()
    assert is_partition_dir(str(part))  # an empty partition dir stays one


def test_find_data_dirs_in_a_folder_of_brokers(tmp_path):
    assert find_data_dirs(str(CORPUS)) == [str(CORPUS / "logs"), str(CORPUS / "logs-crashed")]
    assert find_data_dirs(str(CORPUS / "logs")) == [str(CORPUS / "logs")]
    assert find_data_dirs(str(tmp_path)) == []
    # Every command resolves a folder of data dirs to their partitions, not to the data dirs themselves.
    targets = resolve([str(CORPUS)])
    assert len(targets) == 23 and all(t.partition.segments for t in targets)


def test_survey_groups_data_dirs_into_brokers(tmp_path):
    for name, node in (("a", 1), ("b", 1), ("c", 2)):
        d = tmp_path / name
        (d / "t-0").mkdir(parents=True)
        (d / "meta.properties").write_text(f"version=1\nnode.id={node}\ncluster.id=x\n")
    found = survey([str(tmp_path)])
    assert [(b.node_id, [Path(d.path).name for d in b.data_dirs]) for b in found.brokers] == [
        (1, ["a", "b"]), (2, ["c"])]
    assert len(found.targets) == 3


def test_core_never_imports_click_or_rich():
    import subprocess

    code = ("import sys, kstore_cli.operations.startup; "
            "sys.exit(any(m.split('.')[0] in ('click', 'rich') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0


from hypothesis import given, strategies as st  # noqa: E402


@given(st.binary(max_size=200) | st.lists(st.sampled_from(
    ["0", "1", "2", "-1", "t 0 5", " t 0 5", "t 0", "0 0", "1 x", "\r", "", "t 99999999999 1"])).map(
        lambda lines: "\n".join(lines).encode()))
def test_any_bytes_parse_or_raise_corrupt_checkpoint(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cp") / "leader-epoch-checkpoint"
    path.write_bytes(data)
    for reader in (read_offset_checkpoint, read_leader_epoch_checkpoint):
        try:
            reader(path)
        except CorruptCheckpointError as exc:
            assert exc.path == str(path)
            assert exc.position is None or 0 <= exc.position <= len(data)


def test_a_fifo_under_a_checkpoint_name_does_not_hang(tmp_path):
    import os

    from kstore_cli.errors import FileUnreadableError

    fifo = tmp_path / "replication-offset-checkpoint"
    os.mkfifo(fifo)
    with pytest.raises(FileUnreadableError, match="not a regular file"):
        read_offset_checkpoint(fifo)


def test_a_signed_partition_number_is_a_partition_as_kafka_parses_it() -> None:
    # LocalLog.parseTopicPartitionName: Integer.parseInt of the text after the last '-' ("+1" is 1).
    from kstore_cli.log.names import parse_partition_dir

    assert parse_partition_dir("orders-+1") == ("orders", 1)
    assert parse_partition_dir("orders-2147483648") is None  # not an int: the broker refuses it
    assert parse_partition_dir("my-topic-3") == ("my-topic", 3)


@pytest.mark.parametrize("lazy", [False, True])
def test_each_target_once_however_often_the_paths_name_it(tmp_path: Path, lazy: bool) -> None:
    """A data dir named twice is walked once; a partition named before or after its data dir is one whole
    target; a segment named on its own stays a target of that segment beside the whole partition."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(CORPUS / "logs-crashed", data)
    parts = sorted(p for p in data.iterdir() if p.is_dir())
    first = parts[0]
    log = sorted(first.glob("*.log"))[0]
    paths = [str(first), str(data), str(first), str(log), str(data)]
    found = survey(paths, lazy=lazy)
    keys = [(p.path, only) for p, only in found.targets]
    assert len(keys) == len(set(keys))
    assert keys[0] == (str(first), None)
    assert sorted(k for k in keys if k[1] is None) == sorted((str(p), None) for p in parts)
    assert [k for k in keys if k[1] is not None] == [(str(first), int(log.name.split(".")[0]))]


def test_the_survey_adds_up_its_targets_log_bytes(tmp_path):
    """doctor's bar on a terminal counts the targets' .log bytes: each whole partition's, a named segment's, a
    partition named twice once, none of a topic --topics leaves out."""
    import shutil

    data = tmp_path / "data"
    for name in ("a-0", "a-1", "b-0"):
        shutil.copytree(CORPUS / "logs" / "v2-lz4-0", data / name)
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    logs = {d.name: sorted(d.glob("*.log")) for d in data.iterdir() if d.is_dir()}
    size = {name: sum(f.stat().st_size for f in files) for name, files in logs.items()}
    segment = logs["b-0"][-1]
    found = survey([str(data / "a-1"), str(data), str(segment)], lazy=True, sizes=True)
    assert found.log_bytes == sum(size.values()) + segment.stat().st_size
    found = survey([str(data), str(data / "a-1")], topics="a", lazy=True, jobs=2, sizes=True)
    assert found.log_bytes == size["a-0"] + size["a-1"] and len(found.targets) == 2
    found = survey([str(segment)], lazy=True, sizes=True)
    assert found.log_bytes == segment.stat().st_size
