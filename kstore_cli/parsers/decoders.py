"""DumpLogSegments' ``--key-decoder-class``/``--value-decoder-class`` decoders, and Java's UTF-8 decoding.

``StringDecoder`` is ``new String(bytes, UTF_8)``; ``IntegerDecoder``/``LongDecoder`` read a big-endian
int32/int64 from the start of the bytes (extra bytes ignored, too few bytes fail like Java's
``ByteBuffer.getInt``/``getLong`` with ``BufferUnderflowException``).
"""

from __future__ import annotations

import base64
import struct
from typing import Any, Callable, Dict, Optional

from kstore_cli.errors import RecordParseError, UsageError

_INT32 = struct.Struct(">i")  # IntegerDecoder: ByteBuffer.wrap(bytes).getInt()
_INT64 = struct.Struct(">q")  # LongDecoder: ByteBuffer.wrap(bytes).getLong()


from kstore_cli.record.text import java_utf8 as decode_utf8_java  # noqa: E402


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


def _int_json(data: bytes) -> int:
    return int(_int(data))


def _long_json(data: bytes) -> int:
    return int(_long(data))


#: the same decoders for ``--json``: numbers as JSON numbers, everything else as JSON strings
_FRIENDLY_JSON: Dict[str, Callable[[bytes], Any]] = {**_FRIENDLY, "int": _int_json, "long": _long_json}


def json_decoder_for(name: Optional[str]) -> Callable[[bytes], Any]:
    """``decoder_for`` for ``--json``: the decoded JSON value (an ``int`` for int/long)."""
    decoder_for(name)  # the same name check
    friendly = _KAFKA.get(name or DEFAULT_DECODER, name or DEFAULT_DECODER)
    return _FRIENDLY_JSON[friendly]
