"""Java's integer limits, as Kafka's code and tools use them (no imports: the CLI reads them at start-up)."""

#: Integer.MAX_VALUE
MAX_INT32 = 0x7FFFFFFF
#: Long.MAX_VALUE
MAX_INT64 = 0x7FFFFFFFFFFFFFFF
