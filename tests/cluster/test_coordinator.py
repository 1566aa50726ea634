"""cluster/coordinator.py: partition_for is Kafka's ``Utils.abs(key.hashCode) % numPartitions``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.cluster.coordinator import partition_for

INT_MIN = -(1 << 31)


def _java_hash(s: str) -> int:
    """String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a Java int."""
    units = s.encode("utf-16-be", "surrogatepass")
    code_units = [int.from_bytes(units[i:i + 2], "big") for i in range(0, len(units), 2)]
    n = len(code_units)
    h = sum(c * 31 ** (n - 1 - i) for i, c in enumerate(code_units)) % (1 << 32)
    return h - (1 << 32) if h >= 1 << 31 else h


def _kafka_abs(n: int) -> int:
    """Utils.abs(int n): ``(n == Integer.MIN_VALUE) ? 0 : Math.abs(n)``."""
    return 0 if n == INT_MIN else abs(n)


@pytest.mark.parametrize("key, hash_code", [
    ("", 0), ("a", 97), ("Aa", 2112), ("BB", 2112), ("hello", 99162322),
    ("polygenelubricants", INT_MIN),
])
def test_java_hash_reference(key: str, hash_code: int) -> None:
    assert _java_hash(key) == hash_code  # the test's own reference, checked against known Java values


@pytest.mark.parametrize("key", ["", "a", "hello", "my-group", "console-consumer-40000", "polygenelubricants",
                                 "groupé", "g\U0001F600", "transactional-id-17"])
@pytest.mark.parametrize("num_partitions", [1, 3, 50, 53])
def test_partition_for_known_keys(key: str, num_partitions: int) -> None:
    assert partition_for(key, num_partitions) == _kafka_abs(_java_hash(key)) % num_partitions


def test_a_negative_hash_code_is_made_positive() -> None:
    assert _java_hash("my-group") == -1906497762
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12  # h % 50 without Utils.abs would be 38


def test_integer_min_value_hash_is_partition_zero() -> None:
    # Math.abs(Integer.MIN_VALUE) stays negative in Java; Utils.abs makes it 0, so every count gives 0
    # (plain abs would give 2^31 % 50 == 48).
    assert _java_hash("polygenelubricants") == INT_MIN
    for n in (1, 3, 50, 53):
        assert partition_for("polygenelubricants", n) == 0
    assert (1 << 31) % 50 == 48


@given(st.text(max_size=40), st.integers(1, 1000))
def test_partition_for_any_key(key: str, num_partitions: int) -> None:
    p = partition_for(key, num_partitions)
    assert p == _kafka_abs(_java_hash(key)) % num_partitions
    assert 0 <= p < num_partitions
