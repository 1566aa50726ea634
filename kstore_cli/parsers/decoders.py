"""DumpLogSegments' ``--key-decoder-class``/``--value-decoder-class`` decoders, and Java's UTF-8 decoding.

``StringDecoder`` is ``new String(bytes, UTF_8)``; ``IntegerDecoder``/``LongDecoder`` read a big-endian
int32/int64 from the start of the bytes (extra bytes ignored, too few bytes fail like Java's
``ByteBuffer.getInt``/``getLong`` with ``BufferUnderflowException``).
"""

from __future__ import annotations

import base64
import codecs
import struct
from typing import Callable, Dict, Optional

from kstore_cli.errors import RecordParseError, UsageError

_INT32 = struct.Struct(">i")  # IntegerDecoder: ByteBuffer.wrap(bytes).getInt()
_INT64 = struct.Struct(">q")  # LongDecoder: ByteBuffer.wrap(bytes).getLong()


def _cont(b: int) -> bool:
    return (b & 0xC0) == 0x80


def _java_malformed_length(data: bytes, start: int) -> int:
    """How many bytes Java's ``String`` UTF-8 decoder replaces with one U+FFFD at ``start``.

    Follows ``String.decodeUTF8_UTF16`` (JDK 17+): like Python's "maximal subpart" rule except that an
    encoded surrogate (``ED A0..BF ..``) and a truncated one at the end count as ONE replacement.
    """
    b1 = data[start]
    n = len(data) - start
    if 0xE0 <= b1 <= 0xEF:
        if n >= 3:
            b2, b3 = data[start + 1], data[start + 2]
            malformed3 = (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2) or not _cont(b3)
            if not malformed3:
                return 3  # a well-formed encoding of a surrogate: one replacement for all three
            return 1 if (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2) else 2
        if n == 2:
            b2 = data[start + 1]
            if (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or not _cont(b2):
                return 1
            return 2  # truncated at the end: one replacement, decoding stops
        return 1
    if 0xF0 <= b1 <= 0xF7:
        if n >= 4:
            b2 = data[start + 1]
            if b1 > 0xF4 or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF) or \
                    (b1 == 0xF4 and (b2 & 0xF0) != 0x80) or not _cont(b2):
                return 1
            return 2 if not _cont(data[start + 2]) else 3
        if b1 > 0xF4:
            return 1
        if n >= 2:
            b2 = data[start + 1]
            if (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF) or (b1 == 0xF4 and (b2 & 0xF0) != 0x80) or not _cont(b2):
                return 1
            if n >= 3 and not _cont(data[start + 2]):
                return 2
        return n  # truncated at the end
    return 1


def _java_replace(exc: UnicodeError):
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "\ufffd", exc.start + _java_malformed_length(exc.object, exc.start)


codecs.register_error("kstore-java-utf8", _java_replace)


def decode_utf8_java(data: bytes) -> str:
    """``new String(data, StandardCharsets.UTF_8)``."""
    data = bytes(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if b"\xed" not in data:
        # Java and Python's "replace" only disagree on encoded surrogates (lead byte 0xED);
        # without one, the C-speed handler gives Java's text (tests/parsers check both agree).
        return data.decode("utf-8", "replace")
    return data.decode("utf-8", "kstore-java-utf8")


def decode_utf8_java_slow(data: bytes) -> str:
    """The reference: every malformed sequence through the Java-rules handler."""
    return bytes(data).decode("utf-8", "kstore-java-utf8")


def _string(data: bytes) -> str:
    return decode_utf8_java(data)


def _int(data: bytes) -> str:
    if len(data) < 4:
        raise RecordParseError(f"IntegerDecoder needs 4 bytes but the record has {len(data)} "
                               "(Kafka: java.nio.BufferUnderflowException)")
    return str(_INT32.unpack_from(data)[0])


def _long(data: bytes) -> str:
    if len(data) < 8:
        raise RecordParseError(f"LongDecoder needs 8 bytes but the record has {len(data)} "
                               "(Kafka: java.nio.BufferUnderflowException)")
    return str(_INT64.unpack_from(data)[0])


def _hex(data: bytes) -> str:
    return bytes(data).hex()


def _base64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


_FRIENDLY: Dict[str, Callable[[bytes], str]] = {
    "string": _string,
    "hex": _hex,
    "base64": _base64,
    "int": _int,
    "long": _long,
}

_KAFKA: Dict[str, str] = {
    "org.apache.kafka.tools.api.StringDecoder": "string",
    "org.apache.kafka.tools.api.IntegerDecoder": "int",
    "org.apache.kafka.tools.api.LongDecoder": "long",
    "kafka.serializer.StringDecoder": "string",
    "kafka.serializer.IntegerDecoder": "int",
    "kafka.serializer.LongDecoder": "long",
    "StringDecoder": "string",
    "IntegerDecoder": "int",
    "LongDecoder": "long",
}

DEFAULT_DECODER = "org.apache.kafka.tools.api.StringDecoder"


def decoder_for(name: Optional[str]) -> Callable[[bytes], str]:
    """The decoder function for a Kafka class name or a friendly name (None means the default)."""
    if name is None or name == "":
        name = DEFAULT_DECODER
    friendly = _KAFKA.get(name, name)
    try:
        return _FRIENDLY[friendly]
    except KeyError:
        accepted = ", ".join(list(_FRIENDLY) + sorted(k for k in _KAFKA if "." in k))
        raise UsageError(f"unknown decoder {name!r}; accepted: {accepted}") from None
