"""Text the way Java handles it: ``new String(bytes, StandardCharsets.UTF_8)``, ``String.hashCode()``,
and the order a Scala ``mutable.HashMap`` keyed by strings iterates in.

Kafka's tools print keys, values and header keys through Java's UTF-8 decoder,
which replaces malformed input with U+FFFD by rules close to, but not the same
as, Python's ``errors="replace"``.
"""

from __future__ import annotations

import codecs
from typing import Dict, Iterable, List, TypeVar

T = TypeVar("T")


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


# ------------------------------------------------------------------ String.hashCode and Scala's HashMap order


def int32(value: int) -> int:
    """`value` wrapped to a Java int (two's complement, 32 bits)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def java_string_hash(text: str) -> int:
    """``String.hashCode()`` (over UTF-16 code units) as a signed 32-bit int."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return int32(h)


class ScalaHashMapOrder:
    """The iteration order of a Scala 2.13 ``mutable.HashMap[String, _]``, replayed from its ``put`` calls.

    Buckets are visited by index (``improved & (table length - 1)``, ``improved = h ^ (h >>> 16)``); each
    bucket's list is kept sorted by the (signed) improved hash, equal hashes in insertion order, and a
    resize keeps that order, so only the final table length matters. It starts at 16 with load factor
    0.75, and ``put`` grows the table BEFORE it looks the key up (``contentSize + 1 >= threshold``): putting
    an existing key again can grow it, so the caller replays every ``put``, not only the first per key.
    """

    def __init__(self) -> None:
        self._table_len = 16
        self._threshold = 12
        self._hashes: Dict[str, int] = {}  # key -> improved hash, in insertion order

    def _check_threshold(self) -> None:
        if len(self._hashes) + 1 >= self._threshold:
            self._table_len *= 2
            self._threshold = int(self._table_len * 0.75)

    def put(self, key: str, times: int = 1) -> None:
        """``map.put(key, ...)`` called ``times`` times in a row."""
        if times <= 0:
            return
        self._check_threshold()
        if key not in self._hashes:
            h = java_string_hash(key)
            self._hashes[key] = int32(h ^ ((h & 0xFFFFFFFF) >> 16))
        if times > 1:
            self._check_threshold()  # later puts of the same key: one more check can still grow it

    def __len__(self) -> int:
        return len(self._hashes)

    def order(self) -> List[str]:
        """The keys as ``foreach``/``foreachEntry``/``values`` visit them."""
        mask = self._table_len - 1
        hashes = self._hashes
        return sorted(hashes, key=lambda k: (hashes[k] & mask, hashes[k]))  # stable: ties keep insertion order


def scala_hashmap_order(keys: Iterable[str]) -> List[str]:
    """The iteration order of a ``mutable.HashMap[String, _]`` after ``put`` of each key in turn."""
    m = ScalaHashMapOrder()
    for key in keys:
        m.put(key)
    return m.order()


def java_hashmap_order(keys: Iterable[T], hashes: Iterable[int], initial_capacity: int = 16) -> List[T]:
    """The iteration order of a ``java.util.HashMap`` (``new HashMap<>(initial_capacity)``) after ``put`` of each
    key in turn (`hashes`: each key's ``hashCode()``): buckets by index (``(h ^ (h >>> 16)) & (table length - 1)``),
    each bucket's keys in insertion order (a resize splits a bucket keeping that order); the table starts at
    ``tableSizeFor(initial_capacity)`` and doubles whenever the size passes 0.75 of it. Keys are distinct; a
    bucket of 9+ keys (a tree bin) is not modelled."""
    keys = list(keys)
    spread = [(h & 0xFFFFFFFF) ^ ((h & 0xFFFFFFFF) >> 16) for h in hashes]
    table = 1
    while table < initial_capacity:
        table *= 2
    while len(keys) > table * 3 // 4:
        table *= 2
    return [k for _b, _i, k in sorted((s & (table - 1), i, k) for i, (s, k) in enumerate(zip(spread, keys)))]
