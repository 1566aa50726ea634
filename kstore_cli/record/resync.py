"""The resync scan: the next whole, CRC-valid batch in a .log's bytes, past damage.

Salvage (:mod:`kstore_cli.operations.salvage`) runs it past every damaged range, and the metadata replay
(:mod:`kstore_cli.cluster.metadata_image`) to tell a torn tail from damage. Wire-level only: batch framing
and CRCs, each candidate position costing bounded work.
"""

from __future__ import annotations

import re
import struct
from typing import Callable, Iterator, Optional

from kstore_cli.errors import CorruptDataError, KstoreError
from kstore_cli.record.batch import Batch
from kstore_cli.record.crc import crc32, crc32c
from kstore_cli.record.reader import iterate_source, map_file
from kstore_cli.record.wire import LOG_ENTRY_PREFIX, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, RECORD_OVERHEAD_V0

_PREFIX = LOG_ENTRY_PREFIX  # base offset, length, leader epoch, magic
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_MIN_ENTRY = RECORD_OVERHEAD_V0
_V2_MIN = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # the smallest length field of a v2 batch (its header after it)
_MAX_OFFSET_JUMP = 1 << 31  # a batch's offsets are relative to its segment's base offset (int32)

_CRC_BLOCK = 1024
_ZEROS = bytes(_CRC_BLOCK)
_MASK = 0xFFFFFFFF


def _multmodp(a: int, b: int, poly: int) -> int:
    """a * b modulo the CRC's polynomial, both in the reflected representation (x^0 is the top bit)."""
    if not a:
        return 0
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1


class _RangeCrc:
    """The CRC of any byte range of a buffer in bounded work: the CRC register after every 1 KiB block from
    the start (one pass, made as far as the ranges asked for need it) and x^(8 * 1024 * k) modulo the
    polynomial; a range's CRC is then its partial blocks' bytes and one multiplication (a CRC is linear)."""

    def __init__(self, buf: memoryview, crc: Callable[..., int], poly: int) -> None:
        self.buf = buf
        self.crc = crc  # crc(data, value): the CRC continued from `value`
        self.poly = poly
        self.prefix = [0]  # the register after the first k blocks, from a zero register
        self.powers = [1 << 31]  # x^(8 * _CRC_BLOCK * k)

    def _prefix(self, k: int) -> int:
        prefix, buf, crc = self.prefix, self.buf, self.crc
        while len(prefix) <= k:
            i = len(prefix) - 1
            prefix.append(crc(buf[i * _CRC_BLOCK:(i + 1) * _CRC_BLOCK], prefix[i] ^ _MASK) ^ _MASK)
        return prefix[k]

    def _power(self, k: int) -> int:
        powers = self.powers
        while len(powers) <= k:
            powers.append(self.crc(_ZEROS, powers[-1] ^ _MASK) ^ _MASK)
        return powers[k]

    def of(self, start: int, end: int) -> int:
        """The CRC of buf[start:end]."""
        buf, crc = self.buf, self.crc
        first = -(-start // _CRC_BLOCK)
        last = end // _CRC_BLOCK
        if last <= first:
            return crc(buf[start:end])
        register = crc(buf[start:first * _CRC_BLOCK]) ^ _MASK
        register = (_multmodp(self._power(last - first), register ^ self._prefix(first), self.poly)
                    ^ self._prefix(last))
        return crc(buf[last * _CRC_BLOCK:end], register ^ _MASK)


class BatchFinder:
    """Where batches can start in one mapped .log, each position costing bounded work.

    A regular expression finds the positions whose header fields can be in range (an offset near the
    log's, a length of at least 14, a known magic); the exact header checks follow, then the candidate's
    stored CRC is compared with the CRC of its bytes through :class:`_RangeCrc`, before anything is framed.
    Framing each candidate cost its claimed length: garbage full of headers claiming to run to the end of
    the file made the resync quadratic (4 MiB: 12 s)."""

    def __init__(self, buf: memoryview, path: str) -> None:
        self.buf = buf
        self.end = len(buf)
        self.path = path
        self._crc32c = _RangeCrc(buf, crc32c, 0x82F63B78)  # v2 batches
        self._crc32 = _RangeCrc(buf, crc32, 0xEDB88320)  # v0/v1 messages
        self._patterns: dict = {}

    def _pattern(self, after: int) -> "re.Pattern[bytes]":
        # Offsets in (after, after + 2^31] have at most two values of their high 32 bits; the length is
        # neither negative nor below 14; the magic is 0, 1 or 2.
        lo, hi = after + 1, min(after + _MAX_OFFSET_JUMP, (1 << 63) - 1)
        highs = tuple(sorted({(v >> 32) & _MASK for v in (lo, hi) if lo <= hi}))
        pattern = self._patterns.get(highs)
        if pattern is None:
            alternatives = b"|".join(re.escape(_CRC.pack(h)) for h in highs) or b"(?!)"
            pattern = re.compile(b"(?=(?:" + alternatives + rb")[\x00-\xff]{4}(?![\x80-\xff]|\x00\x00\x00[\x00-\x0d])"
                                 rb"[\x00-\xff]{8}[\x00-\x02])")
            self._patterns[highs] = pattern
        return pattern

    def candidates(self, start: int, after: int, below: Optional[int]) -> Iterator[int]:
        """Positions from `start` where a batch continuing the log may start: its header fields in range and
        its stored CRC that of its bytes (what framing it would check)."""
        buf, end = self.buf, self.end
        unpack = _PREFIX.unpack_from
        last = end - 17
        for match in self._pattern(after).finditer(buf, start, end):
            p = match.start()
            if p >= last:
                return
            offset, length, _epoch, magic = unpack(buf, p)
            if magic < 0 or magic > 2 or length < _MIN_ENTRY or p + 12 + length > end:
                continue
            if magic == 2 and length < _V2_MIN:
                continue
            if offset <= after or offset - after > _MAX_OFFSET_JUMP or (below is not None and offset >= below):
                continue
            if magic == 2:  # DefaultRecordBatch: CRC-32C from the attributes to the end
                if _CRC.unpack_from(buf, p + 17)[0] != self._crc32c.of(p + 21, p + 12 + length):
                    continue
            elif _CRC.unpack_from(buf, p + 12)[0] != self._crc32.of(p + 16, p + 12 + length):
                continue  # LegacyRecord: CRC-32 from the magic to the end
            yield p

    def batch_at(self, pos: int) -> Optional[Batch]:
        """The whole, CRC-valid batch that starts at `pos`, with offsets Kafka accepts, or None (only that
        batch is framed)."""
        end = self.end
        if pos >= end - 17:
            return None
        length = _LENGTH.unpack_from(self.buf, pos + 8)[0]
        if length < _MIN_ENTRY or pos + 12 + length > end:
            return None
        try:
            batch = next(iterate_source(self.buf, pos, pos + 12 + length, self.path, check_crc=True), None)
        except CorruptDataError:
            return None
        if batch is None or batch.position != pos or batch.magic > 2:
            return None
        try:
            return batch if batch.is_valid and batch.offsets_problem() is None else None
        except KstoreError:
            return None


def next_intact_batch(path: str, start: int, after: int) -> Optional[int]:
    """The position of the first whole, CRC-valid batch at or after byte `start` of a .log whose base offset
    is above `after` (the resync scan salvage runs past damage), or None: nothing after `start` continues
    the log."""
    finder = BatchFinder(map_file(path), path)
    for p in finder.candidates(start, after, None):
        if finder.batch_at(p) is not None:
            return p
    return None
