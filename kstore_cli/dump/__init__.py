"""``kstore dump-segment``: Kafka's DumpLogSegments tool, byte for byte, plus ``--json``."""
