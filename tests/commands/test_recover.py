"""`kstore recover`'s verdict and the files it leaves: what still stops the broker after recovery is named
(exit 1), index files without their .log are deleted as Kafka's loader deletes them, and a file that cannot
be read or written is one line on stderr with exit 3, also from a worker process of --jobs."""

from __future__ import annotations

import errno
import json
import os
import pickle
from pathlib import Path
from typing import List

from kstore_cli.errors import ExitStatus, FileUnreadableError
from kstore_cli.log import fileops
from kstore_cli.operations.loader import RecoverResult
from kstore_cli.log.logdir import Partition
from tests.safety_data import make_data_dir
from tests.test_safety import run_main


def _rows(out: str) -> List[dict]:
    return [json.loads(line) for line in out.splitlines()]


def _orphans(data: Path) -> List[str]:
    return sorted(Path(o).name for p in data.iterdir() if p.is_dir() and p.name[-1].isdigit()
                  for o in Partition(str(p)).orphan_indexes)


def test_a_malformed_leader_epoch_checkpoint_is_left_and_named(oracle, tmp_path: Path) -> None:
    part = make_data_dir(tmp_path / "data")
    epochs = part / "leader-epoch-checkpoint"
    epochs.write_text("0\n1\nx 0\n")
    code, out, err = run_main(["recover", "--jobs", "1", str(tmp_path / "data")])
    assert code == 1 and err == "", (code, out, err)
    row = next(line for line in out.splitlines() if line.startswith(f"{part}: "))
    assert row.startswith(f"{part}: recovered ") and "LEFT: 1 finding(s) that stop the broker" in row, out
    assert f"{epochs} at byte 4: error: checkpoint-malformed: " in out and "the broker stops" in out, out
    assert epochs.read_text() == "0\n1\nx 0\n"  # Kafka's recovery does not rewrite it either: named, not changed
    kafka = oracle.run_many([("load-log", [str(part), "--unclean", "--no-records"])])[0].one("summary")
    assert not kafka["ok"] and "NumberFormatException" in kafka["exception"]  # what recover said is left
    code, out, _err = run_main(["recover", "--json", "--jobs", "1", str(tmp_path / "data")])
    rows = _rows(out)
    findings = [r for r in rows if r["type"] == "finding"]
    assert code == 1 and [(f["check"], f["file"], f["severity"]) for f in findings] == \
        [("checkpoint-malformed", str(epochs), "error")]
    assert next(r for r in rows if r.get("partition") == str(part) and r["type"] == "partition")["left"] == 1
    assert rows[-1]["type"] == "summary" and rows[-1]["left"] == 1 and rows[-1]["problems"] == 0


def test_a_malformed_data_dir_checkpoint_is_left_and_a_dry_run_names_it_too(tmp_path: Path) -> None:
    make_data_dir(tmp_path / "data")
    hw = tmp_path / "data" / "replication-offset-checkpoint"
    hw.write_text("0\n2\norders 0 72\n")  # two entries announced, one there
    code, out, _err = run_main(["recover", "--dry-run", "--json", str(tmp_path / "data")])
    assert code == 1 and [(r["check"], r["file"]) for r in _rows(out) if r["type"] == "finding"] == \
        [("checkpoint-malformed", str(hw))], out
    code, out, _err = run_main(["recover", "--jobs", "1", str(tmp_path / "data")])
    assert code == 1 and f"{hw} at byte 2: error: checkpoint-malformed: " in out, out
    assert run_main(["recover", "--jobs", "1", str(tmp_path / "data")])[0] == 1  # still there on a rerun


def test_a_healthy_data_dir_has_nothing_left(tmp_path: Path) -> None:
    make_data_dir(tmp_path / "data")
    code, out, err = run_main(["recover", "--json", "--jobs", "1", str(tmp_path / "data")])
    rows = _rows(out)
    assert code == 0 and err == "" and rows[-1]["left"] == 0 and not [r for r in rows if r["type"] == "finding"]


def test_index_files_without_their_log_are_deleted_as_kafkas_loader_does(oracle, tmp_path: Path) -> None:
    for run in ("real", "dry"):
        part = make_data_dir(tmp_path / run)
        for name in ("00000000000000000500.index", "00000000000000000500.timeindex",
                     "00000000000000000500.txnindex"):
            (part / name).write_bytes(bytes(12))
    code, out, _err = run_main(["recover", "--jobs", "1", str(tmp_path / "real")])
    assert code == 0 and _orphans(tmp_path / "real") == [], out
    assert "3 index file(s) without their .log deleted" in out, out
    code, out, _err = run_main(["recover", "--dry-run", "--json", str(tmp_path / "dry")])
    row = next(r for r in _rows(out) if r.get("partition") == str(tmp_path / "dry" / "orders-0"))
    assert code == 0 and len(row["orphan_indexes_deleted"]) == 3 and len(_orphans(tmp_path / "dry")) == 3, out
    kafka = oracle.run_many([("load-log", [str(tmp_path / "dry" / "orders-0"), "--no-records"])])[0].one("summary")
    assert sorted(kafka["files_removed"]) == sorted(row["orphan_indexes_deleted"]), kafka


def test_a_partition_without_logs_loses_its_orphans_keeps_its_checkpoints_and_is_named(tmp_path: Path) -> None:
    part = make_data_dir(tmp_path / "data")
    for log in part.glob("*.log"):
        log.unlink()
    checkpoints = {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir() if p.is_file()}
    snapshots = sorted(p.name for p in part.glob("*.snapshot"))
    code, out, _err = run_main(["recover", "--json", "--jobs", "1", str(tmp_path / "data")])
    rows = _rows(out)
    assert code == 1 and [(r["check"], r["partition"]) for r in rows if r["type"] == "finding"] == \
        [("partition-without-logs", str(part))], out
    assert _orphans(tmp_path / "data") == [] and sorted(p.name for p in part.glob("*.snapshot")) == snapshots
    # Nothing lowered to a log end of 0: the checkpoints still say where the partition's data went.
    assert {n: b for n, b in checkpoints.items() if n != ".lock"} == \
        {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir() if p.is_file() and p.name != ".lock"}


def _write_of(data: Path, ends: str, within: str = "") -> int:
    """The file operation at which recover writes (to its temp file) the file whose path ends with `ends` and
    holds `within` (a reference run over `data`)."""
    fileops.arm_crash(None)
    assert run_main(["recover", "--jobs", "1", str(data)])[0] == 0
    journal = list(fileops.journal)
    return next(n for n, (kind, path) in enumerate(journal, 1)
                if kind == "write" and within in path and path.endswith(ends + fileops.TMP_SUFFIX))


def _roll_log_write(data: Path) -> int:
    """The file operation at which recover writes the rolled empty .log of orders-0 (a reference run)."""
    return _write_of(data, ".log", "orders-0")


def test_a_full_disk_or_no_permission_is_exit_3_on_stderr_and_leaves_no_orphan_index(tmp_path: Path) -> None:
    make_data_dir(tmp_path / "ref")
    at = _roll_log_write(tmp_path / "ref")
    for err in (errno.ENOSPC, errno.EPERM):
        data = tmp_path / f"d{err}"
        part = make_data_dir(data)
        fileops.arm_fault(at, err)
        try:
            code, out, stderr = run_main(["recover", "--jobs", "1", str(data)])
        finally:
            fileops.arm_crash(None)
        lines = stderr.splitlines()
        assert code == 3 and len(lines) == 1 and lines[0].startswith(f"kstore: error: {part}"), (code, stderr)
        assert os.strerror(err).lower() in lines[0].lower() or "no space left on device" in lines[0], stderr
        assert f"{part}: NOT RECOVERED" in out and "kstore: error" not in out, out
        assert _orphans(data) == []  # the roll's indexes went with its .log
        assert run_main(["recover", "--jobs", "1", str(data)])[0] == 0


def test_a_failed_recovery_point_write_still_prints_what_was_recovered_cut_and_quarantined(tmp_path: Path) -> None:
    """The data dir's recovery-point checkpoint is written last, after every partition's work: when that write
    fails, the rows of what was done (the cut and where its bytes went) come first, then the one error line."""
    for run in ("ref", "text", "json"):
        part = make_data_dir(tmp_path / run / "data")
        with open(next(part.glob("*.log")), "ab") as log:
            log.write(b"\xff" * 40)  # a torn tail: recovery cuts it and quarantines it
    at = _write_of(tmp_path / "ref" / "data", "recovery-point-offset-checkpoint")
    outputs = {}
    for run in ("text", "json"):
        checkpoint = tmp_path / run / "data" / "recovery-point-offset-checkpoint"
        before = checkpoint.read_bytes()
        fileops.arm_fault(at, errno.ENOSPC)
        try:
            code, out, stderr = run_main(["recover", "--jobs", "1", *(["--json"] if run == "json" else []),
                                          str(tmp_path / run / "data")])
        finally:
            fileops.arm_crash(None)
        lines = stderr.splitlines()
        assert code == 3 and len(lines) == 1 and lines[0].startswith(f"kstore: error: {checkpoint}"), (code, stderr)
        assert "no space left on device" in lines[0] and checkpoint.read_bytes() == before, stderr
        outputs[run] = out
    part = tmp_path / "text" / "data" / "orders-0"
    row = next(line for line in outputs["text"].splitlines() if line.startswith(f"{part}: "))
    assert row.startswith(f"{part}: recovered ") and "CUT at " in row and "quarantined in " in row, outputs["text"]
    assert f"{tmp_path / 'text' / 'data' / 'clicks-0'}: recovered " in outputs["text"]
    rows = _rows(outputs["json"])
    (cut,) = [r for r in rows if r["type"] == "partition" and r["cut_at"] is not None]
    assert cut["partition"] == str(tmp_path / "json" / "data" / "orders-0") and os.path.isdir(cut["quarantine_dir"])
    assert rows[-1]["type"] == "summary" and rows[-1]["partitions"] == 2 and rows[-1]["cut"] == 1, rows
    code, out, _err = run_main(["recover", "--jobs", "1", str(tmp_path / "text" / "data")])  # the rerun writes it
    assert code == 0 and (tmp_path / "text" / "data" / "recovery-point-offset-checkpoint").read_text() == \
        (tmp_path / "ref" / "data" / "recovery-point-offset-checkpoint").read_text(), out


def test_an_error_in_a_worker_process_keeps_its_type_and_exit_status(tmp_path: Path) -> None:
    part = make_data_dir(tmp_path / "data")
    (part / "00000000000000000072.timeindex").mkdir()  # where the roll at the log end writes: refused
    code, out, stderr = run_main(["recover", "--jobs", "2", "--json", str(tmp_path / "data")])
    lines = stderr.splitlines()
    assert code == 3 and len(lines) == 1 and lines[0].startswith(
        f"kstore: error: {part}/00000000000000000072.timeindex: "), (code, stderr)
    rows = _rows(out)
    assert [r["partition"] for r in rows if r["type"] == "partition" and r["problem"]] == [str(part)]
    assert rows[-1]["partitions"] == 2 and rows[-1]["problems"] == 1


def test_a_result_crosses_the_process_pool_with_its_typed_error() -> None:
    error = FileUnreadableError("could not write: no space left on device", path="/d/t-0/x.log", position=7)
    result = RecoverResult("/d/t-0", "t", 0, "/d", problem=str(error), error=error)
    back = pickle.loads(pickle.dumps(result))
    assert type(back.error) is FileUnreadableError and back.error.exit_status == ExitStatus.UNREADABLE
    assert str(back.error) == "/d/t-0/x.log at byte 7: could not write: no space left on device"


def test_a_missing_partition_metadata_is_left_on_a_kraft_node_only(tmp_path: Path) -> None:
    """A ZooKeeper-mode broker (meta.properties version 0) loads a log with no partition.metadata (none had
    one before 2.8); only a KRaft broker calls it stray (LogManager.isStrayKraftReplica)."""
    for mode, meta in (("zk", "version=0\nbroker.id=1\ncluster.id=kstore-safety\n"),
                       ("kraft", "version=1\nnode.id=1\ncluster.id=kstore-safety\n")):
        part = make_data_dir(tmp_path / mode)
        (tmp_path / mode / "meta.properties").write_text(meta)
        (part / "partition.metadata").unlink()
        code, out, _err = run_main(["recover", "--json", "--jobs", "1", str(tmp_path / mode)])
        assert (code, _rows(out)[-1]["left"]) == ((0, 0) if mode == "zk" else (1, 1)), (mode, out)
