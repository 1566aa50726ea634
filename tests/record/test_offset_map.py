"""The cleaner's bounded offset map (Kafka's SkimpyOffsetMap) against a plain dict, and Kafka's capacity rule."""

from __future__ import annotations

from typing import Dict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore_cli.record.offset_map import BYTES_PER_ENTRY, OffsetMap


@given(st.lists(st.tuples(st.binary(max_size=6), st.integers(0, 1 << 40)), max_size=3000))
@settings(max_examples=40, deadline=None)
def test_offset_map_answers_like_a_dict_by_md5(puts) -> None:
    m = OffsetMap(1 << 20)
    ref: Dict[bytes, int] = {}
    for key, offset in puts:
        m.put(key, offset)
        ref[key] = offset
    assert m.size == len(ref)
    assert all(m.get(k) == v for k, v in ref.items())
    assert m.get(b"never put, longer than six bytes") == -1
    assert m.latest_offset == (puts[-1][1] if puts else -1)


def test_offset_map_capacity_is_kafkas_and_memory_stays_within_the_buffer() -> None:
    memory = 64 * 1024
    m = OffsetMap(memory)
    assert m.slots == memory // 24 and m.max_entries == int(memory // 24 * 0.9)
    n = 0
    while not m.full:
        m.put(b"key-%d" % n, n)
        n += 1
        assert m.allocated_bytes <= memory
    assert n == m.max_entries == m.size
    assert all(m.get(b"key-%d" % i) == i for i in range(0, n, 97))
    big = OffsetMap(128 << 20)
    for i in range(10_000):
        big.put(b"%d" % i, i)
    assert big.allocated_bytes < (1 << 20)  # a small map grows by doubling, it does not take the buffer
    with pytest.raises(ValueError):
        OffsetMap(BYTES_PER_ENTRY)  # one slot * 0.9 < 1 entry: Kafka refuses such a buffer too
