"""What a message format conversion converts to (:class:`ConvertOptions`), what it counts
(:class:`ConvertStats`, its losses among them) and the error ``--strict`` raises at the first loss."""

from __future__ import annotations

import os
from collections import Counter
from typing import Optional

from kstore_cli.codecs import CODEC_NAMES, GZIP, LZ4, ZSTD
from kstore_cli.errors import ExitStatus, KstoreError, UsageError

DEFAULT_BATCH_BYTES = 16 * 1024

#: Loss counters, with what each one counts.
LOSS_DESCRIPTIONS = {
    "control_batches": "control batches dropped (transaction markers and other control records)",
    "abort_markers": "ABORT markers among them (aborted data becomes ordinary messages)",
    "empty_batches": "empty batches dropped (legacy formats cannot hold them)",
    "headers": "records whose headers were dropped",
    "producer_fields": "batches whose producer id/epoch/sequence were dropped",
    "transactional": "batches whose transactional flag was dropped",
    "leader_epochs": "batches whose partition leader epoch was dropped",
    "delete_horizons": "batches whose delete horizon was dropped",
    "timestamps": "records whose timestamp was dropped (magic 0 has none)",
    "timestamp_types": "batches whose timestamp type was dropped (magic 0 has none)",
    "offset_ranges": "batches whose offset range was wider than their records (compacted v2 batches)",
    "producer_snapshots": "producer-state snapshots emptied (legacy data has no producer state)",
}

_CODEC_LEVELS = {GZIP: (1, 9, (-1,)), LZ4: (1, 17, ()), ZSTD: (-131072, 22, ())}


def default_jobs() -> int:
    """Codec threads by default (the converting thread included): one per core this process may run on, at
    most 2 (past that the Python half of the work is the bound)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(2, cores))


class LossyConversionError(KstoreError):
    """``--strict`` and the conversion would drop information."""

    exit_status = ExitStatus.PROBLEMS


class ConvertOptions:
    """What to convert to. `codec` None keeps each batch's codec."""

    __slots__ = ("to_magic", "codec", "level", "batch_bytes", "strict", "segment_bytes", "index_interval_bytes",
                 "jobs")

    def __init__(self, to_magic: int, codec: Optional[int] = None, level: Optional[int] = None,
                 batch_bytes: Optional[int] = None, strict: bool = False, segment_bytes: Optional[int] = None,
                 index_interval_bytes: int = 4096, jobs: Optional[int] = None) -> None:
        if to_magic not in (0, 1, 2):
            raise UsageError(f"the target magic must be 0, 1 or 2, not {to_magic}")
        if codec is not None and codec not in CODEC_NAMES:
            raise UsageError(f"unknown codec id {codec}")
        if codec == ZSTD and to_magic < 2:
            raise UsageError("zstd needs message format v2 (magic 2); v0/v1 cannot hold it")
        if level is not None:
            if codec is None:
                raise UsageError("--compression-level needs --compression")
            if codec not in _CODEC_LEVELS:
                raise UsageError(f"{CODEC_NAMES[codec]} has no compression level")
            lo, hi, extra = _CODEC_LEVELS[codec]
            if not (lo <= level <= hi or level in extra):
                raise UsageError(f"{CODEC_NAMES[codec]} compression level must be in {lo}..{hi}, not {level}")
        if batch_bytes is not None and batch_bytes < 1:
            raise UsageError(f"batch bytes must be positive, not {batch_bytes}")
        if segment_bytes is not None and segment_bytes < 1:
            raise UsageError(f"segment bytes must be positive, not {segment_bytes}")
        if jobs is not None and jobs < 1:
            raise UsageError(f"jobs must be positive, not {jobs}")
        self.to_magic = to_magic
        self.codec = codec
        self.level = level
        self.batch_bytes = batch_bytes
        self.strict = strict
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        #: Threads doing codec work, the converting one included: 1 converts in this thread alone; more
        #: runs the codec work of neighbouring batches on a pool of jobs - 1 threads (zlib, zstandard and
        #: lz4 release the GIL).
        self.jobs = default_jobs() if jobs is None else jobs

    @property
    def regroup(self) -> bool:
        return self.batch_bytes is not None

    @property
    def group_bytes(self) -> int:
        return DEFAULT_BATCH_BYTES if self.batch_bytes is None else self.batch_bytes


class ConvertStats:
    """Counts of one conversion (addable across partitions)."""

    _FIELDS = ("segments_in", "segments_out", "batches_in", "batches_out", "records_in", "records_out",
               "bytes_in", "bytes_out", "unchanged_batches")

    def __init__(self) -> None:
        for f in self._FIELDS:
            setattr(self, f, 0)
        self.losses: Counter = Counter()

    def add(self, other: "ConvertStats") -> None:
        for f in self._FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.losses.update(other.losses)

    @property
    def ratio(self) -> Optional[float]:
        """bytes out / bytes in."""
        return None if not self.bytes_in else self.bytes_out / self.bytes_in

    @property
    def lossy(self) -> bool:
        return any(self.losses.values())

    def to_dict(self) -> dict:
        out = {
            "segments_in": self.segments_in, "segments_out": self.segments_out,
            "batches_in": self.batches_in, "batches_out": self.batches_out,
            "records_in": self.records_in, "records_out": self.records_out,
            "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "unchanged_batches": self.unchanged_batches,
            "losses": {k: v for k, v in sorted(self.losses.items()) if v},
        }
        return out
