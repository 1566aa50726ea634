"""The wire format, as Kafka's ``clients/.../common/record``: batches, records, legacy entries,
CRCs, readers, builders, and the decode/encode/filter/dump-text twins (native and pure Python).

Depends on :mod:`kstore_cli.codecs` only. Never imports click or rich.
"""

from kstore_cli.record.batch import (
    Batch,
    ControlRecord,
    Header,
    LegacyBatch,
    Record,
    RecordBatch,
)
from kstore_cli.record.columns import RecordColumns, read_columns
from kstore_cli.record.reader import map_file, read_batches

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
