"""Generated multi-segment partitions for retention tests: batches from builder.py, indexes as
Kafka's recovery writes them, producer snapshots at segment bases and at the log end,
a leader-epoch checkpoint and the data dir's offset checkpoints."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from kstore_cli.record.builder import RecordSpec, build_legacy_batch, build_v2_batch
from kstore_cli.log.checkpoint import format_leader_epoch_checkpoint, format_offset_checkpoint
from kstore_cli.log.names import filename_prefix
from kstore_cli.record.reader import read_batches
from kstore_cli.operations.recovery import recover_segment
from kstore_cli.log.snapshot import build_snapshot

T0 = 1_700_000_000_000
HOUR = 3_600_000
DAY = 24 * HOUR


class SegSpec:
    """One segment: `batches` batches of `per_batch` records, the batch max timestamps running
    from `ts` to `ts + (batches - 1) * step`; magic 0 data has no timestamps."""

    def __init__(self, batches: int = 3, per_batch: int = 4, ts: int = T0, step: int = 1000, magic: int = 2,
                 value_size: int = 40, epoch: int = 0, mtime: Optional[int] = None) -> None:
        self.batches = batches
        self.per_batch = per_batch
        self.ts = ts
        self.step = step
        self.magic = magic
        self.value_size = value_size
        self.epoch = epoch
        self.mtime = mtime


class Generated:
    def __init__(self, path: Path, bases: List[int], leo: int, sizes: List[int]) -> None:
        self.path = path
        self.data_dir = path.parent
        self.bases = bases
        self.leo = leo
        self.sizes = sizes

    def log(self, base: int) -> Path:
        return self.path / (filename_prefix(base) + ".log")


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def make_partition(data_dir: Path, specs: Sequence[SegSpec], *, topic: str = "orders", partition: int = 0,
                   high_watermark: Optional[int] = None, write_hw: bool = True,
                   log_start_offset: Optional[int] = None, epochs: bool = True,
                   start_offset: int = 0) -> Generated:
    """Write a partition directory under data_dir; returns its layout. high_watermark defaults to
    the log end offset; write_hw=False leaves no replication-offset-checkpoint."""
    path = data_dir / f"{topic}-{partition}"
    path.mkdir(parents=True, exist_ok=True)
    offset = start_offset
    bases: List[int] = []
    sizes: List[int] = []
    epoch_entries: List[Tuple[int, int]] = []
    for spec in specs:
        base = offset
        bases.append(base)
        data = bytearray()
        for b in range(spec.batches):
            ts = spec.ts + b * spec.step
            records = [RecordSpec(offset + i, ts - (spec.per_batch - 1 - i), f"k{offset + i}".encode(),
                                  bytes([65 + (offset + i) % 26]) * spec.value_size) for i in range(spec.per_batch)]
            if spec.magic >= 2:
                data += build_v2_batch(records, partition_leader_epoch=spec.epoch)
            else:
                data += build_legacy_batch(records, magic=spec.magic)
            offset += spec.per_batch
        if spec.magic >= 2 and spec.batches and (not epoch_entries or epoch_entries[-1][0] < spec.epoch):
            epoch_entries.append((spec.epoch, base))
        prefix = path / filename_prefix(base)
        log = Path(str(prefix) + ".log")
        _write(log, bytes(data))
        result, _ = recover_segment(bytes(data), base)
        _write(Path(str(prefix) + ".index"), result.index_bytes)
        _write(Path(str(prefix) + ".timeindex"), result.timeindex_bytes)
        if base != start_offset:
            _write(path / (filename_prefix(base) + ".snapshot"), build_snapshot([]))
        sizes.append(len(data))
        if spec.mtime is not None:
            os.utime(log, ns=(spec.mtime * 1_000_000, spec.mtime * 1_000_000))
    leo = offset
    if leo not in bases:
        _write(path / (filename_prefix(leo) + ".snapshot"), build_snapshot([]))
    if epochs and epoch_entries:
        _write(path / "leader-epoch-checkpoint", format_leader_epoch_checkpoint(epoch_entries).encode())
    set_checkpoint(data_dir / "recovery-point-offset-checkpoint", topic, partition, leo)
    if write_hw:
        set_checkpoint(data_dir / "replication-offset-checkpoint", topic, partition,
                          leo if high_watermark is None else high_watermark)
    if log_start_offset is not None:
        set_checkpoint(data_dir / "log-start-offset-checkpoint", topic, partition, log_start_offset)
    return Generated(path, bases, leo, sizes)


def set_checkpoint(path: Path, topic: str, partition: int, offset: int) -> None:
    from kstore_cli.log.checkpoint import read_offset_checkpoint

    entries: Dict[Tuple[str, int], int] = read_offset_checkpoint(str(path)) if path.exists() else {}
    entries[(topic, partition)] = offset
    path.write_text(format_offset_checkpoint(entries))


def file_hashes(directory: Path) -> Dict[str, str]:
    """{file name: sha256} of the regular files directly in a directory."""
    out = {}
    for name in sorted(os.listdir(directory)):
        p = directory / name
        if p.is_file():
            out[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def tree_state(root: Path) -> Dict[str, str]:
    """{relative path: sha256} of every file under root except the .lock."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name == ".lock":
                continue
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def records_of(log: Path) -> List[Tuple[int, int, Optional[bytes], Optional[bytes]]]:
    return [(r.offset, r.timestamp, r.key, r.value) for b in read_batches(str(log)) for r in b.records()]
