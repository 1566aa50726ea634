"""read_columns gives exactly what read_batches + records() give, runs of plain batches as columns."""

from __future__ import annotations

from array import array
from typing import List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstore_cli.errors import KstoreError
from kstore_cli.record.columns import RecordColumns, read_columns
from kstore_cli.record.reader import read_batches
from kstore_cli.record.builder import RecordSpec, build_v2_batch

from tests.conftest import FIXTURES
from tests.record.test_decode_twins import DAMAGE, RUN_BATCHES, _damage, _run_segment


def _binary(ends: bytes, data: bytes, valid: bytes) -> List[Optional[bytes]]:
    out, start = [], 0
    for end, ok in zip(array("i", ends), valid):
        out.append(data[start:end] if ok else None)
        start = end
    return out


def _rows(run: RecordColumns) -> list:
    """The run's rows as (offset, timestamp, timestamp type, key, value, headers)."""
    keys = _binary(run.key_ends, run.key_data, run.key_valid)
    values = _binary(run.value_ends, run.value_data, run.value_valid)
    header_keys = _binary(run.header_key_ends, run.header_key_data, b"\x01" * (len(run.header_key_ends) // 4))
    header_values = _binary(run.header_value_ends, run.header_value_data, run.header_value_valid)
    rows, first = [], 0
    ends = array("i", run.header_ends) if run.header_ends else None
    for i, (offset, ts, ts_type) in enumerate(zip(array("q", run.offsets), array("q", run.timestamps),
                                                   array("i", run.timestamp_types))):
        headers = None
        if ends is not None:
            headers = [(k.decode("utf-8"), v) for k, v in zip(header_keys[first : ends[i]], header_values[first : ends[i]])]
            first = ends[i]
        rows.append((offset, ts, ts_type, keys[i], values[i], headers))
    return rows


def _record_rows(batch, with_headers: bool) -> list:
    return [(r.offset, r.timestamp, batch.timestamp_type, r.key, r.value,
             [(h.key, h.value) for h in r.headers] if with_headers else None) for r in batch.records()]


def _outcome(items):
    """Everything an iterator yields, then how it ended (None, or the error class, message and position)."""
    out = []
    try:
        for item in items:
            out.append(item)
    except KstoreError as exc:
        return out, (type(exc).__name__, str(exc), getattr(exc, "position", None))
    return out, None


def check_same(buf: bytes, with_headers: bool = True, **options) -> int:
    """read_columns(buf) against read_batches(buf): same entries, same records, same ending. Returns the
    number of runs seen."""
    batches, batch_end = _outcome(read_batches(buf))
    items, column_end = _outcome(read_columns(buf, with_headers=with_headers, **options))
    assert column_end == batch_end
    runs = 0
    i = 0
    for item in items:
        if isinstance(item, RecordColumns):
            runs += 1
            covered = []
            while i < len(batches) and batches[i].position < item.stop:
                covered.append(batches[i])
                i += 1
            assert covered and covered[0].position == item.position
            assert covered[-1].position + covered[-1].size == item.stop and len(covered) == item.batches
            expected = [row for b in covered for row in _record_rows(b, with_headers)]
            assert not any(b.is_control or b.compression_name != "none" for b in covered)
            assert _rows(item) == expected and item.rows == len(expected)
            if not with_headers:
                assert item.header_ends == item.header_key_data == b""
        else:
            assert (item.position, item.size, type(item)) == (batches[i].position, batches[i].size, type(batches[i]))
            i += 1
    assert i == len(batches)
    return runs


def test_corpus_logs() -> None:
    """Every log of Kafka's corpus and golden data: legacy, codecs, transactions, control batches, damage."""
    logs = sorted(FIXTURES.rglob("*.log"))
    assert len(logs) > 100
    runs = sum(check_same(log.read_bytes()) for log in logs)
    assert runs > 50  # the plain-batch path did most of the work


def test_small_runs_and_checked_crcs() -> None:
    logs = sorted(FIXTURES.rglob("*.log"))[:80]
    for log in logs:
        check_same(log.read_bytes(), with_headers=False, check_crc=True, max_rows=3, max_bytes=200)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(RUN_BATCHES, st.lists(DAMAGE, max_size=2), st.integers(1, 10), st.integers(1, 500), st.booleans(), st.booleans())
def test_generated_segments(batches, damages, max_rows, max_bytes, with_headers, check_crc) -> None:
    buf = _run_segment(batches)
    for kind, where, value in damages:
        buf = _damage(buf, kind, where, value)
    check_same(buf, with_headers=with_headers, check_crc=check_crc, max_rows=max_rows, max_bytes=max_bytes)


def test_offset_bounds_and_transactions_go_to_the_batch_path() -> None:
    buf = b"".join(build_v2_batch([RecordSpec(b * 3 + i, 10, b"k", b"v") for i in range(3)],
                                  is_transactional=b == 2, producer_id=5 if b == 2 else -1,
                                  producer_epoch=0 if b == 2 else -1, base_sequence=0 if b == 2 else -1)
                   for b in range(5))
    kinds = [type(x).__name__ if not isinstance(x, RecordColumns) else ("run", x.rows)
             for x in read_columns(buf, min_offset=4, end_offset=13, stop_transactional=True)]
    # batch 0 (0-2) below min, batch 1 (3-5) straddles it, batch 2 transactional, batch 4 (12-14) straddles the end
    assert kinds == ["RecordBatch", "RecordBatch", "RecordBatch", ("run", 3), "RecordBatch"]
    assert [type(x).__name__ if not isinstance(x, RecordColumns) else "run" for x in read_columns(buf)] == ["run"]


def test_a_header_key_java_would_repair_goes_to_the_batch_path() -> None:
    buf = build_v2_batch([RecordSpec(0, 10, b"k", b"v", [(b"\xff", b"x")])])
    (item,) = read_columns(buf, with_headers=True)
    assert not isinstance(item, RecordColumns)
    assert item.records()[0].headers[0].key == "\ufffd"
    (item,) = read_columns(buf, with_headers=False)
    assert isinstance(item, RecordColumns)


def test_files_are_read_through_a_mapping(tmp_path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(build_v2_batch([RecordSpec(b * 2 + i, 10, None, b"v%d" % i) for i in range(2)])
                              for b in range(4)))
    (run,) = read_columns(path)
    assert run.rows == 8 and list(array("q", run.offsets)) == list(range(8))
    with pytest.raises(KstoreError):
        list(read_columns(tmp_path / "missing.log"))
