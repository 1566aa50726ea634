"""--jobs of the read-only commands (doctor, verify-index, inspect): partitions checked in forked worker
processes, streamed back in order, so the output is the same byte for byte for any --jobs; and
doctor --quick, which checks only what Kafka's loader checks after a clean shutdown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List, Set, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.operations.startup import survey
from tests.commands.test_doctor import make_data_dir
from tests.conftest import CORPUS

_register_commands()

LOGS = CORPUS / "logs"


def _run(*args: str) -> Tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _damaged_brokers(root: Path) -> Path:
    """Two brokers' data dirs holding every corpus partition, with damage of each kind doctor reports."""
    every = tuple(sorted(p.name for p in LOGS.iterdir() if p.is_dir()))
    a = make_data_dir(root, "kafka-1", node=1, partitions=every)
    make_data_dir(root, "kafka-2", node=2, partitions=("v2-none-0", "v2-gzip-0", "transactional-0"))
    (a / "lost+found").mkdir()
    (a / "replication-offset-checkpoint").write_text("0\n5\n")
    part = a / "v2-none-0"
    shutil.copy2(part / "00000000000000000174.log", part / "00000000000000000174.log.swap")
    (part / "00000000000000000174.index").write_bytes(b"\x00" * 5)
    (part / "00000000000000000497.snapshot").write_bytes(b"\x00\x01garbage")
    (a / "v2-gzip-0" / "00000000000000000000.index").unlink()
    _flip_crc_of_third_batch(a / "transactional-0" / "00000000000000000000.log")
    return root


def _flip_crc_of_third_batch(log: Path) -> int:
    """One byte inside the third batch's records changed (only its CRC can tell); the batch's position."""
    raw = bytearray(log.read_bytes())
    pos = 0
    for _ in range(2):
        pos += 12 + int.from_bytes(raw[pos + 8:pos + 12], "big")
    raw[pos + 70] ^= 0xFF
    log.write_bytes(bytes(raw))
    return pos


@pytest.mark.parametrize("command", [["doctor"], ["doctor", "--quick"], ["verify-index"], ["inspect"]])
@pytest.mark.parametrize("as_json", [False, True])
def test_every_jobs_gives_the_same_output(tmp_path, command, as_json):
    root = _damaged_brokers(tmp_path / "tree")
    outputs = set()
    codes = set()
    for jobs in ("1", "2", "5"):
        code, out = _run(*command, *(["--json"] if as_json else []), "--jobs", jobs, str(root))
        outputs.add(out)
        codes.add(code)
    assert len(outputs) == 1 and len(codes) == 1
    out = outputs.pop()
    if command[0] != "inspect":
        assert codes == {1}  # the damage is found, whichever process found it
    if as_json and command[0] != "inspect":
        # every partition of both brokers, once
        assert out.count('"type": "partition"') == len(survey([str(root)]).targets) > 20
    assert "v2-none-0" in out and "transactional-0" in out


def test_jobs_default_is_the_usable_cores_and_zero_is_a_usage_error(tmp_path, monkeypatch):
    import os

    from kstore_cli.operations import runner

    data = make_data_dir(tmp_path, partitions=("v2-none-0", "transactional-0", "v2-gzip-0"))
    asked: List[int] = []
    real = runner.stream

    def spy(work, items, *, jobs=1):
        asked.append(jobs)
        return real(work, items, jobs=jobs)

    monkeypatch.setattr(runner, "stream", spy)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    for module in ("kstore_cli.operations.partition_checks", "kstore_cli.operations.verify",
                   "kstore_cli.operations.summary"):
        monkeypatch.setattr(f"{module}.stream", spy)
    for command in ("doctor", "verify-index", "inspect"):
        code, _ = _run(command, str(data))
        assert code == 0
    # doctor and verify-index: their survey's scan of the partition dirs, then the checks; inspect: the checks
    assert asked == [3, 3, 3, 3, 3]
    code, out = _run("doctor", "--jobs", "0", str(data))
    assert code == 2 and "--jobs" in out


# --------------------------------------------------------------------------- doctor --quick


def _checks(out: str) -> Set[Tuple[str, str]]:
    return {(r["check"], r["file"] or r["partition"] or r["data_dir"])
            for r in map(json.loads, out.splitlines()) if r["type"] == "finding"}


def test_quick_skips_the_crc_scan_a_clean_startup_does_not_make(tmp_path):
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    log = data / "v2-none-0" / "00000000000000000000.log"
    _flip_crc_of_third_batch(log)
    code, full = _run("doctor", "--json", str(data))
    assert code == 1 and ("log-corrupt-batch", str(log)) in _checks(full)
    code, quick = _run("doctor", "--json", "--quick", str(data))
    assert code == 0 and _checks(quick) == set()
    summary = json.loads(quick.splitlines()[-1])
    assert summary["healthy"] and summary["partitions"] == 1


def test_quick_finds_what_a_clean_startup_finds(tmp_path):
    """Damage Kafka's loader meets after a clean shutdown (LogLoader.loadSegmentFiles, readNextOffset, the
    checkpoints, leader epochs and snapshots): --quick reports exactly what the full doctor reports."""
    data = make_data_dir(tmp_path, partitions=("v2-none-0", "transactional-0", "v2-gzip-0"))
    none0, txn0, gzip0 = data / "v2-none-0", data / "transactional-0", data / "v2-gzip-0"
    (gzip0 / "00000000000000000000.index").unlink()  # NoSuchFileException: the segment is recovered
    shutil.copy2(none0 / "00000000000000000174.index", none0 / "00000000000000099999.index")  # orphaned
    shutil.copy2(none0 / "00000000000000000174.log", none0 / "00000000000000000174.log.swap")  # leftover
    (none0 / "00000000000000000497.snapshot").write_bytes(b"\x00\x01garbage")  # corrupt snapshot
    txn = txn0 / "00000000000000000062.txnindex"
    raw = bytearray(txn.read_bytes())
    raw[0] = 1  # version 1: TransactionIndex.sanityCheck throws CorruptIndexException
    txn.write_bytes(bytes(raw))
    # the log start offset past the log end that readNextOffset gives
    (data / "log-start-offset-checkpoint").write_text("0\n1\nv2-gzip 0 100000\n")
    code, full = _run("doctor", "--json", str(data))
    code_quick, quick = _run("doctor", "--json", "--quick", str(data))
    assert code == code_quick == 1
    found = _checks(quick)
    # the full doctor also compares the .txnindex's entries with the ABORT markers of the .log
    assert found == _checks(full) - {("txnindex-entries", str(txn))}
    kinds = {c for c, _ in found}
    assert {"missing-index", "orphan-index", "leftover-swap", "txnindex-sanity"} <= kinds
    assert any("snapshot" in c for c in kinds) and any("log-start" in c or "checkpoint" in c for c in kinds)


def test_quick_does_not_judge_the_indexes_against_the_log(tmp_path):
    """A clean startup loads the offset and time indexes as they are (LogSegment.sanityCheck, 4.0): a wrong
    entry is the full doctor's finding only."""
    data = make_data_dir(tmp_path, partitions=("v2-none-0",))
    index = data / "v2-none-0" / "00000000000000000000.index"
    raw = bytearray(index.read_bytes())
    raw[4:8] = (int.from_bytes(raw[4:8], "big") + 1).to_bytes(4, "big")  # first entry's position off by one
    index.write_bytes(bytes(raw))
    code, full = _run("doctor", "--json", str(data))
    assert code == 1 and ("index-position", str(index)) in _checks(full)
    code, quick = _run("doctor", "--json", "--quick", str(data))
    assert code == 0 and _checks(quick) == set()


def test_inspect_lists_partitions_in_the_workers_with_the_same_rows(tmp_path):
    """inspect resolves a data dir lazily (names only: each partition is listed by the process that reads it);
    its rows are those of the partitions listed up front, a symlinked partition's data dir included."""
    from kstore_cli.log.logdir import Partition, PartitionDir, resolve, resolve_partitions
    from kstore_cli.operations.summary import summarize_partitions

    root = _damaged_brokers(tmp_path / "tree")
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(LOGS / "v2-lz4-0", elsewhere / "linked-0")
    (root / "kafka-1" / "linked-0").symlink_to(elsewhere / "linked-0")
    lazy = list(resolve_partitions([str(root)]))
    eager = [t.partition for t in resolve([str(root)])]
    assert lazy and all(isinstance(p, PartitionDir) for p in lazy) and all(isinstance(p, Partition) for p in eager)
    assert [p.data_dir for p in lazy] == [p.data_dir for p in eager]
    assert any(p.data_dir == str(elsewhere) for p in lazy)
    want = [json.dumps(r.to_dict(), sort_keys=True) for r in summarize_partitions(eager, jobs=1)]
    code, out = _run("inspect", "--json", "--jobs", "2", str(root))
    assert code == 0 and [line for line in out.splitlines() if '"type": "skipped"' not in line] == want
