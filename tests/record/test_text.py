"""The fast path of Java-style UTF-8 decoding gives exactly what the Java-rules handler gives."""

from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.record.text import java_utf8 as decode_utf8_java
from kstore_cli.record.text import java_utf8_reference as decode_utf8_java_slow
from kstore_cli.record.text import ScalaHashMapOrder, java_string_hash, scala_hashmap_order

_interesting = st.sampled_from(list(range(0x00, 0x80, 17)) + list(range(0x80, 0xC0, 5)) + list(range(0xC0, 0x100)))


@given(st.lists(st.one_of(_interesting, st.integers(0, 255)), max_size=24).map(bytes))
def test_fast_path_equals_java_rules(data: bytes) -> None:
    assert decode_utf8_java(data) == decode_utf8_java_slow(data)


def test_encoded_surrogate_is_one_replacement_like_java() -> None:
    assert decode_utf8_java(b"a\xed\xa0\x80b") == "a\ufffdb"
    assert decode_utf8_java(b"\xff\xfe") == "\ufffd\ufffd"


# ------------------------------------------------------------------ String.hashCode and Scala's HashMap order


def test_java_string_hash_known_values() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -2147483648  # a classic Integer.MIN_VALUE hash
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 code units, not code points


def test_scala_hashmap_order_is_by_bucket_then_hash() -> None:
    keys = [f"/data/t-{i}/00000000000000000000.log" for i in range(8)]

    def slot(k: str) -> tuple:
        h = java_string_hash(k) & 0xFFFFFFFF
        improved = h ^ (h >> 16)
        signed = improved - (1 << 32) if improved >= 1 << 31 else improved
        return improved & 15, signed

    assert scala_hashmap_order(keys) == sorted(keys, key=slot)
    assert scala_hashmap_order(reversed(keys)) == scala_hashmap_order(keys)  # distinct hashes: order-free


def test_scala_hashmap_grows_on_a_put_of_a_key_it_already_has() -> None:
    """put() checks contentSize + 1 >= threshold before it looks the key up: with 11 keys in a 16-slot table,
    putting one of them again doubles the table, which can reorder the keys."""
    for n in range(200):
        keys = [f"/k{n}/{i}" for i in range(11)]
        once = ScalaHashMapOrder()
        twice = ScalaHashMapOrder()
        for k in keys:
            once.put(k)
            twice.put(k)
        twice.put(keys[0])
        if once.order() != twice.order():
            break
    else:
        raise AssertionError("no key set whose order a 32-slot table changes")
    assert len(once) == len(twice) == 11
    again = ScalaHashMapOrder()
    for k in keys[:-1]:
        again.put(k)
    again.put(keys[-1], times=2)  # the same as two puts in a row
    assert again.order() == twice.order()
    ten = ScalaHashMapOrder()
    for k in keys[:10]:
        ten.put(k, times=5)  # 10 keys: 10 + 1 < 12, no growth however often they are put
    assert ten.order() == scala_hashmap_order(keys[:10])
