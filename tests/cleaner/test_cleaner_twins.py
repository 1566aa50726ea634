"""The two twins of the cleaner's per-record work agree (kstore_cli/record/record_filter.py).

The native twin (``_cleaner_c``: the offset map, and runs of plain data batches mapped and filtered
without a Python object per record) is compared with the pure-Python one, whose runs take no batch,
so that the cleaner's per-batch path (the reference) does them all: same offset map answers, same
output bytes and chunk metadata, same CleanerStats, same transaction state, or the same error, on
random batches (null keys, tombstones, headers with binary keys, LogAppendTime, delete horizons,
codecs, control/transactional/legacy batches in between, producers' last batches, a map that fills
up, an output that outgrows the buffer) and on damaged ones.
"""

from __future__ import annotations

import hashlib
import struct
from array import array
from contextlib import contextmanager
from typing import Iterator, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstore_cli.errors import KstoreError
from kstore_cli.record import _cleaner_py as py
from kstore_cli.cleaner import cleaner, offset_map_builder
from kstore_cli.log import producer_state
from kstore_cli.record import record_filter
from kstore_cli.record.builder import RecordSpec, build_control_batch, build_legacy_batch, build_v2_batch
from kstore_cli.cleaner.clean_segments import SegmentCleaner
from kstore_cli.cleaner.cleaned_transaction_metadata import CleanedTransactionMetadata
from kstore_cli.cleaner.cleaner_stats import CleanerStats
from kstore_cli.log.config import CleanerSettings, ConfigResolver
from kstore_cli.log.index import AbortedTxn
from kstore_cli.record.reader import iterate_source

try:
    from kstore_cli.record import _cleaner_c as native
except ImportError:  # pragma: no cover - only when the extension is not built
    native = None

pytestmark = pytest.mark.twins

needs_native = pytest.mark.skipif(native is None, reason="the native cleaner is not built")

T = 1_700_000_000_000
LONG_MAX = (1 << 63) - 1
KEYS = [None, b"", b"a", b"key-1", b"key-2", b"\xff\xfe binary key", b"k" * 120]


@contextmanager
def backend(impl) -> Iterator[None]:
    """The cleaner with one twin's map and runs."""
    names = ("OffsetMap", "frame_end", "skip_anonymous", "map_batches", "filter_batches")
    saved = {n: getattr(record_filter, n) for n in names}
    saved_map = cleaner.OffsetMap
    try:
        for n in names:
            setattr(record_filter, n, getattr(impl, n))
        cleaner.OffsetMap = impl.OffsetMap
        yield
    finally:
        for n, v in saved.items():
            setattr(record_filter, n, v)
        cleaner.OffsetMap = saved_map


# --------------------------------------------------------------------------- the pieces


@needs_native
def test_the_twins_share_their_constants() -> None:
    for name in ("RUN_DONE", "RUN_PYTHON", "RUN_MAP_FULL", "RUN_OUTPUT_FULL", "MAP_SLOTS", "FILTER_SLOTS"):
        assert getattr(native, name) == getattr(py, name), name


@needs_native
@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_md5_is_md5(data: bytes) -> None:
    assert native.md5(data) == py.md5(data) == hashlib.md5(data).digest()


@needs_native
@given(st.lists(st.tuples(st.sampled_from(["put", "get"]), st.binary(max_size=130), st.integers(-5, 1 << 62)),
                max_size=600),
       st.sampled_from([24 * 3, 24 * 50, 4096 * 24 * 64, 4096 * 24 * 64 + 24 * 9000, 1 << 20]),
       st.sampled_from([0.5, 0.9, 1.0]))
@settings(max_examples=80, deadline=None)
def test_offset_maps_answer_alike(ops, memory: int, load_factor: float) -> None:
    a, b = native.OffsetMap(memory, load_factor), py.OffsetMap(memory, load_factor)
    assert (a.slots, a.max_entries, a.memory, a.allocated_bytes) == (b.slots, b.max_entries, b.memory,
                                                                      b.allocated_bytes)
    for op, key, offset in ops:
        if op == "put" and not a.full:
            a.put(key, offset)
            b.put(key, offset)
        assert a.get(key) == b.get(key)
        assert (a.size, a.full, a.latest_offset, a.utilization) == (b.size, b.full, b.latest_offset, b.utilization)
    a.clear()
    b.clear()
    assert (a.size, a.latest_offset, a.allocated_bytes) == (b.size, b.latest_offset, b.allocated_bytes)


@needs_native
def test_offset_map_refuses_a_buffer_too_small_like_kafka() -> None:
    for impl in (native, py):
        with pytest.raises(ValueError, match="too small"):
            impl.OffsetMap(24)


@needs_native
@given(st.binary(max_size=400), st.integers(0, 400), st.integers(0, 400))
@settings(max_examples=300, deadline=None)
def test_frame_end_twins(data: bytes, pos: int, end: int) -> None:
    pos, end = min(pos, len(data)), min(end, len(data))
    assert native.frame_end(data, pos, end) == py.frame_end(data, pos, end)


# --------------------------------------------------------------------------- whole chunks


headers_st = st.lists(st.tuples(st.sampled_from([b"h", b"", b"\xc3\x28", b"trace-id"]),
                                st.one_of(st.none(), st.binary(max_size=8))), max_size=2)
record_st = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=40)), headers_st,
                      st.integers(-3, 50))


@st.composite
def batch_specs(draw) -> dict:
    kind = draw(st.sampled_from(["data"] * 6 + ["zstd", "gzip", "txn", "txn", "txn-zstd", "control", "abort",
                                                 "legacy", "horizon", "horizon"]))
    return {"kind": kind, "records": draw(st.lists(record_st, min_size=1, max_size=6)),
            "gap": draw(st.integers(0, 2)), "log_append": draw(st.booleans()) and kind in ("data", "zstd"),
            "pid": draw(st.sampled_from([-1, -1, 7, 8])), "horizon": draw(st.integers(-2, 2)),
            "txn_pid": draw(st.sampled_from([9, 10]))}


def build_log(specs: List[dict], aborted: "List[AbortedTxn] | None" = None) -> "tuple[bytes, List[int]]":
    """The batches' bytes and each batch's last offset; `aborted` gets the .txnindex entries the ABORT
    markers make (two transactional producers, 9 and 10, commit or abort in turn)."""
    out = bytearray()
    lasts = []
    offset = 0
    open_first = {}
    for spec in specs:
        offset += spec["gap"]
        recs = []
        for key, value, headers, ts in spec["records"]:
            recs.append(RecordSpec(offset, T + ts, key, value, headers))
            offset += 1
        kind = spec["kind"]
        pid = spec["txn_pid"] if kind.startswith("txn") else spec["pid"]
        if kind in ("control", "abort"):
            pid = spec["txn_pid"]
            if spec["horizon"] > 0:  # a marker a previous pass kept and gave a delete horizon (T-2 .. T+2)
                out += build_v2_batch(
                    [RecordSpec(recs[0].offset, T, struct.pack(">hh", 0, kind == "control"), struct.pack(">hi", 0, 1))],
                    producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True,
                    delete_horizon_ms=T + spec["horizon"] - 1)
            else:
                out += build_control_batch(recs[0].offset, T, commit=kind == "control", coordinator_epoch=1,
                                           producer_id=pid, producer_epoch=0)
            first = open_first.pop(pid, None)
            if kind == "abort" and first is not None and aborted is not None:
                aborted.append(AbortedTxn(0, pid, first, recs[0].offset, first))
            offset = recs[0].offset + 1
        elif kind == "legacy":
            out += build_legacy_batch([RecordSpec(r.offset, r.timestamp, r.key, r.value) for r in recs], magic=1)
        else:
            if kind.startswith("txn"):
                open_first.setdefault(pid, recs[0].offset)
            out += build_v2_batch(
                recs, codec={"zstd": 4, "gzip": 1, "txn-zstd": 4}.get(kind, 0), timestamp_type=1 if spec["log_append"] else 0,
                log_append_time=T + 99 if spec["log_append"] else None, producer_id=pid,
                producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                is_transactional=kind.startswith("txn"),
                delete_horizon_ms=T + spec["horizon"] if kind == "horizon" else None)
        lasts.append(offset - 1)
    return bytes(out), lasts


def clean(impl, data: bytes, *, memory: int, capacity: int, now: int, last_records: dict, upper_bound: int,
          io_buffer: int, aborted: "List[AbortedTxn] | None" = None) -> tuple:
    """Map then filter `data` as one segment with one twin; everything observable, or the error."""
    config = ConfigResolver(flags={"delete.retention.ms": (1000, "test")}).for_topic("t")
    stats = CleanerStats()
    with backend(impl):
        try:
            offset_map = impl.OffsetMap(memory)
            buf = memoryview(data)
            map_txns = CleanedTransactionMetadata()
            map_txns.add_aborted_transactions(list(aborted or []))
            stops = []
            settings = CleanerSettings(io_buffer_bytes=io_buffer)
            for position, stop, _cap in _walk(buf, settings):
                full = offset_map_builder.map_chunk(buf, position, stop, None, offset_map, 0, LONG_MAX, map_txns, stats)
                stops.append(full)
                if full is not None:
                    break
            txns = CleanedTransactionMetadata()
            txns.add_aborted_transactions(list(aborted or []))
            cleaned_index = []
            txns.cleaned_index = lambda txn: cleaned_index.append(
                (txn.producer_id, txn.first_offset, txn.last_offset))
            sc = SegmentCleaner(offset_map, config, now, txns, last_records, upper_bound, stats, settings)
            chunks = []
            position = 0
            end = impl.frame_end(buf, 0, len(buf))[0]
            while position < end:
                r = sc.filter_to(buf, position, end, None, True, capacity)
                chunks.append((bytes(r.out), r.first_offset, r.max_offset, r.max_timestamp,
                               r.offset_of_max_timestamp, r.bytes_read))
                if not r.bytes_read:
                    break
                position += r.bytes_read
            keys = [offset_map.get(k) for k in KEYS if k is not None]
            return ("ok", stops, chunks, stats.to_dict(), keys, offset_map.size, offset_map.latest_offset,
                    map_txns.to_json(), txns.to_json(), cleaned_index)
        except KstoreError as exc:
            return ("error", type(exc).__name__, str(exc))


def _walk(buf: memoryview, settings: CleanerSettings):
    chunks = offset_map_builder.read_chunks(buf, 0, settings, 1 << 20, None)
    try:
        position, stop, cap = next(chunks)
        while True:
            yield position, stop, cap
            position, stop, cap = chunks.send(stop - position)
    except StopIteration:
        return


@needs_native
@given(st.lists(batch_specs(), min_size=1, max_size=12), st.sampled_from([24 * 4, 24 * 30, 1 << 20]),
       st.sampled_from([64, 300, 1 << 20]), st.one_of(st.sampled_from([-1, 0, 1]), st.integers(-10, 2000)), st.data())
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_cleaning_twins_agree(specs, memory: int, capacity: int, now_delta: int, data) -> None:
    aborted = []
    log, lasts = build_log(specs, aborted)
    last_records = {7: (data.draw(st.sampled_from(lasts + [None])), 0), 8: (data.draw(st.sampled_from(lasts)), 0)}
    if data.draw(st.booleans()):  # a transactional producer whose last entry is a marker (or a batch)
        last_records[data.draw(st.sampled_from([9, 10]))] = (data.draw(st.sampled_from(lasts + [None, None])), 0)
    upper_bound = data.draw(st.sampled_from(lasts)) + 1
    io_buffer = data.draw(st.sampled_from([100, 700, 1 << 16]))
    args = dict(memory=memory, capacity=capacity, now=T + now_delta, last_records=last_records,
                upper_bound=upper_bound, io_buffer=io_buffer, aborted=aborted)
    assert clean(native, log, **args) == clean(py, log, **args)


@needs_native
@given(st.lists(batch_specs(), min_size=1, max_size=6), st.data())
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_cleaning_twins_agree_on_damaged_batches(specs, data) -> None:
    log = bytearray(build_log(specs)[0])
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(log) - 1))
        log[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(log)))
    args = dict(memory=1 << 20, capacity=1 << 20, now=T, last_records={}, upper_bound=1 << 40, io_buffer=1 << 16)
    assert clean(native, bytes(log[:cut]), **args) == clean(py, bytes(log[:cut]), **args)


@needs_native
def test_native_runs_take_plain_batches_and_leave_the_rest() -> None:
    # The native twin really does the work: a run over plain batches stops only at the control batch.
    plain = build_v2_batch([RecordSpec(0, T, b"k", b"v"), RecordSpec(1, T, b"k", b"w")])
    marker = build_control_batch(2, T, commit=True, coordinator_epoch=0, producer_id=1, producer_epoch=0)
    log = plain + plain.replace(b"", b"", 0) + marker
    m = native.OffsetMap(1 << 20)
    state = record_filter.map_state()
    pos, status = native.map_batches(m, log, 0, len(log), 0, LONG_MAX, state, record_filter.decompress)
    assert (pos, status) == (2 * len(plain), py.RUN_PYTHON)
    assert state[py.M_MESSAGES_READ] == 4 and m.get(b"k") == 1 and m.latest_offset == 1
    out = bytearray()
    fstate = record_filter.filter_state()
    pos, status = native.filter_batches(m, log, 0, len(plain), 1 << 20, out, fstate, T, T + 1, b"",
                                        record_filter.decompress, record_filter.compress)
    assert (pos, status) == (len(plain), py.RUN_DONE)
    assert fstate[py.F_MESSAGES_READ] == 2 and fstate[py.F_MESSAGES_WRITTEN] == 1 and fstate[py.F_BATCHES_REBUILT] == 1
    assert py.map_batches(m, log, 0, len(log), 0, LONG_MAX, state, None) == (0, py.RUN_PYTHON)
    specials = array("q", [1]).tobytes()  # the batch ending at offset 1 is a producer's last: Python's
    assert native.filter_batches(m, log, 0, len(plain), 1 << 20, bytearray(), record_filter.filter_state(), T, None,
                                 specials, None, None) == (0, py.RUN_PYTHON)



@needs_native
@pytest.mark.parametrize("bad", [dict(base_offset=2, last_offset_delta=-1), dict(base_offset=-7, last_offset_delta=1)],
                         ids=["negative-delta", "negative-base"])
def test_native_runs_leave_a_batch_whose_offsets_kafka_rejects(bad: dict) -> None:
    # Batch.offsets_problem: the per-batch Python path refuses such a batch (ensure_valid_offsets), as the
    # pure-Python twin, which takes no batch, leaves every one to it.
    plain = build_v2_batch([RecordSpec(0, T, b"k", b"v"), RecordSpec(1, T, b"k", b"w")])
    log = plain + build_v2_batch([RecordSpec(bad["base_offset"], T, b"x", b"y")], **bad)
    state = record_filter.map_state()
    pos, status = native.map_batches(native.OffsetMap(1 << 20), log, 0, len(log), 0, LONG_MAX, state,
                                     record_filter.decompress)
    assert (pos, status) == (len(plain), py.RUN_PYTHON)
    m = native.OffsetMap(1 << 20)
    m.put(b"x", 0)
    pos, status = native.filter_batches(m, log, len(plain), len(log), 1 << 20, bytearray(),
                                        record_filter.filter_state(), T, T + 1, b"", record_filter.decompress,
                                        record_filter.compress)
    assert (pos, status) == (len(plain), py.RUN_PYTHON)

@needs_native
def test_a_zstd_batch_of_two_frames_is_read_across_them() -> None:
    # The one-call zstd path takes a single frame only; two frames go the codec's general way.
    zstandard = pytest.importorskip("zstandard")
    from kstore_cli.record.builder import encode_v2_record

    records = [encode_v2_record(i, 0, b"k%d" % (i % 2), b"v%d" % i) for i in range(4)]
    c = zstandard.ZstdCompressor()
    body = c.compress(b"".join(records[:2])) + c.compress(b"".join(records[2:]))
    head = bytearray(build_v2_batch([RecordSpec(i, T, b"k", b"v") for i in range(4)])[:61])
    head[21:23] = (4).to_bytes(2, "big")  # zstd
    head[8:12] = (49 + len(body)).to_bytes(4, "big")
    from kstore_cli.record.crc import crc32c

    log = bytearray(head + body)
    log[17:21] = crc32c(bytes(log[21:])).to_bytes(4, "big")  # a valid batch: the cleaner refuses a CRC that fails
    log = bytes(log)
    args = dict(memory=1 << 20, capacity=1 << 20, now=T, last_records={}, upper_bound=1 << 40, io_buffer=1 << 16)
    got = clean(native, log, **args)
    assert got == clean(py, log, **args)
    assert got[0] == "ok" and got[3]["messages_written"] == 2 and got[3]["batches_rebuilt"] == 1


@needs_native
@given(st.lists(batch_specs(), min_size=1, max_size=12), st.integers(0, 3))
@settings(max_examples=100, deadline=None)
def test_producer_state_replay_sees_the_same_batches(specs, cut) -> None:
    # ProducerStateManager.load replays the batches with a producer id; the native twin skips the others in bulk.
    import os
    import tempfile

    from kstore_cli.record.reader import read_batches

    log = build_log(specs)[0]
    log = log[: len(log) - cut]
    fd, path = tempfile.mkstemp(suffix=".log")
    try:
        os.write(fd, log)
        os.close(fd)
        expected = [b.position for b in read_batches(path) if b.magic >= 2 and b.producer_id >= 0]
        for impl in (native, py):
            with backend(impl):
                got = [b.position for b in producer_state.producer_batches(path) if b.magic >= 2 and b.producer_id >= 0]
            assert got == expected
    finally:
        os.unlink(path)


@needs_native
def test_native_runs_take_committed_transactions_and_leave_aborted_ones() -> None:
    """With the transaction view, a transactional data batch no aborted transaction reaches is the run's (its
    producer joins the committed set); one an aborted transaction starts in, or whose producer has an ongoing
    aborted one, is CleanedTransactionMetadata.onBatchRead's (Python); without the view none is taken."""
    txn = build_v2_batch([RecordSpec(0, T, b"k", b"v"), RecordSpec(1, T, b"k", b"w")], producer_id=9,
                         producer_epoch=0, base_sequence=0, is_transactional=True)
    m = native.OffsetMap(1 << 20)
    state = record_filter.map_state()
    assert native.map_batches(m, txn, 0, len(txn), 0, LONG_MAX, state, None) == (0, py.RUN_PYTHON)
    committed: set = set()
    view = (committed, {}, LONG_MAX)
    assert native.map_batches(m, txn, 0, len(txn), 0, LONG_MAX, state, None, view) == (len(txn), py.RUN_DONE)
    assert committed == {9} and m.get(b"k") == 1
    for blocked in ((set(), {}, 1), (set(), {9: [None, None]}, LONG_MAX)):
        assert native.map_batches(m, txn, 0, len(txn), 0, LONG_MAX, state, None, blocked) == (0, py.RUN_PYTHON)
        assert not blocked[0]
    out = bytearray()
    fstate = record_filter.filter_state()
    pos, status = native.filter_batches(m, txn, 0, len(txn), 1 << 20, out, fstate, T, T + 1, b"",
                                        record_filter.decompress, record_filter.compress, (set(), {}, LONG_MAX))
    assert (pos, status) == (len(txn), py.RUN_DONE) and fstate[py.F_BATCHES_REBUILT] == 1
    rebuilt = next(iterate_source(memoryview(bytes(out)), 0, len(out), None, check_crc=True))
    assert rebuilt.is_transactional and rebuilt.producer_id == 9 and [r.value for r in rebuilt.records()] == [b"w"]


@needs_native
@pytest.mark.parametrize("last_records, empty, removed", [({9: (None, 0)}, 1, 0), ({}, 0, 1), ({9: (None, 1)}, 0, 1)])
def test_an_expired_commit_marker_goes_unless_it_is_its_producers_last(last_records, empty, removed) -> None:
    """A COMMIT marker past its delete horizon whose transaction left no batch is removed, natively as in
    Python; when it is its producer's last entry (isBatchLastRecordOfProducer: the producer's last entry is
    a marker of the same epoch) it stays as an empty batch."""
    def spec(kind, horizon):
        return {"kind": kind, "records": [(b"a", b"1", [], 0)], "gap": 0, "log_append": False, "pid": -1,
                "horizon": horizon, "txn_pid": 9}

    log, lasts = build_log([spec("data", 0), spec("control", 1), spec("data", 0)])
    args = dict(memory=1 << 20, capacity=1 << 20, now=T + 5, last_records=last_records, upper_bound=lasts[-1] + 1,
                io_buffer=1 << 16)
    got = clean(native, log, **args)
    assert got == clean(py, log, **args)
    assert (got[3]["empty_batches_written"], got[3]["markers_removed"]) == (empty, removed)
