"""Checksums: CRC-32C for v2 batches and producer snapshots, CRC-32 (IEEE) for legacy messages."""

from __future__ import annotations

from zlib import crc32 as _zlib_crc32

# The crc32c package is imported on first use: its import pulls importlib.metadata (20-35 ms), and with
# the native decoder (its own CRC-32C) snapshots are the only users.
_crc32c = None
_TABLE = None


def _crc32c_table() -> list:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


def crc32c(data: "bytes | memoryview", value: int = 0) -> int:
    """CRC-32C (Castagnoli), as java.util.zip.CRC32C computes it; `value` is the CRC of the bytes before
    `data` (crc32c(b, crc32c(a)) == crc32c(a + b)), as zlib's crc32 takes it."""
    global _crc32c
    if _crc32c is None:
        try:
            from crc32c import crc32c as _crc32c
        except ImportError:  # pragma: no cover - the crc32c package is a declared dependency
            _crc32c = False
    if _crc32c:
        return _crc32c(data, value)
    global _TABLE
    if _TABLE is None:
        _TABLE = _crc32c_table()
    table = _TABLE
    crc = value ^ 0xFFFFFFFF
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32(data: "bytes | memoryview", value: int = 0) -> int:
    """CRC-32 (IEEE 802.3), as java.util.zip.CRC32 computes it; `value` as for :func:`crc32c`."""
    return _zlib_crc32(data, value) & 0xFFFFFFFF
