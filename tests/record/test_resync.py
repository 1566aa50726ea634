"""record/resync.py: next_intact_batch, the resync scan salvage runs past damage."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

import pytest

from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.record.resync import next_intact_batch


def _batch(first: int, count: int = 3) -> bytes:
    return build_v2_batch([RecordSpec(first + i, 1_700_000_000_000 + i, b"k%d" % (first + i), b"v" * 30)
                           for i in range(count)])


def _log(tmp_path: Path, parts: Sequence[bytes]) -> str:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(parts))
    return str(path)


def _damaged(batch: bytes) -> bytes:
    """The batch with one byte of its records flipped: its header still looks right, its CRC fails."""
    broken = bytearray(batch)
    broken[-5] ^= 0x40
    return bytes(broken)


GARBAGE = [
    b"\x00" * 37,
    bytes(random.Random(7).getrandbits(8) for _ in range(500)),
    bytes(random.Random(8).getrandbits(8) for _ in range(3000)),
    _damaged(_batch(3)),  # a copy of the next batch, CRC broken
    _batch(0)[:40] + b"\xff" * 9,  # a torn earlier batch
]


@pytest.mark.parametrize("garbage", GARBAGE, ids=["zeros", "random-500", "random-3000", "bad-crc", "torn"])
def test_finds_the_next_intact_batch_past_garbage(tmp_path: Path, garbage: bytes) -> None:
    first, second = _batch(0), _batch(3)
    path = _log(tmp_path, [first, garbage, second])
    assert next_intact_batch(path, len(first), 2) == len(first) + len(garbage)
    assert next_intact_batch(path, 0, -1) == 0  # the first batch itself, at or after start
    assert next_intact_batch(path, 1, -1) == len(first) + len(garbage)  # not before start


def test_none_when_nothing_intact_follows(tmp_path: Path) -> None:
    first, second = _batch(0), _batch(3)
    assert next_intact_batch(_log(tmp_path, [first, GARBAGE[2]]), len(first), 2) is None
    assert next_intact_batch(_log(tmp_path, [first, GARBAGE[1], second[:-1]]), len(first), 2) is None
    assert next_intact_batch(_log(tmp_path, [first, GARBAGE[1], _damaged(second)]), len(first), 2) is None
    assert next_intact_batch(_log(tmp_path, [first]), len(first), 2) is None


def test_ignores_a_batch_whose_base_offset_is_not_above_after(tmp_path: Path) -> None:
    first, second, third = _batch(0), _batch(3), _batch(10)
    garbage = GARBAGE[1]
    path = _log(tmp_path, [first, garbage, second, garbage, third])
    at_second = len(first) + len(garbage)
    at_third = at_second + len(second) + len(garbage)
    assert next_intact_batch(path, len(first), 2) == at_second
    assert next_intact_batch(path, len(first), 3) == at_third  # base offset 3 is not above 3
    assert next_intact_batch(path, len(first), 9) == at_third
    assert next_intact_batch(path, len(first), 10) is None
    # A copy of an earlier batch (base offset 0) in the garbage is passed over.
    path = _log(tmp_path, [first, b"\x00" * 11, first, garbage, second])
    assert next_intact_batch(path, len(first), 2) == 2 * len(first) + 11 + len(garbage)


def test_passes_over_a_crc_valid_batch_with_offsets_kafka_rejects(tmp_path: Path) -> None:
    first, second = _batch(0), _batch(5)
    # Whole and CRC-valid, but a negative last offset delta (LogValidator: "invalid offset range").
    bad_range = build_v2_batch([RecordSpec(3, 1_700_000_000_000, b"k", b"v")], last_offset_delta=-1)
    path = _log(tmp_path, [first, b"\x00" * 5, bad_range, second])
    assert next_intact_batch(path, len(first), 2) == len(first) + 5 + len(bad_range)
