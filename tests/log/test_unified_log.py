"""The offsets a loaded UnifiedLog reports, and where each came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstore_cli.errors import CorruptCheckpointError
from kstore_cli.log.logdir import Partition
from kstore_cli.log.unified_log import (
    HW_CHECKPOINT,
    HW_NO_CHECKPOINT,
    HW_NOT_LISTED,
    LSO_CHECKPOINT,
    LSO_FIRST_SEGMENT,
    LSO_UNREADABLE,
    DataDirState,
    log_offsets,
)
from tests.log.partition_factory import SegSpec, make_partition, set_checkpoint


def _offsets(gen, **kw):
    return log_offsets(Partition(str(gen.path)), DataDirState(str(gen.data_dir), **kw))


def test_checkpoints_clamped_as_unified_log_does(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, [SegSpec(), SegSpec()], high_watermark=5, log_start_offset=3)
    got = _offsets(gen)
    assert (got.log_start_offset, got.log_start_offset_source) == (3, LSO_CHECKPOINT)
    assert (got.log_end_offset, got.high_watermark, got.high_watermark_source) == (gen.leo, 5, HW_CHECKPOINT)
    # A checkpointed high watermark past the log end is clamped to it; below the log start, raised to it.
    set_checkpoint(gen.data_dir / "replication-offset-checkpoint", "orders", 0, gen.leo + 100)
    assert _offsets(gen).high_watermark == gen.leo
    set_checkpoint(gen.data_dir / "replication-offset-checkpoint", "orders", 0, 1)
    assert _offsets(gen).high_watermark == 3


def test_missing_entries_and_missing_files(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, [SegSpec()], write_hw=False)
    got = _offsets(gen)
    assert (got.log_start_offset_source, got.high_watermark, got.high_watermark_source) == (
        LSO_FIRST_SEGMENT, gen.leo, HW_NO_CHECKPOINT)
    set_checkpoint(gen.data_dir / "replication-offset-checkpoint", "other", 0, 7)
    got = _offsets(gen)
    assert (got.high_watermark, got.high_watermark_source) == (0, HW_NOT_LISTED)


def test_a_corrupt_checkpoint_raises_unless_tolerant(tmp_path: Path) -> None:
    gen = make_partition(tmp_path, [SegSpec()], log_start_offset=2)
    (gen.data_dir / "log-start-offset-checkpoint").write_text("0\nnot a number\n")
    with pytest.raises(CorruptCheckpointError):
        _offsets(gen)
    got = _offsets(gen, tolerant=True)
    assert (got.log_start_offset, got.log_start_offset_source) == (0, LSO_UNREADABLE)
