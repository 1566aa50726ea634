"""Damaged input never produces a Python traceback: only `kstore: error:` lines and documented exit codes.

Seeds are Kafka-written files from the golden inputs; damage is truncation, flipped bits, and size-like
fields set to extreme values (2^31-1, -1, 0). Each run goes through `kstore_cli.cli.main`, the real
error -> exit-status mapping, in text and JSON modes.
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import List, Tuple

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.cli import main
from tests.conftest import GOLDEN

INPUTS = GOLDEN / "inputs"

#: (directory, file) seeds: every record format, codec, control record and index kind Kafka wrote.
SEEDS: List[Tuple[str, str]] = [
    ("codecs-0", "00000000000000000000.log"),
    ("legacy-v0-0", "00000000000000000000.log"),
    ("legacy-v1-0", "00000000000000000000.log"),
    ("txn-0", "00000000000000000000.log"),
    ("__cluster_metadata-0", "00000000000000000000.log"),
    ("__consumer_offsets-0", "00000000000000000000.log"),
    ("multiseg-0", "00000000000000000000.index"),
    ("multiseg-0", "00000000000000000000.timeindex"),
    ("txn-0", "00000000000000000000.txnindex"),
    ("txn-0", "00000000000000000018.snapshot"),
]

LOG_MODES = [
    [],
    ["--deep-iteration"],
    ["--print-data-log"],
    ["--offsets-decoder"],
    ["--transaction-log-decoder"],
    ["--cluster-metadata-decoder"],
    ["--json", "--deep-iteration", "--print-data-log"],
]
INDEX_MODES = [[], ["--verify-index-only"], ["--index-sanity-check"], ["--json"]]

#: stderr lines Kafka itself prints (and so do we).
KAFKA_STDERR_PREFIXES = (
    "Ignoring unknown file ",
    "Mismatches in :",
    "  Index offset: ",
    "Found timestamp mismatch in :",
    "  Index timestamp: ",
    "Found out of order timestamp in :",
    "The following indexed offsets are not found in the log.",
    "Indexed offset: ",
    "Non-consecutive offsets in ",
    "Snapshot is corrupt",
    "Snapshot failed schema validation",
)
# "  A is followed by B"
_FOLLOWED = " is followed by "


def _copy_partition(seed_dir: str, dest: Path) -> None:
    for f in (INPUTS / seed_dir).iterdir():
        if f.is_file():
            shutil.copy(f, dest / f.name)


def _run(args: List[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> Tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("KSTORE_TRACEBACK", raising=False)
    with CliRunner().isolation() as (out, err, _mixed):
        try:
            main(["dump-segment", *args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")


def _check(code: int, stderr: str, json_mode: bool, stdout: str = "") -> None:
    assert "Traceback" not in stderr
    assert "internal error" not in stderr, stderr
    assert code in (0, 1, 3), (code, stderr)
    lines = stderr.splitlines()
    errors = [line for line in lines if line.startswith("kstore: error: ")]
    others = [line for line in lines if not line.startswith("kstore: error: ")]
    for line in others:
        assert line.startswith(KAFKA_STDERR_PREFIXES) or _FOLLOWED in line, line
    if json_mode:
        # JSON mode reports data problems as error objects on stdout and goes on.
        assert stderr == ""
        objects = [json.loads(line) for line in stdout.splitlines()]
        assert (code != 0) == any(o["type"] == "error" for o in objects)
    assert len(errors) <= 1
    if errors:
        assert code != 0 and lines[-1] == errors[0]


def _damage(data: bytearray, kind: str, position: int, value: int) -> bytes:
    if not data:
        return bytes(data)
    position %= len(data)
    if kind == "truncate":
        return bytes(data[:position])
    if kind == "flip":
        data[position] ^= 1 << (value % 8)
        return bytes(data)
    # an int32 field set to an extreme value
    extreme = [0x7FFFFFFF, -1, 0, -0x80000000, 14][value % 5]
    position = min(position, max(0, len(data) - 4))
    struct.pack_into(">i", data, position, extreme)
    return bytes(data)


def _modes_for(name: str) -> List[List[str]]:
    return LOG_MODES if name.endswith(".log") else INDEX_MODES


@given(
    seed=st.sampled_from(SEEDS),
    kind=st.sampled_from(["truncate", "flip", "int32"]),
    position=st.integers(min_value=0, max_value=1 << 20),
    value=st.integers(min_value=0, max_value=255),
    mode=st.integers(min_value=0, max_value=len(LOG_MODES) - 1),
)
def test_damaged_files_give_only_kstore_errors(seed, kind, position, value, mode) -> None:
    seed_dir, name = seed
    monkeypatch = pytest.MonkeyPatch()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            part = Path(tmp) / seed_dir
            part.mkdir()
            _copy_partition(seed_dir, part)
            target = part / name
            target.write_bytes(_damage(bytearray(target.read_bytes()), kind, position, value))
            modes = _modes_for(name)
            args = modes[mode % len(modes)]
            code, out, err = _run([*args, "--files", f"{seed_dir}/{name}"], Path(tmp), monkeypatch)
            _check(code, err, "--json" in args, out)
        finally:
            monkeypatch.undo()


def _batch_positions(data: bytes) -> List[int]:
    positions, pos = [], 0
    while pos + 12 <= len(data):
        positions.append(pos)
        (size,) = struct.unpack_from(">i", data, pos + 8)
        pos += 12 + size
    return positions


# Each v2 header field that is a length or a count, at every batch of the codecs log.
_CODECS_LOG = (INPUTS / "codecs-0" / "00000000000000000000.log").read_bytes()
_FIELD_CASES = [
    (batch_pos, field_offset, extreme)
    for batch_pos in _batch_positions(_CODECS_LOG)
    for field_offset in (8, 23, 57, 61)  # batchLength, lastOffsetDelta, recordsCount, first record's length
    for extreme in (0x7FFFFFFF, -1)
]


@pytest.mark.parametrize("batch_pos,field_offset,extreme", _FIELD_CASES)
def test_extreme_size_fields(batch_pos: int, field_offset: int, extreme: int, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(_CODECS_LOG)
    struct.pack_into(">i", data, batch_pos + field_offset, extreme)
    (tmp_path / "00000000000000000000.log").write_bytes(bytes(data))
    for args in (["--print-data-log"], ["--json", "--print-data-log"]):
        code, out, err = _run([*args, "00000000000000000000.log"], tmp_path, monkeypatch)
        _check(code, err, "--json" in args, out)
        assert code == 1  # every one of these is a data problem
        if "--json" not in args:
            assert out.startswith("Dumping 00000000000000000000.log\nLog starting offset: 0\n")


@pytest.mark.parametrize("slot_value", [0x7FFFFFFF, -1, -0x80000000])
@pytest.mark.parametrize("name", ["00000000000000000000.index", "00000000000000000000.timeindex"])
def test_index_entries_pointing_anywhere(name: str, slot_value: int, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _copy_partition("multiseg-0", tmp_path)
    data = bytearray((tmp_path / name).read_bytes())
    struct.pack_into(">i", data, 4 if name.endswith(".index") else 8, slot_value)
    (tmp_path / name).write_bytes(bytes(data))
    for args in ([], ["--json"], ["--index-sanity-check"]):
        code, out, err = _run([*args, name], tmp_path, monkeypatch)
        _check(code, err, "--json" in args, out)


def test_empty_and_missing_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for suffix in (".log", ".index", ".timeindex", ".snapshot", ".txnindex"):
        (tmp_path / ("00000000000000000000" + suffix)).write_bytes(b"")
    names = [p.name for p in sorted(tmp_path.iterdir())]
    code, out, err = _run(names, tmp_path, monkeypatch)
    _check(code, err, False)
    assert code == 1  # the empty snapshot fails its schema check
    code, _out, err = _run(["00000000000000000042.log"], tmp_path, monkeypatch)
    assert code == 3 and err == "kstore: error: 00000000000000000042.log: no such file\n"
    (tmp_path / "sub.log").mkdir()
    code, _out, err = _run(["sub.log"], tmp_path, monkeypatch)
    assert code == 2 and err.startswith("kstore: error: ")  # not a base-offset name
