"""The segment core: read (and later write) Kafka's log segments, indexes and checkpoints.

Never imports click or rich.
"""

from kstore_cli.segment.batch import (
    Batch,
    ControlRecord,
    Header,
    LegacyBatch,
    Record,
    RecordBatch,
)
from kstore_cli.segment.columns import RecordColumns, read_columns
from kstore_cli.segment.reader import map_file, read_batches

__all__ = [
    "Batch",
    "ControlRecord",
    "Header",
    "LegacyBatch",
    "Record",
    "RecordBatch",
    "RecordColumns",
    "map_file",
    "read_batches",
    "read_columns",
]
