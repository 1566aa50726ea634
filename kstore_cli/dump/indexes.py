"""Index checks shared by the text and JSON dumps (DumpLogSegments.dumpIndex and dumpTimeIndex): the batch an
offset-index entry points at, and each time-index entry against the log."""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from kstore_cli.errors import CorruptIndexError, FileUnreadableError
from kstore_cli.log.index import OffsetIndex, TimeIndex
from kstore_cli.log.names import INDEX_SUFFIX, LOG_SUFFIX, base_offset_from_name
from kstore_cli.record.batch import MAX_INT32, Batch
from kstore_cli.record.reader import map_file, read_batches
from kstore_cli.dump.files import file_name, sibling_path

def _slice_end(log: memoryview, position: int, size: int, log_path: str) -> int:
    """FileRecords.slice(position, size): the end of the slice, with Kafka's range checks."""
    if position < 0:
        raise CorruptIndexError(f"Invalid position: {position} in read from {log_path}")
    if position > len(log):
        raise CorruptIndexError(
            f"Slice from position {position} exceeds end position of {log_path} ({len(log)} bytes)"
        )
    end = position + size
    if end > MAX_INT32 or end > len(log):
        end = len(log)
    return end


def first_batch_at(log: memoryview, position: int, max_size: int, log_path: str) -> Batch:
    """The first batch within `max_size` bytes at `position` of a log (DumpLogSegments.dumpIndex)."""
    end = _slice_end(log, position, max_size, log_path)
    for batch in read_batches(log, start=position, end=end, path=log_path):
        return batch
    raise CorruptIndexError(
        f"no complete batch within --max-message-size {max_size} bytes at position {position} "
        f"of {log_path} (Kafka: NoSuchElementException)"
    )


def zero_tail_stop(i: int, offset: int, base: int) -> bool:
    # "since it is a sparse file, in the event of a crash there may be many zero entries, stop if we see one"
    return i > 0 and offset == base


def sibling_offset_index(path: str, base: int) -> OffsetIndex:
    index_path = sibling_path(path, INDEX_SUFFIX)
    try:
        return OffsetIndex(index_path, base)
    except FileUnreadableError as exc:
        exc.message = (
            f"{exc.message} (the offset index beside {file_name(path)} is needed to check it; "
            "Kafka would create an empty one and fail with 'Invalid max index size: -1')"
        )
        raise


def open_time_index(path: str) -> Tuple[str, memoryview, OffsetIndex, TimeIndex]:
    """What a .timeindex dump reads: (its .log's path, the .log mapped, the sibling offset index, the time index)."""
    base = base_offset_from_name(path)
    log_path = sibling_path(path, LOG_SUFFIX)
    return log_path, map_file(log_path), sibling_offset_index(path, base), TimeIndex(path, base)


def verify_time_index(
    time_index: TimeIndex, index: OffsetIndex, log: memoryview, log_path: str
) -> Iterator[Tuple[str, int, int, Any, Any]]:
    """Check each time-index entry against the log, as DumpLogSegments.dumpTimeIndex does.

    Yields (kind, timestamp, offset, a, b) per entry up to the zero tail, kind being
    ``"not-found"`` (a, b = indexed offset, found batch last offset or -1) or ``"checked"``
    (a = (index ts, log max ts) on a mismatch else None, b = (ts, previous ts) when out of
    order else None).
    """
    previous = -1
    base = time_index.base_offset
    for i in range(time_index.entries):
        timestamp, offset = time_index.entry(i)
        if zero_tail_stop(i, offset, base):
            return
        position = index.lookup(offset)[1]
        _slice_end(log, position, MAX_INT32, log_path)
        found = None
        for batch in read_batches(log, start=position, path=log_path):
            if batch.last_offset >= offset:
                found = batch
                break
        if found is None:
            yield "not-found", timestamp, offset, offset, -1
        elif found.last_offset != offset:
            yield "not-found", timestamp, offset, offset, found.last_offset
        else:
            max_ts = -1
            for record in found.records():
                if record.timestamp > max_ts:
                    max_ts = record.timestamp
            mismatch = (timestamp, max_ts) if max_ts != timestamp else None
            out_of_order = (timestamp, previous) if previous >= timestamp else None
            yield "checked", timestamp, offset, mismatch, out_of_order
        previous = timestamp
