"""The fast path of Java-style UTF-8 decoding gives exactly what the Java-rules handler gives."""

from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.segment.text import java_utf8 as decode_utf8_java
from kstore_cli.segment.text import java_utf8_reference as decode_utf8_java_slow

_interesting = st.sampled_from(list(range(0x00, 0x80, 17)) + list(range(0x80, 0xC0, 5)) + list(range(0xC0, 0x100)))


@given(st.lists(st.one_of(_interesting, st.integers(0, 255)), max_size=24).map(bytes))
def test_fast_path_equals_java_rules(data: bytes) -> None:
    assert decode_utf8_java(data) == decode_utf8_java_slow(data)


def test_encoded_surrogate_is_one_replacement_like_java() -> None:
    assert decode_utf8_java(b"a\xed\xa0\x80b") == "a\ufffdb"
    assert decode_utf8_java(b"\xff\xfe") == "\ufffd\ufffd"
