"""A realistic data dir for the crash matrix and the safety tests (tests/test_crash_matrix.py,
tests/test_safety.py): several segments with indexes as Kafka's recovery writes them, idempotent
and transactional producers (an aborted transaction, so a .txnindex, and a committed one), mixed
codecs, leader epochs, producer snapshots with real entries, partition.metadata, and the data dir's
offset checkpoints (recovery point, high watermark, log start offset, cleaner offset).

Also the generic checks those tests share: the records of a partition, the state of a tree, and
"would Kafka's log loader accept this directory" (:func:`loader_view`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from kstore_cli.codecs import CODEC_IDS
from kstore_cli.errors import KstoreError
from kstore_cli.log import swap
from kstore_cli.record.builder import RecordSpec, build_control_batch, build_legacy_batch, build_v2_batch
from kstore_cli.log.checkpoint import (
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
)
from kstore_cli.log.logdir import Partition
from kstore_cli.log.names import filename_prefix
from kstore_cli.record.reader import read_batches
from kstore_cli.operations.recovery import apply_plan, plan_partition
from kstore_cli.log.snapshot import ProducerEntry, build_snapshot

T0 = 1_700_000_000_000
DAY = 24 * 3_600_000
GZIP, SNAPPY, LZ4, ZSTD = (CODEC_IDS[c] for c in ("gzip", "snappy", "lz4", "zstd"))
OFFSET_CHECKPOINTS = ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                      "log-start-offset-checkpoint", "cleaner-offset-checkpoint")
LEFTOVER_SUFFIXES = (".cleaned", ".swap", ".deleted", ".kstore-tmp")
TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"
#: index.interval.bytes of the generated partitions (small, so the indexes have entries); commands
#: that write indexes get --index-interval-bytes INTERVAL.
INTERVAL = 256  # 16 bytes, URL-safe base64 without padding

Record = Tuple[int, int, Optional[bytes], Optional[bytes]]


#: When set, keys repeat (k0..k{KEYS-1}) and every 11th record is a tombstone: data for compaction.
_KEYS: List[Optional[int]] = [None]


def _recs(first: int, n: int, ts: int, size: int = 60) -> List[RecordSpec]:
    keys = _KEYS[0]
    out = []
    for i in range(n):
        o = first + i
        key = b"k%d" % (o if keys is None else o % keys)
        value = None if keys is not None and o % 11 == 5 else bytes([97 + o % 26]) * size
        out.append(RecordSpec(o, ts + i, key, value, [("trace", b"%d" % i)] if i % 3 == 0 else []))
    return out


class _Producers:
    """Producer state as the batches are laid down, for snapshots with real entries."""

    def __init__(self) -> None:
        self.entries: Dict[int, ProducerEntry] = {}

    def data(self, pid: int, epoch: int, first_seq: int, first: int, n: int, ts: int, txn: bool) -> None:
        old = self.entries.get(pid)
        open_txn = old.current_txn_first_offset if old is not None and old.current_txn_first_offset >= 0 else (
            first if txn else -1)
        self.entries[pid] = ProducerEntry(pid, epoch, first_seq + n - 1, first + n - 1, n - 1, ts + n - 1,
                                          old.coordinator_epoch if old else -1, open_txn)

    def marker(self, pid: int, coordinator_epoch: int) -> None:
        e = self.entries[pid]
        self.entries[pid] = ProducerEntry(pid, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                                          e.timestamp, coordinator_epoch, -1)

    def snapshot(self) -> bytes:
        return build_snapshot(sorted(self.entries.values(), key=lambda e: e.producer_id))


def _v2_segments(base_ts: int, per_segment_days: int) -> Tuple[List[Tuple[int, bytes]], Dict[int, bytes], int,
                                                                List[Tuple[int, int]]]:
    """Four v2 segments: (base, bytes), snapshots {offset: bytes}, log end, leader epochs."""
    prod = _Producers()
    segments: List[Tuple[int, bytes]] = []
    snapshots: Dict[int, bytes] = {}
    offset = 0
    epochs: List[Tuple[int, int]] = []
    for s in range(4):
        ts = base_ts + s * per_segment_days * DAY
        epoch = (0, 1, 1, 2)[s]
        if not epochs or epochs[-1][0] < epoch:
            epochs.append((epoch, offset))
        if s:
            snapshots[offset] = prod.snapshot()
        base = offset
        data = bytearray()

        def add(batch: bytes, n: int) -> None:
            nonlocal offset
            data.extend(batch)
            offset += n

        add(build_v2_batch(_recs(offset, 5, ts), partition_leader_epoch=epoch, codec=(0, GZIP, ZSTD, LZ4)[s]), 5)
        seq = s * 4
        prod.data(7, 1, seq, offset, 4, ts + 10, False)
        add(build_v2_batch(_recs(offset, 4, ts + 10), codec=SNAPPY, producer_id=7, producer_epoch=1,
                           base_sequence=seq, partition_leader_epoch=epoch), 4)
        if s in (1, 2):  # transactions: aborted in segment 1, committed in segment 2
            pid = 9 if s == 1 else 11
            prod.data(pid, 0, 0, offset, 3, ts + 20, True)
            add(build_v2_batch(_recs(offset, 3, ts + 20), producer_id=pid, producer_epoch=0, base_sequence=0,
                               is_transactional=True, partition_leader_epoch=epoch), 3)
            add(build_v2_batch(_recs(offset, 2, ts + 25), codec=GZIP, partition_leader_epoch=epoch), 2)
            prod.marker(pid, 5)
            add(build_control_batch(offset, ts + 30, commit=(s == 2), coordinator_epoch=5, producer_id=pid,
                                    producer_epoch=0, partition_leader_epoch=epoch), 1)
        add(build_v2_batch(_recs(offset, 6, ts + 40, size=120), codec=ZSTD, partition_leader_epoch=epoch), 6)
        segments.append((base, bytes(data)))
    snapshots[offset] = prod.snapshot()
    return segments, snapshots, offset, epochs


def _legacy_segments(base_ts: int, per_segment_days: int, magic: int, codec: int) -> Tuple[
        List[Tuple[int, bytes]], Dict[int, bytes], int, List[Tuple[int, int]]]:
    segments: List[Tuple[int, bytes]] = []
    snapshots: Dict[int, bytes] = {}
    offset = 0
    for s in range(4):
        ts = base_ts + s * per_segment_days * DAY
        if s:
            snapshots[offset] = build_snapshot([])
        base = offset
        data = bytearray()
        for b, n in enumerate((4, 1, 5, 3)):
            recs = [RecordSpec(offset + i, ts + b * 10 + i, b"k%d" % (offset + i), b"v%d-" % (offset + i) * 15)
                    for i in range(n)]
            data += build_legacy_batch(recs, magic=magic, codec=codec if b != 1 else 0)
            offset += n
        segments.append((base, bytes(data)))
    snapshots[offset] = build_snapshot([])
    return segments, snapshots, offset, []


def make_data_dir(data_dir: Path, *, magic: int = 2, codec: int = GZIP, topic: str = "orders",
                  base_ts: int = T0, per_segment_days: int = 3, second_partition: bool = True,
                  keys: Optional[int] = None) -> Path:
    """Write `<data_dir>/<topic>-0` (four segments; v2 with producers and transactions, or legacy
    `magic`/`codec` entries), optionally a small `clicks-0` (two v2 segments, old timestamps), and the
    data dir's checkpoints. With `keys`, v2 keys repeat (`keys` distinct ones) and every 11th record
    is a tombstone, for compaction. Returns the main partition's path."""
    data_dir.mkdir(parents=True, exist_ok=True)
    _KEYS[0] = keys
    try:
        return _make_data_dir(data_dir, magic, codec, topic, base_ts, per_segment_days, second_partition)
    finally:
        _KEYS[0] = None


def _make_data_dir(data_dir: Path, magic: int, codec: int, topic: str, base_ts: int, per_segment_days: int,
                   second_partition: bool) -> Path:
    parts: List[Tuple[str, Path, int, int]] = []  # (topic, path, log end, cleaner offset)
    if magic >= 2:
        segments, snapshots, leo, epochs = _v2_segments(base_ts, per_segment_days)
    else:
        segments, snapshots, leo, epochs = _legacy_segments(base_ts, per_segment_days, magic, codec)
    parts.append((topic, _write_partition(data_dir / f"{topic}-0", segments, snapshots, epochs), leo, segments[1][0]))
    if second_partition:
        prod = _Producers()
        small: List[Tuple[int, bytes]] = []
        offset = 0
        snaps: Dict[int, bytes] = {}
        for s in range(2):
            if s:
                snaps[offset] = prod.snapshot()
            ts = base_ts - 40 * DAY + s * DAY
            prod.data(21, 0, s * 3, offset, 3, ts, False)
            small.append((offset, build_v2_batch(_recs(offset, 3, ts), producer_id=21, producer_epoch=0,
                                                 base_sequence=s * 3, partition_leader_epoch=3)))
            offset += 3
        snaps[offset] = prod.snapshot()
        parts.append(("clicks", _write_partition(data_dir / "clicks-0", small, snaps, [(3, 0)]), offset, 0))
    for name in OFFSET_CHECKPOINTS:
        entries = {}
        for t, _path, end, cleaner in parts:
            entries[(t, 0)] = {"log-start-offset-checkpoint": 0, "cleaner-offset-checkpoint": cleaner}.get(name, end)
        (data_dir / name).write_text(format_offset_checkpoint(entries))
    (data_dir / "meta.properties").write_text("version=1\nbroker.id=1\ncluster.id=kstore-safety\n")
    return parts[0][1]


def _write_partition(path: Path, segments: Sequence[Tuple[int, bytes]], snapshots: Dict[int, bytes],
                     epochs: List[Tuple[int, int]]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for base, data in segments:
        (path / (filename_prefix(base) + ".log")).write_bytes(data)
    for offset, data in snapshots.items():
        (path / (filename_prefix(offset) + ".snapshot")).write_bytes(data)
    if epochs:
        (path / "leader-epoch-checkpoint").write_text(format_leader_epoch_checkpoint(epochs))
    (path / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}\n")
    # Indexes (.index, .timeindex, and .txnindex for the aborted transaction) as Kafka's recovery writes them.
    apply_plan(plan_partition(Partition(str(path)), index_interval_bytes=INTERVAL))
    return path


def make_many_segments(data_dir: Path, *, segments: int = 10, keys: int = 9, topic: str = "orders",
                       base_ts: int = T0, per_segment_hours: int = 6) -> Path:
    """Write `<data_dir>/<topic>-0` with `segments` v2 segments of repeated keys (`keys` distinct,
    every 11th record a tombstone), an idempotent producer throughout, an aborted transaction in
    segment 3 and a committed one in segment 6, producer snapshots at every segment base and the log
    end, indexes as Kafka's recovery writes them, and the data dir's checkpoints (cleaner offset at
    segment 1's base). Data for compaction passes with many multi-segment groups."""
    data_dir.mkdir(parents=True, exist_ok=True)
    _KEYS[0] = keys
    try:
        prod = _Producers()
        out: List[Tuple[int, bytes]] = []
        snapshots: Dict[int, bytes] = {}
        offset = 0
        epochs: List[Tuple[int, int]] = []
        for s in range(segments):
            ts = base_ts + s * per_segment_hours * 3_600_000
            epoch = s // 4
            if not epochs or epochs[-1][0] < epoch:
                epochs.append((epoch, offset))
            if s:
                snapshots[offset] = prod.snapshot()
            base = offset
            data = bytearray()

            def add(batch: bytes, n: int) -> None:
                nonlocal offset
                data.extend(batch)
                offset += n

            add(build_v2_batch(_recs(offset, 4, ts), partition_leader_epoch=epoch,
                               codec=(0, GZIP, ZSTD, LZ4)[s % 4]), 4)
            prod.data(7, 1, s * 3, offset, 3, ts + 10, False)
            add(build_v2_batch(_recs(offset, 3, ts + 10), codec=SNAPPY, producer_id=7, producer_epoch=1,
                               base_sequence=s * 3, partition_leader_epoch=epoch), 3)
            if s in (3, 6):
                pid = 9 if s == 3 else 11
                prod.data(pid, 0, 0, offset, 3, ts + 20, True)
                add(build_v2_batch(_recs(offset, 3, ts + 20), producer_id=pid, producer_epoch=0, base_sequence=0,
                                   is_transactional=True, partition_leader_epoch=epoch), 3)
                prod.marker(pid, 5)
                add(build_control_batch(offset, ts + 30, commit=(s == 6), coordinator_epoch=5, producer_id=pid,
                                        producer_epoch=0, partition_leader_epoch=epoch), 1)
            add(build_v2_batch(_recs(offset, 5, ts + 40, size=90), codec=ZSTD, partition_leader_epoch=epoch), 5)
            out.append((base, bytes(data)))
        snapshots[offset] = prod.snapshot()
    finally:
        _KEYS[0] = None
    path = _write_partition(data_dir / f"{topic}-0", out, snapshots, epochs)
    for name in OFFSET_CHECKPOINTS:
        value = {"log-start-offset-checkpoint": 0, "cleaner-offset-checkpoint": out[1][0]}.get(name, offset)
        (data_dir / name).write_text(format_offset_checkpoint({(topic, 0): value}))
    (data_dir / "meta.properties").write_text("version=1\nbroker.id=1\ncluster.id=kstore-safety\n")
    return path


# --------------------------------------------------------------------------- observing a tree


def tree_bytes(root: Path, skip: Sequence[str] = (".lock",)) -> Dict[str, bytes]:
    """{relative path: bytes} of every file under root (the .lock aside)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name in skip:
                continue
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def digest(state: Dict[str, bytes]) -> Dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest()[:16] for k, v in state.items()}


def diff(got: Dict[str, bytes], want: Dict[str, bytes]) -> str:
    """A short description of how two tree states differ ('' when equal)."""
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    parts = []
    for label, names in (("missing", missing), ("extra", extra), ("changed", changed)):
        if names:
            parts.append(f"{label}: {', '.join(names[:8])}")
    return "; ".join(parts)


def records(partition: Path, *, tolerate_damage: bool = False) -> List[Record]:
    """(offset, timestamp, key, value) of every data record of a partition, control records aside."""
    out: List[Record] = []
    for seg in Partition(str(partition)).segments:
        try:
            for batch in read_batches(seg.log):
                if batch.is_control:
                    continue
                out.extend((r.offset, r.timestamp, r.key, r.value) for r in batch.records())
        except KstoreError:
            if not tolerate_damage:
                raise
    return out


def is_contiguous_slice(part: List[Record], whole: List[Record]) -> bool:
    """part is whole[i:j] for some i <= j."""
    if not part:
        return True
    try:
        i = whole.index(part[0])
    except ValueError:
        return False
    return whole[i:i + len(part)] == part


def is_subsequence(part: List[Record], whole: List[Record]) -> bool:
    """part is whole with some records left out (same order)."""
    it = iter(whole)
    return all(any(r == w for w in it) for r in part)


def log_end(partition: Path) -> int:
    """The log end offset: the last segment's next offset (its base when empty)."""
    segs = Partition(str(partition)).segments
    end = segs[-1].base_offset if segs else 0
    for seg in segs:
        for batch in read_batches(seg.log):
            end = batch.last_offset + 1
    return end


def loader_view(data_dir: Path, scratch: Path) -> Path:
    """What a broker's LogLoader makes of a data dir, on a copy: leftovers resolved by its rules
    (:func:`swap.resolve_leftovers`: .cleaned rolled back, a complete .swap set completed). Returns
    the copy; :func:`check_loadable` then checks what Kafka requires of the result."""
    if scratch.exists():
        shutil.rmtree(scratch)
    shutil.copytree(data_dir, scratch)
    for entry in sorted(scratch.iterdir()):
        if entry.is_dir() and "-" in entry.name:
            swap.resolve_leftovers(str(entry))
    return scratch


def check_loadable(view: Path) -> List[str]:
    """Problems Kafka's loader would have with a (resolved) data dir: unreadable segments, offsets
    that overlap or go backwards across segments, offset checkpoints or leader epochs ahead of the
    log end. Empty when the directory loads."""
    problems: List[str] = []
    ends: Dict[Tuple[str, int], int] = {}
    for entry in sorted(view.iterdir()):
        if not (entry.is_dir() and "-" in entry.name):
            continue
        part = Partition(str(entry))
        left = [os.path.basename(f) for f in part.leftovers]
        if left:
            problems.append(f"{entry.name}: leftovers after resolution: {left}")
        prev_end = None
        for seg in part.segments:
            try:
                end = seg.base_offset
                for batch in read_batches(seg.log):
                    if batch.base_offset < seg.base_offset:
                        problems.append(f"{seg.log}: batch {batch.base_offset} below the segment base")
                    end = batch.last_offset + 1
            except KstoreError as exc:
                problems.append(f"{entry.name}: unreadable segment: {exc}")
                continue
            if prev_end is not None and seg.base_offset < prev_end:
                problems.append(f"{entry.name}: segment {seg.base_offset} overlaps the previous one (ends {prev_end})")
            prev_end = end
        if not part.segments:
            problems.append(f"{entry.name}: no segments")
            continue
        leo = prev_end if prev_end is not None else 0
        ends[(part.topic, part.partition)] = leo
        epoch_path = entry / "leader-epoch-checkpoint"
        if epoch_path.exists():
            try:
                for epoch, start in read_leader_epoch_checkpoint(epoch_path):
                    if start > leo:
                        problems.append(f"{entry.name}: leader epoch {epoch} starts at {start}, past the log end {leo}")
            except KstoreError as exc:
                problems.append(f"{entry.name}: {exc}")
    for name in OFFSET_CHECKPOINTS:
        path = view / name
        if not path.exists():
            continue
        try:
            entries = read_offset_checkpoint(str(path))
        except KstoreError as exc:
            problems.append(str(exc))
            continue
        for key, value in entries.items():
            if key in ends and value > ends[key]:
                problems.append(f"{name}: {key[0]}-{key[1]} at {value}, past the log end {ends[key]}")
    return problems


#: `python -c PAUSED_RUN <paused-flag> <go-flag> <kstore args...>`: runs kstore, and at its first file
#: operation creates <paused-flag> and waits until <go-flag> exists (a run caught holding the lock).
PAUSED_RUN = (
    "import os, sys, time\n"
    "from kstore_cli.log import fileops\n"
    "def pause(n, kind, path):\n"
    "    open(sys.argv[1], 'w').close()\n"
    "    while not os.path.exists(sys.argv[2]):\n"
    "        time.sleep(0.01)\n"
    "fileops.arm_crash(1, pause)\n"
    "from kstore_cli.cli import main\n"
    "main(sys.argv[3:])\n"
)


def make_partitions_to_recover(data_dir: Path, copies: int = 4) -> Path:
    """An unclean shutdown `recover --jobs` has work for in every partition: make_data_dir's orders-0
    with a CRC mismatch in the last batch of its second segment (recovery cuts there), copied as
    orders-1..orders-{copies - 1}, beside clicks-0; every recovery point at 0 (every segment is
    recovered), the other checkpoints at each log end (lowered by each cut). Returns the data dir."""
    part = make_data_dir(data_dir)
    seg = Partition(str(part)).segments[1]
    raw = bytearray(Path(seg.log).read_bytes())
    raw[-10] ^= 0xFF
    Path(seg.log).write_bytes(bytes(raw))
    for i in range(1, copies):
        shutil.copytree(part, data_dir / f"orders-{i}")
    for name in OFFSET_CHECKPOINTS:
        path = data_dir / name
        entries = read_offset_checkpoint(str(path))
        for i in range(1, copies):
            entries[("orders", i)] = entries[("orders", 0)]
        if name == "recovery-point-offset-checkpoint":
            entries = {k: 0 for k in entries}
        path.write_text(format_offset_checkpoint(entries))
    return data_dir


# --------------------------------------------------------------------------- processes


def child_pids(pid: int) -> List[int]:
    """The pids of the live processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state, ppid, ...
        if int(fields[1]) == pid and fields[0] not in "ZX":
            out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (its exit done, whoever reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in "ZX"
