"""What mutating commands may touch (kstore_cli/log/scope.py): the KRaft metadata log is left alone by
every data-dir walk and refused when named; an output dir never lands inside a Kafka data dir, except a new
partition dir written under that data dir's lock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.log import fileops
from tests.commands.test_convert_format import status, text
from tests.conftest import CORPUS, ROOT, lock_held

_register_commands()

KRAFT = ROOT / "fixtures" / "kraft-cluster" / "full"
METADATA = "__cluster_metadata-0"


def kstore(*args: str):
    fileops.arm_crash(None)
    return CliRunner().invoke(cli, list(args))


def files(directory: Path) -> Dict[str, bytes]:
    """Every file below `directory` (relative name -> bytes), but the .lock a holder creates."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != fileops.LOCK_FILE}


@pytest.fixture
def kraft_data(tmp_path: Path) -> Path:
    """A KRaft node's data dir: meta.properties, __cluster_metadata-0 (a snapshot and the log after it, control
    batches included) and a v2 topic partition beside it."""
    data = tmp_path / "data"
    shutil.copytree(KRAFT, data)
    shutil.copytree(CORPUS / "logs" / "v2-none-0", data / "v2-none-0")
    return data


def test_convert_format_in_place_over_a_kraft_data_dir_leaves_the_metadata_log_and_says_so(kraft_data: Path) -> None:
    before = files(kraft_data / METADATA)
    topic_before = files(kraft_data / "v2-none-0")
    result = kstore("convert-format", "--to-magic", "1", "--in-place", str(kraft_data))
    assert status(result) == 0, text(result)
    assert files(kraft_data / METADATA) == before  # control batches and all, byte for byte
    assert files(kraft_data / "v2-none-0") != topic_before  # the topic itself was converted
    assert f"{kraft_data / METADATA}: skipped: the KRaft metadata log" in result.output
    result = kstore("convert-format", "--to-magic", "1", "--in-place", "--json", str(kraft_data))
    rows = [json.loads(line) for line in result.output.splitlines()]
    (skip,) = [r for r in rows if r["type"] == "skipped"]
    assert skip["partition"] == str(kraft_data / METADATA) and "raft" in skip["reason"]
    assert files(kraft_data / METADATA) == before


@pytest.mark.parametrize("args", [
    ["convert-format", "--to-magic", "1", "--in-place"],
    ["convert-format", "--to-magic", "2", "--dry-run"],
    ["recover", "--jobs", "1"],
    ["rebuild-index", "--all"],
    ["retain", "--retention-ms", "1"],
    ["compact", "--policy", "compact"],
    ["salvage", "--in-place"],
])
def test_naming_the_metadata_log_is_refused_with_the_reason(kraft_data: Path, args) -> None:
    before = files(kraft_data)
    result = kstore(*args, str(kraft_data / METADATA))
    assert status(result) == 2, text(result)
    assert f"does not change {METADATA}: the KRaft metadata log is managed by Kafka's raft layer" in text(result)
    assert files(kraft_data) == before


def test_recover_over_a_data_dir_rolls_no_segment_in_the_metadata_log(kraft_data: Path) -> None:
    before = files(kraft_data / METADATA)
    result = kstore("recover", "--jobs", "1", "--json", str(kraft_data))
    assert status(result) == 0, text(result)
    assert files(kraft_data / METADATA) == before
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["partition"] for r in rows if r["type"] == "skipped"] == [str(kraft_data / METADATA)]
    assert [r["partition"] for r in rows if r["type"] == "partition"] == [str(kraft_data / "v2-none-0")]
    assert rows[-1]["skipped"] == 1
    checkpoint = kraft_data / "recovery-point-offset-checkpoint"
    assert "__cluster_metadata" not in (checkpoint.read_text() if checkpoint.exists() else "")


def test_rebuild_index_over_a_data_dir_leaves_the_metadata_log(kraft_data: Path) -> None:
    before = files(kraft_data / METADATA)
    result = kstore("rebuild-index", "--all", str(kraft_data))
    assert status(result) == 0, text(result)
    assert files(kraft_data / METADATA) == before  # no .index/.timeindex written beside the raft log
    assert f"{kraft_data / METADATA}: skipped:" in result.output


def test_the_coordinators_logs_stay_allowed() -> None:
    from kstore_cli.log.logdir import Partition
    from kstore_cli.log.scope import left_alone_reason

    for name in ("__consumer_offsets-0", "__transaction_state-0"):
        assert left_alone_reason(Partition(str(CORPUS / "logs" / name))) is None
    assert left_alone_reason(Partition(str(KRAFT / METADATA))) is not None


# --------------------------------------------------------------------------- output dirs


@pytest.fixture
def live_data(tmp_path: Path) -> Path:
    """A broker's data dir (meta.properties, checkpoints) holding two copies' worth of one partition's source."""
    data = tmp_path / "live"
    shutil.copytree(CORPUS / "logs", data)
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=kstoreClusterIdTest0001\n")
    return data


def _copies(tmp_path: Path) -> list:
    for name in ("a", "b"):
        shutil.copytree(CORPUS / "logs" / "v2-none-0", tmp_path / name / "v2-none-0")
    return [str(tmp_path / "a"), str(tmp_path / "b")]


def test_merge_and_replicas_leave_the_metadata_log_out_and_say_so(tmp_path: Path) -> None:
    """Both walks meet a copy of __cluster_metadata-0 in each dir: never merged nor compared, and each one named
    with why, as recover and convert-format name what they skip (text and JSON)."""
    copies = _copies(tmp_path)
    for copy in copies:
        shutil.copytree(KRAFT / METADATA, Path(copy) / METADATA)
    metadata = [str(Path(c) / METADATA) for c in copies]
    for command in (["merge", "--output-dir", str(tmp_path / "out")], ["replicas"]):
        result = kstore(*command, *copies)
        assert status(result) == 0, text(result)
        for path in metadata:
            assert f"{path}: skipped: the KRaft metadata log is managed by Kafka's raft layer" in result.output
        assert "v2-none-0" in result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["v2-none-0"]
    for command in (["merge", "--output-dir", str(tmp_path / "out-json")], ["replicas"]):
        result = kstore(*command, "--json", *copies)
        rows = [json.loads(line) for line in result.output.splitlines()]
        assert status(result) == 0 and [(r["partition"], "raft" in r["reason"]) for r in rows
                                        if r["type"] == "skipped"] == [(p, True) for p in metadata], result.output
        assert [r["type"] for r in rows].count("partition") == 1, result.output
    result = kstore("replicas", *metadata)  # nothing but the metadata log: the usage error says why
    assert status(result) == 2 and f"left out: {', '.join(metadata)}: the KRaft metadata log" in text(result)


def test_merge_output_inside_a_live_data_dir_is_refused_and_nothing_is_created(tmp_path: Path,
                                                                               live_data: Path) -> None:
    copies = _copies(tmp_path)
    before = files(live_data)
    with lock_held(live_data):
        for out in (live_data / "merged", live_data, live_data / "v2-none-0" / "x"):
            result = kstore("merge", "--output-dir", str(out), *copies)
            assert status(result) == 2, (out, text(result))
            assert f"inside the Kafka data dir {live_data}" in text(result)
        result = kstore("merge", "--output-dir", str(tmp_path / "out"), "--keep-diverged", str(live_data / "div"),
                        *copies)
        assert status(result) == 2 and "--keep-diverged" in text(result)
    assert files(live_data) == before
    assert not (live_data / "merged").exists() and not (live_data / "div").exists()
    assert not (tmp_path / "out").exists()


def test_merge_output_through_a_symlink_into_a_data_dir_is_refused(tmp_path: Path, live_data: Path) -> None:
    copies = _copies(tmp_path)
    (tmp_path / "alias").symlink_to(live_data)
    result = kstore("merge", "--output-dir", str(tmp_path / "alias" / "merged"), *copies)
    assert status(result) == 2 and f"inside the Kafka data dir {live_data}" in text(result)
    assert not (live_data / "merged").exists()


def test_salvage_output_inside_a_data_dir(tmp_path: Path, live_data: Path) -> None:
    src = tmp_path / "src" / "orders-0"
    shutil.copytree(CORPUS / "logs" / "v2-none-0", src)
    before = files(live_data)
    with lock_held(live_data):
        # a dir below the data dir: never (a broker refuses to start with it)
        result = kstore("salvage", "--output-dir", str(live_data / "salvaged"), str(src))
        assert status(result) == 2 and f"inside the Kafka data dir {live_data}" in text(result)
        # a new partition dir in the data dir: only under its lock, which the running broker holds
        result = kstore("salvage", "--output-dir", str(live_data), str(src))
        assert status(result) == 1 and "locked by a running process" in text(result)
    assert files(live_data) == before
    assert not (live_data / "salvaged").exists() and not (live_data / "orders-0").exists()
    # an existing partition's name there: refused, the broker's partition untouched
    result = kstore("salvage", "--output-dir", str(live_data), str(tmp_path / "src" / "orders-0"))
    assert status(result) == 0, text(result)
    assert (live_data / "orders-0" / "00000000000000000000.log").exists()
    result = kstore("salvage", "--output-dir", str(live_data), str(live_data / "v2-none-0"))
    assert status(result) == 2


def test_convert_format_output_into_another_data_dir_is_refused(tmp_path: Path, live_data: Path) -> None:
    shutil.copytree(CORPUS / "logs" / "legacy-v1-0", tmp_path / "in" / "legacy-v1-0")
    before = files(live_data)
    with lock_held(live_data):
        result = kstore("convert-format", "--to-magic", "2", "--output-dir", str(live_data / "converted"),
                        str(tmp_path / "in" / "legacy-v1-0"))
        assert status(result) == 2 and f"inside the Kafka data dir {live_data}" in text(result)
        # a whole data dir's conversion copies its checkpoints: never into a data dir, even as the root
        result = kstore("convert-format", "--to-magic", "2", "--output-dir", str(live_data), str(tmp_path / "in"))
        assert status(result) == 2
    assert files(live_data) == before and not (live_data / "converted").exists()


@pytest.mark.parametrize("command", [["recover", "--jobs", "1"], ["rebuild-index", "--truncate"], ["salvage", "--in-place"]])
def test_a_quarantine_dir_inside_a_data_dir_is_refused(tmp_path: Path, live_data: Path, command) -> None:
    part = live_data / "v2-none-0"
    log = sorted(part.glob("*.log"))[-1]
    with open(log, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00\x00\x40damaged")  # a torn tail to cut and quarantine
    before = files(live_data)
    for qdir in (live_data / "q", live_data / "v2-none-0" / "q"):
        result = kstore(*command, "--quarantine-dir", str(qdir), str(part))
        assert status(result) == 2, (qdir, text(result))
        assert "--quarantine-dir is or lies inside" in text(result)
    assert files(live_data) == before and not (live_data / "q").exists()


def test_convert_format_may_add_a_new_partition_dir_to_a_data_dir_under_its_lock(tmp_path: Path,
                                                                                  live_data: Path) -> None:
    src = tmp_path / "in" / "orders-0"
    shutil.copytree(CORPUS / "logs" / "legacy-v1-0", src)
    with lock_held(live_data):
        result = kstore("convert-format", "--to-magic", "2", "--output-dir", str(live_data), str(src))
        assert status(result) == 1 and "locked by a running process" in text(result)
    assert not (live_data / "orders-0").exists()
    result = kstore("convert-format", "--to-magic", "2", "--output-dir", str(live_data), str(src))
    assert status(result) == 0, text(result)
    assert sorted(p.name for p in (live_data / "orders-0").glob("*.log"))
    result = kstore("convert-format", "--to-magic", "2", "--output-dir", str(live_data), str(src))
    assert status(result) == 2 and "orders-0 exists there already" in text(result)


@pytest.fixture
def linked_data(tmp_path: Path) -> Path:
    """A data dir whose one partition dir is a symlink to a partition elsewhere (outside the data dir, with no
    .lock or checkpoints of its own), and whose other one is its own: old data a retention would delete."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\n")
    shutil.copytree(CORPUS / "logs" / "v2-none-0", data / "own-0")
    shutil.copytree(CORPUS / "logs" / "v2-none-0", tmp_path / "elsewhere" / "linked-0")
    (data / "linked-0").symlink_to(tmp_path / "elsewhere" / "linked-0")
    return data


_ON_LINKED = [
    ["retain", "--retention-ms", "1"],
    ["compact", "--policy", "compact", "--min-cleanable-dirty-ratio", "0"],
    ["recover", "--jobs", "1"],
    ["rebuild-index", "--all"],
    ["convert-format", "--to-magic", "1", "--in-place"],
]


@pytest.mark.parametrize("args", _ON_LINKED)
def test_a_symlinked_partition_dir_is_not_changed_and_the_run_says_so(linked_data: Path, args) -> None:
    """A broker loads a data dir's symlinked child under that data dir's .lock and checkpoints; kstore takes a
    partition's data dir to be where its files are. So a walk leaves it unchanged, says why (exit 1), and the
    broker's lock on the data dir holding the link cannot be bypassed through it; named, it is refused."""
    target = linked_data.parent / "elsewhere" / "linked-0"
    before = files(target)
    with lock_held(linked_data):  # a running broker: the link is its only way in
        result = kstore(*args, str(linked_data / "linked-0"))
        assert status(result) == 2 and "its directory is a symlink" in text(result), text(result)
    result = kstore(*args, str(linked_data))
    assert status(result) == 1, text(result)
    assert f"{linked_data / 'linked-0'}: " in text(result) and "its directory is a symlink (to " in text(result)
    assert files(target) == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["linked-0"], "nothing (no .lock) beside the target"


def test_a_symlinked_partition_dir_is_still_read(linked_data: Path, tmp_path: Path) -> None:
    """Reading through the link is not writing through it: convert-format into an output dir converts it."""
    result = kstore("convert-format", "--to-magic", "2", "--output-dir", str(tmp_path / "out"), str(linked_data))
    assert status(result) == 0, text(result)
    assert (tmp_path / "out" / "linked-0").is_dir() and (tmp_path / "out" / "own-0").is_dir()


def test_repair_does_not_write_through_a_symlinked_partition_dir(linked_data: Path) -> None:
    """repair answers a malformed leader-epoch-checkpoint, but not through a data dir's symlinked child: the
    finding is named not repaired (exit 1), nothing beside the link's target is written, no .lock made."""
    target = linked_data.parent / "elsewhere" / "linked-0"
    (target / "leader-epoch-checkpoint").write_text("garbage\n")
    before = files(target)
    result = kstore("repair", str(linked_data))
    assert status(result) == 1, text(result)
    assert "not repaired (checkpoint-malformed): its directory is a symlink (to " in text(result)
    assert files(target) == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["linked-0"]
