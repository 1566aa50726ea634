"""Batch offsets Kafka rejects: a negative base offset or last offset delta, a last offset past Long.MAX_VALUE.

Such a batch can pass its CRC (the CRC does not cover the base offset, and a writer can put any delta in).
``Batch.ensure_valid_offsets`` rejects it; recover and rebuild-index --truncate cut there as at a CRC failure
(LogSegment.recover truncates at an InvalidRecordException), salvage leaves it out as damage, and merge,
convert-format and compact refuse with one line naming the file and byte. Nothing any of them writes holds
an offset Kafka cannot parse. The suite runs once per decoder twin (KSTORE_DECODER=python), and the
commands run in a subprocess that inherits it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from kstore_cli.errors import InvalidRecordError
from kstore_cli.java import MAX_INT64
from kstore_cli.record.builder import RecordSpec, build_legacy_entry, build_v2_batch
from kstore_cli.log.log_segment import read_next_offset
from kstore_cli.log.names import filename_prefix
from kstore_cli.record.reader import read_batches
from tests.conftest import ROOT

T = 1_700_000_000_000


def _records(first: int, n: int) -> List[RecordSpec]:
    return [RecordSpec(first + i, T + i, f"k{i}".encode(), f"v{first + i}".encode()) for i in range(n)]


#: CRC-valid entries whose offsets Kafka rejects, in a segment whose base offset is 0.
BAD: Dict[str, Callable[[], bytes]] = {
    # Java's baseOffset + lastOffsetDelta wraps to Long.MIN_VALUE; Python's sum is 9223372036854775809.
    "past-long-max": lambda: build_v2_batch(_records(MAX_INT64 - 1, 1), base_offset=MAX_INT64 - 1, last_offset_delta=2),
    "negative-delta": lambda: build_v2_batch(_records(1, 3), last_offset_delta=-1),
    "negative-base": lambda: build_v2_batch(_records(-5, 2)),
    "legacy-negative": lambda: build_legacy_entry(-3, 1, 0, T, b"k", b"v"),
}

GOOD = build_v2_batch(_records(0, 1))
ACTIVE_BASE = 10


def _partition(data: Path, bad: bytes, then_a_segment: bool = True) -> Path:
    """orders-0: segment 0 = one good batch (offset 0) then the bad one; with `then_a_segment`, segment 10
    = one good batch (else the bad batch ends the log: what the issue's run turned into a checkpoint of
    9223372036854775809 and a segment named after it)."""
    part = data / "orders-0"
    part.mkdir(parents=True)
    (part / f"{filename_prefix(0)}.log").write_bytes(GOOD + bad)
    if then_a_segment:
        (part / f"{filename_prefix(ACTIVE_BASE)}.log").write_bytes(build_v2_batch(_records(ACTIVE_BASE, 2)))
    return part


LAYOUTS = pytest.mark.parametrize("then_a_segment", [True, False], ids=["then-a-segment", "last"])


def _kstore(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kstore_cli", *args], capture_output=True, text=True, env=env, cwd=ROOT)


_NUMBER = re.compile(rb"-?\d{19,}")


def _assert_no_offset_past_long_max(root: Path) -> None:
    """No file name and no file's bytes (checkpoints, manifests, JSON) hold a number past Long.MAX_VALUE."""
    for path in root.rglob("*"):
        for m in _NUMBER.finditer(path.name.encode()):
            assert abs(int(m.group())) <= MAX_INT64, path
        if path.is_file():
            for m in _NUMBER.finditer(path.read_bytes()):
                assert int(m.group()) <= MAX_INT64, (path, m.group())


def _one_error_line(out: subprocess.CompletedProcess, log: Path, position: int) -> str:
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    # "kstore: error: <file> at byte <pos>: ..."; compact names the partition first, as for every error of a pass
    assert lines[0].startswith("kstore: ") and f" {log} at byte {position}: " in lines[0], lines[0]
    assert "invalid" in lines[0] and "Traceback" not in out.stderr
    return lines[0]


# --------------------------------------------------------------------------- the core check


@pytest.mark.parametrize("kind", sorted(BAD))
def test_framed_batches_with_offsets_kafka_rejects_fail_ensure_valid_offsets(kind: str) -> None:
    buf = GOOD + BAD[kind]()
    good, bad = list(read_batches(buf, path="x.log", check_crc=True))
    good.ensure_valid()
    good.ensure_valid_offsets()
    bad.ensure_valid()  # the CRC is fine: only the offsets are wrong
    assert bad.offsets_problem() is not None
    with pytest.raises(InvalidRecordError) as info:
        bad.ensure_valid_offsets()
    assert (info.value.path, info.value.position) == ("x.log", len(GOOD))
    assert str(MAX_INT64 + 2) not in str(info.value)


def test_the_last_offset_may_be_long_max_itself() -> None:
    ok = build_v2_batch(_records(MAX_INT64 - 2, 1), base_offset=MAX_INT64 - 2, last_offset_delta=2)
    (batch,) = read_batches(ok, check_crc=True)
    assert batch.offsets_problem() is None and batch.last_offset == MAX_INT64


# --------------------------------------------------------------------------- commands that cut or skip


@LAYOUTS
@pytest.mark.parametrize("kind", sorted(BAD))
def test_recover_cuts_at_the_batch_as_kafka_recovery_does(tmp_path: Path, kind: str, then_a_segment: bool) -> None:
    part = _partition(tmp_path / "data", BAD[kind](), then_a_segment)
    out = _kstore("recover", str(part))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "invalid-offsets" in out.stdout
    assert (part / f"{filename_prefix(0)}.log").read_bytes() == GOOD
    assert not (part / f"{filename_prefix(ACTIVE_BASE)}.log").exists()  # after the cut: quarantined
    assert sorted(p.name for p in part.glob("*.log")) == [f"{filename_prefix(0)}.log", f"{filename_prefix(1)}.log"]
    assert "orders 0 1" in (tmp_path / "data" / "recovery-point-offset-checkpoint").read_text()
    _assert_no_offset_past_long_max(tmp_path)


@LAYOUTS
@pytest.mark.parametrize("kind", sorted(BAD))
def test_rebuild_index_truncate_cuts_at_the_batch(tmp_path: Path, kind: str, then_a_segment: bool) -> None:
    part = _partition(tmp_path / "data", BAD[kind](), then_a_segment)
    out = _kstore("rebuild-index", "--truncate", str(part))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "invalid-offsets" in out.stdout
    assert (part / f"{filename_prefix(0)}.log").read_bytes() == GOOD
    _assert_no_offset_past_long_max(tmp_path)


@LAYOUTS
@pytest.mark.parametrize("kind", sorted(BAD))
def test_salvage_leaves_the_batch_out_as_damage(tmp_path: Path, kind: str, then_a_segment: bool) -> None:
    bad = BAD[kind]()
    part = _partition(tmp_path / "data", bad, then_a_segment)
    out = _kstore("salvage", "--json", "--output-dir", str(tmp_path / "out"), str(part))
    assert out.returncode == 1, out.stdout + out.stderr  # damage found, left in the input
    gaps = [r for r in map(json.loads, out.stdout.splitlines()) if r.get("type") == "gap"]
    assert [(g["start"], g["end"], g["kind"]) for g in gaps] == [(len(GOOD), len(GOOD) + len(bad), "damaged")]
    salvaged = tmp_path / "out" / "orders-0"
    assert (salvaged / f"{filename_prefix(0)}.log").read_bytes() == GOOD
    if then_a_segment:
        assert (salvaged / f"{filename_prefix(ACTIVE_BASE)}.log").read_bytes() == \
            (part / f"{filename_prefix(ACTIVE_BASE)}.log").read_bytes()
    else:
        assert sorted(p.name for p in salvaged.glob("*.snapshot")) == [f"{filename_prefix(1)}.snapshot"]
    _assert_no_offset_past_long_max(tmp_path)


# --------------------------------------------------------------------------- commands that refuse


def _tree(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and p.name != ".lock"}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_convert_format_refuses_with_one_line(tmp_path: Path, kind: str) -> None:
    part = _partition(tmp_path / "data", BAD[kind]())
    before = _tree(tmp_path / "data")
    for to_magic in ("2", "1"):
        out = _kstore("convert-format", "--to-magic", to_magic, "--compression", "gzip",
                      "--output-dir", str(tmp_path / f"out{to_magic}"), str(part))
        assert out.returncode == 1, out.stdout + out.stderr
        _one_error_line(out, part / f"{filename_prefix(0)}.log", len(GOOD))
    assert _tree(tmp_path / "data") == before
    _assert_no_offset_past_long_max(tmp_path)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_compact_refuses_with_one_line_and_changes_nothing(tmp_path: Path, kind: str) -> None:
    part = _partition(tmp_path / "data", BAD[kind]())
    before = _tree(tmp_path / "data")
    for extra in ([], ["--dry-run"]):
        out = _kstore("compact", "--policy", "compact", "--force-clean", *extra, str(part))
        assert out.returncode == 1, out.stdout + out.stderr
        line = _one_error_line(out, part / f"{filename_prefix(0)}.log", len(GOOD))
        assert "not cleaned" in line
    assert _tree(tmp_path / "data") == before


@pytest.mark.parametrize("kind", sorted(BAD))
def test_merge_refuses_with_one_line(tmp_path: Path, kind: str) -> None:
    bad = BAD[kind]()
    _partition(tmp_path / "broker1", bad)
    _partition(tmp_path / "broker2", bad)
    out = _kstore("merge", "--output-dir", str(tmp_path / "merged"), str(tmp_path / "broker1"),
                  str(tmp_path / "broker2"))
    assert out.returncode == 1, out.stdout + out.stderr
    line = out.stderr.splitlines()
    assert len(line) == 1 and f"{filename_prefix(0)}.log at byte {len(GOOD)}: " in line[0], out.stderr
    _assert_no_offset_past_long_max(tmp_path)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_the_log_end_offset_stops_before_the_batch(tmp_path: Path, kind: str) -> None:
    """LogSegment.readNextOffset (what retain rolls an empty segment at, and the checkpoints it writes) ends
    where recovery would cut, not at a sum past Long.MAX_VALUE."""
    part = _partition(tmp_path / "data", BAD[kind](), then_a_segment=False)
    assert read_next_offset(str(part / f"{filename_prefix(0)}.log"), 0) == 1
    out = _kstore("retain", "--retention-ms", "1", str(part))
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(p.name for p in part.glob("*.log")) == [f"{filename_prefix(1)}.log"]
    _assert_no_offset_past_long_max(tmp_path)


@pytest.mark.parametrize("kind", sorted(BAD))
def test_verify_index_reports_where_recovery_would_cut(tmp_path: Path, kind: str) -> None:
    part = _partition(tmp_path / "data", BAD[kind]())
    assert _kstore("rebuild-index", "--all", str(part)).returncode == 1  # the damaged segment's indexes are left
    out = _kstore("verify-index", str(part))
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"{filename_prefix(0)}.log: error: log-invalid-offsets: valid data ends at byte {len(GOOD)}: " in out.stdout
