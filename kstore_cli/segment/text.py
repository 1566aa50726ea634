"""Text the way Java decodes it: ``new String(bytes, StandardCharsets.UTF_8)``.

Kafka's tools print keys, values and header keys through Java's UTF-8 decoder,
which replaces malformed input with U+FFFD by rules close to, but not the same
as, Python's ``errors="replace"``.
"""

from __future__ import annotations

import codecs


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


def java_utf8(data: "bytes | memoryview") -> str:
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


def java_utf8_reference(data: "bytes | memoryview") -> str:
    """The reference: every malformed sequence through the Java-rules handler."""
    return bytes(data).decode("utf-8", "kstore-java-utf8")
