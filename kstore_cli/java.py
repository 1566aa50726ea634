"""Java's integer limits and long arithmetic, as Kafka's code and tools use them (no imports: the CLI reads
them at start-up)."""

#: Integer.MAX_VALUE
MAX_INT32 = 0x7FFFFFFF
#: Long.MIN_VALUE, Long.MAX_VALUE
MIN_INT64 = -0x8000000000000000
MAX_INT64 = 0x7FFFFFFFFFFFFFFF


def java_long(value: int) -> int:
    """Java long arithmetic: value wrapped to a signed 64-bit value."""
    return ((value + 0x8000000000000000) & 0xFFFFFFFFFFFFFFFF) - 0x8000000000000000
