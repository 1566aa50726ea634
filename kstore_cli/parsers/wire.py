"""A bounds-checked reader of Kafka's primitive wire types, failing the way Java's ByteBuffer does.

Layout implemented (big-endian, as ``java.nio.ByteBuffer`` and ``ByteUtils``)::

    int8 | int16 | int32 | int64 | uint16 | uint32 | float64   fixed width
    uuid                                                      two int64 (most significant first)
    unsigned varint                                           7 bits a byte, low group first, at most 5 bytes

A short read raises :class:`JavaError` with ``message=None`` (Java's ``BufferUnderflowException``
carries no message, so Kafka's texts show ``null`` there).
"""

from __future__ import annotations

import base64
import struct
from typing import Optional

from kstore_cli.errors import RecordParseError
from kstore_cli.record.wire import encode_uvarint

_INT8 = struct.Struct(">b")      # signed byte
_UINT8 = struct.Struct(">B")     # unsigned byte (varint groups)
_INT16 = struct.Struct(">h")     # signed short
_UINT16 = struct.Struct(">H")    # unsigned short
_INT32 = struct.Struct(">i")     # signed int
_UINT32 = struct.Struct(">I")    # unsigned int
_INT64 = struct.Struct(">q")     # signed long
_FLOAT64 = struct.Struct(">d")   # IEEE 754 double
_UUID = struct.Struct(">qq")     # most significant bits, least significant bits


class JavaError(RecordParseError):
    """A Java exception as Kafka would raise it: ``message`` is what ``getMessage()`` returns (maybe None).

    Part of the error tree (a record parser's failure), so one that escapes a decoder still reaches the
    CLI's one error format and exit code.
    """

    def __init__(self, message: Optional[str], java_class: str = "java.lang.RuntimeException") -> None:
        super().__init__(f"{java_class}: {'null' if message is None else message}")
        self.message = message  # type: ignore[assignment] - Java's getMessage() may be null
        self.java_class = java_class

    def __str__(self) -> str:
        return f"{self.java_class}: {self.text}"

    @property
    def text(self) -> str:
        """``getMessage()`` as Java string concatenation prints it (``null`` when absent)."""
        return "null" if self.message is None else self.message


def underflow() -> JavaError:
    """Java's ``BufferUnderflowException`` (no message)."""
    return JavaError(None, "java.nio.BufferUnderflowException")


class WireReader:
    """Reads primitives from ``data`` starting at ``pos``; mirrors ``ByteBufferAccessor``."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: Optional[int] = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def remaining(self) -> int:
        """Bytes left."""
        return self.end - self.pos

    def _fixed(self, st: struct.Struct):
        if self.end - self.pos < st.size:
            raise underflow()
        value = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return value

    def int8(self) -> int:
        return self._fixed(_INT8)[0]

    def int16(self) -> int:
        return self._fixed(_INT16)[0]

    def uint16(self) -> int:
        return self._fixed(_UINT16)[0]

    def int32(self) -> int:
        return self._fixed(_INT32)[0]

    def uint32(self) -> int:
        return self._fixed(_UINT32)[0]

    def int64(self) -> int:
        return self._fixed(_INT64)[0]

    def float64(self) -> float:
        return self._fixed(_FLOAT64)[0]

    def uuid(self) -> str:
        """A Kafka ``Uuid`` as its ``toString()``: URL-safe base64 of the 16 bytes, no padding."""
        msb, lsb = self._fixed(_UUID)
        return uuid_to_string(msb, lsb)

    def unsigned_varint(self) -> int:
        """``ByteUtils.readUnsignedVarint``: returns a Java int (may be negative after 5 bytes)."""
        value = 0
        for i in range(5):
            if self.pos >= self.end:
                raise underflow()
            b = self.data[self.pos]
            self.pos += 1
            if i == 4:
                # A set high bit in the fifth byte is an error (reported with the bits read so far);
                # otherwise the byte is shifted into a 32-bit int and the excess bits are lost.
                if b & 0x80:
                    raise JavaError(
                        "Varint is too long, the most significant bit in the 5th byte is set, "
                        f"converted value: {value:x}",
                        "java.lang.IllegalArgumentException",
                    )
                value = (value | (b << 28)) & 0xFFFFFFFF
                break
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                break
        return value - (1 << 32) if value >= 1 << 31 else value

    def byte_array(self, size: int) -> bytes:
        """``readArray(size)`` of the newer ``ByteBufferAccessor``."""
        remaining = self.end - self.pos
        if size > remaining:
            raise JavaError(f"Error reading byte array of {size} byte(s): only {remaining} byte(s) available")
        out = bytes(self.data[self.pos:self.pos + size])
        self.pos += size
        return out


def uuid_to_string(msb: int, lsb: int) -> str:
    """``org.apache.kafka.common.Uuid.toString()``."""
    raw = _UUID.pack(msb, lsb)
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def encode_unsigned_varint(value: int) -> bytes:
    """``ByteUtils.writeUnsignedVarint`` of a Java int (``value`` taken modulo 2**32)."""
    return encode_uvarint(value & 0xFFFFFFFF)
