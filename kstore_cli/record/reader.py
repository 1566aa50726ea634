"""Reading a segment's batches the way Kafka's FileLogInputStream does.

Framing shared by every magic: ``offset int64, size int32, (4 bytes), magic int8``.
Fewer than 18 remaining bytes are never parsed; a size field below 14 is an
error when at least 18 bytes remain; an entry that runs past the end is a
partial tail and ends the iteration silently.

Files are mapped with mmap and handed out as memoryview slices; pages already
walked past are released from the process (MADV_DONTNEED) so memory stays flat
however large the file is.
"""

from __future__ import annotations

import mmap
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Callable, Iterator, Optional, Union

from kstore_cli.errors import CorruptRecordError, FileUnreadableError
from kstore_cli.record.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    Batch,
    LegacyBatch,
    RecordBatch,
)
from kstore_cli.record import storage
from kstore_cli.record.decode import SCAN_OTHER, frame_batches
from kstore_cli.record.wire import LOG_ENTRY_PREFIX, RECORD_OVERHEAD_V0

#: Pages of a mapped file that were read count in the process's RSS until released: every time this many
#: bytes were walked past they are dropped (MADV_DONTNEED), so a scan holds about this much of the file
#: (plus one framing call's batches) however large the file is. 64 MiB held ~64 MB of RSS for nothing;
#: 1-4 MiB scan as fast (one madvise per window).
RELEASE_EVERY = 4 * 1024 * 1024
_PAGE = mmap.PAGESIZE
#: Batches framed per frame_batches call: few at first (a caller may stop after one), then more; at most
#: 64, so few batch objects are alive at once (thousands surviving each young-generation GC pass made
#: the collector cost more than the framing on 1-record batches), and no more than about RELEASE_EVERY
#: bytes of them (64 batches of 1 MiB would keep 64 MiB of the file mapped in until the next release).
_SCAN_FIRST = 8
_SCAN_MAX = 64

Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


def describe_kind(mode: int) -> str:
    """What a non-regular file is, for a message ("a symbolic link", "a FIFO (named pipe)"...)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


#: Files up to this size are read into memory instead of mapped: for the small files of a broker with
#: many partitions (a few KiB of index, snapshot or segment) an mmap costs more than the read.
READ_WHOLE_BYTES = 64 * 1024


def map_file(path: "str | os.PathLike[str]") -> memoryview:
    """The whole file as a read-only memoryview over an mmap, or over its bytes when it is small
    (READ_WHOLE_BYTES; empty files give an empty view)."""
    path = os.fspath(path)
    if storage.is_uri(path):
        return memoryview(storage.read_object(path))
    path = storage.local_path(path)
    try:
        # O_NONBLOCK: opening a FIFO named like a segment must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError
                raise FileUnreadableError(f"is {describe_kind(st.st_mode)}, not a regular file; refusing to read it",
                                          path=path)
            size = st.st_size
            if size == 0:
                return memoryview(b"")
            if size <= READ_WHOLE_BYTES:
                return memoryview(_read_whole(fd, size))
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise FileUnreadableError("no such file", path=path) from None
    except IsADirectoryError:
        raise FileUnreadableError("is a directory, not a file", path=path) from None
    except PermissionError:
        raise FileUnreadableError("permission denied", path=path) from None
    except OSError as exc:
        raise FileUnreadableError(f"cannot be read: {exc.strerror or exc}", path=path) from None
    try:
        mm.madvise(mmap.MADV_SEQUENTIAL)
    except (AttributeError, OSError):  # pragma: no cover - not every platform has madvise
        pass
    return memoryview(mm)


def _read_whole(fd: int, size: int) -> bytes:
    """A small file's bytes, as many as it holds (it may have shrunk since its size was read)."""
    data = os.read(fd, size)
    if len(data) < size:
        parts = [data]
        while True:
            more = os.read(fd, size)
            if not more:
                break
            parts.append(more)
        data = b"".join(parts)
    return data


def release_pages(buf: memoryview, start: int, end: int) -> None:
    """Drop already-read pages of a file mapping from this process (they stay in the page cache)."""
    obj = buf.obj
    if not isinstance(obj, mmap.mmap) or isinstance(obj, _Window):
        return  # a remote read's window is anonymous memory: dropping it would lose its bytes
    start -= start % _PAGE
    length = end - start
    length -= length % _PAGE
    if length <= 0:
        return
    try:
        obj.madvise(mmap.MADV_DONTNEED, start, length)
    except (AttributeError, OSError, ValueError):  # pragma: no cover
        pass


def read_batches(
    source: Source,
    *,
    start: int = 0,
    end: Optional[int] = None,
    path: Optional[str] = None,
    check_crc: bool = False,
) -> Iterator[Batch]:
    """Iterate the batches of a segment file (or of a buffer) from byte `start` up to `end`.

    Shallow: nothing is decompressed and no record is decoded until a batch's
    ``records()`` is called. Raises CorruptRecordError for a size field below 14.
    With `check_crc`, CRCs are checked while framing (natively, in bulk): a batch's
    ``is_valid``/``ensure_valid`` then costs nothing (what recovery and verification want).
    """
    if storage.is_uri(source):
        return remote_windows(source, start, end, lambda b, p, e: iterate_source(b, p, e, source, check_crc))
    buf, path = open_source(source, path)
    return iterate_source(buf, start, len(buf) if end is None else min(end, len(buf)), path, check_crc)


class _Window(mmap.mmap):
    """Anonymous memory holding one window of a remote object at its own byte positions."""


def remote_windows(uri: str, start: int, end: Optional[int], frame: Callable[[memoryview, int, int], Iterator],
                   read_ahead: Optional[int] = None) -> Iterator:
    """What `frame(buf, pos, end)` yields over bytes [start, end) of a remote object, read in ranged reads.

    Each window is a buffer as large as the object's prefix up to the window's end, of which only the
    window's pages are touched (anonymous memory), so the framing sees Kafka's byte positions unchanged.
    Open-ended reads grow from storage.FIRST_READ to the read-ahead (a planner's lookup reads one batch),
    bounded ones (a task's slices) from a megabyte; each read lands in its window (no copy), the next one
    running while a window is framed; an entry cut by the window's end (the framing stops before a
    partial entry) is carried over into the next window, so at most the read-ahead twice plus one batch is
    held. Items are RecordColumns (``stop``) or batches (``position + size``)."""
    f = storage.RemoteFile(uri, end)  # a planned range's end: no size request
    read_ahead = read_ahead or storage.READ_AHEAD
    # An open-ended read is a lookup (a batch or a few): it starts small. A bounded range starts at a
    # megabyte (framing starts after one round trip, not after a whole read-ahead) and grows to the read-ahead.
    size = min(storage.FIRST_READ if end is None else 1 << 20, read_ahead)
    end = f.size

    def fetch(at: int, length: int) -> "tuple[_Window, int]":
        """A window for the bytes up to at + length, [at, at + length) read into it (ranged, retried)."""
        window = _Window(-1, at + length)
        f.read_into(at, memoryview(window)[at:at + length])
        return window, length

    pos = fetched = start
    try:
        # the pool is shut down (a read in flight finished) before the file is closed
        with ThreadPoolExecutor(1) as pool:
            # the next window: the first read here, each later one running while the window before is framed
            ahead: Optional[Callable[[], "tuple[_Window, int]"]] = (
                partial(fetch, pos, min(size, end - pos)) if pos < end else None)
            carry: "memoryview | bytes" = b""
            while ahead is not None:
                window, length = ahead()
                window[pos:pos + len(carry)] = carry
                fetched += length
                size = min(size * 4, read_ahead)
                ahead = pool.submit(fetch, fetched, min(size, end - fetched)).result if fetched < end else None
                covered = pos
                for item in frame(memoryview(window), pos, fetched):
                    yield item
                    covered = getattr(item, "stop", None) or item.position + item.size
                carry = memoryview(window)[covered:fetched]
                pos = covered
    finally:
        f.close()


def open_source(source: Source, path: Optional[str] = None) -> "tuple[memoryview, Optional[str]]":
    """A segment source as a byte memoryview (a file mapped, a buffer cast), and the path errors name."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf = memoryview(source)
        if buf.ndim != 1 or buf.itemsize != 1:
            buf = buf.cast("B")
        return buf, path
    return map_file(source), os.fspath(source) if path is None else path


def iterate_source(buf: memoryview, pos: int, end: int, path: Optional[str], check_crc: bool = False,
                   release: bool = True) -> Iterator[Batch]:
    """The batches of buf[pos:end]. With `release`, pages behind the framing are dropped as it goes; a
    consumer that holds batches (or reads them on other threads) past that passes False and releases
    what it is done with itself."""
    released = pos
    limit = end - HEADER_SIZE_UP_TO_MAGIC
    unpack = LOG_ENTRY_PREFIX.unpack_from
    chunk = _SCAN_FIRST
    while pos < limit:
        # Plain v2 batches are framed in bulk by the record decoder (header fields parsed, batch objects
        # made there).
        start = pos
        batches, pos, status = frame_batches(RecordBatch, buf, pos, end, chunk, check_crc, path)
        yield from batches
        chunk = min(chunk * 4, _SCAN_MAX)
        if batches:
            chunk = max(1, min(chunk, RELEASE_EVERY * len(batches) // (pos - start)))
        if release and pos - released >= RELEASE_EVERY:
            release_pages(buf, released, pos)
            released = pos
        if status != SCAN_OTHER:
            continue
        # Anything else (legacy, a size below 14, a partial tail, a short or CRC-failing v2 batch):
        # one entry the generic way, as FileLogInputStream frames it.
        _offset, size, _x, magic = unpack(buf, pos)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"Found record size {size} smaller than minimum record overhead ({RECORD_OVERHEAD_V0}) in file {path}.",
                path=path,
                position=pos,
            )
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > end:
            return  # a partial trailing entry is not returned
        view = buf[pos:entry_end]
        if magic >= 2:
            # Kafka reads the 61-byte header from the file, even past a too-small batch.
            header = bytes(buf[pos : pos + RECORD_BATCH_OVERHEAD])
            if len(header) < RECORD_BATCH_OVERHEAD:
                header += b"\x00" * (RECORD_BATCH_OVERHEAD - len(header))
            yield RecordBatch(view, header, pos, path)
        else:
            yield LegacyBatch(view, pos, path)
        pos = entry_end


def valid_bytes(source: Source, *, end: Optional[int] = None) -> int:
    """Bytes covered by complete batches from the start (what FileLogInputStream can frame)."""
    total = 0
    for batch in read_batches(source, end=end):
        total = batch.position + batch.size
    return total
