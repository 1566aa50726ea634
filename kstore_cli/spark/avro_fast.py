"""The Avro column of a batch through the columnar decoder (kstore_cli.spark.avro_columns) where it can, the
per-record fastavro path (kstore_cli.spark.decoded) for every other row, assembled back in row order."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

import pyarrow as pa

from kstore_cli.cluster.wire_format import HEADER_SIZE, TYPE_FORMATS


def decode_avro_column(decoding: Any, side: Any, column: pa.Array, failed: Dict[int, Tuple[str, str]]) \
        -> Optional[pa.Array]:
    """`column` (binary, Confluent's wire format) decoded; None without numpy (the caller decodes per record)."""
    try:
        import numpy as np

        from kstore_cli.spark.avro_columns import PADDING, decode_rows
    except ImportError:
        return None
    n = len(column)
    type_ = decoding.type_of(side)[0]
    offsets = np.frombuffer(column.buffers()[1], np.int32)[column.offset:column.offset + n + 1].astype(np.int64)
    data = np.frombuffer(column.buffers()[2], np.uint8) if column.buffers()[2] is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    valid = ~column.is_null().to_numpy(zero_copy_only=False)
    padded = np.concatenate([data, np.zeros(PADDING, np.uint8)])
    header = valid & (ends - starts >= HEADER_SIZE) & (padded[np.minimum(starts, len(data))] == 0)
    ids = np.zeros(n, np.int64)
    for k in range(1, 5):
        ids = (ids << 8) | padded[np.minimum(starts + k, len(data))]
    ids = np.where(ids >= 1 << 31, ids - (1 << 32), ids)
    rows_done: List[Any] = []
    arrays: List[pa.Array] = []
    slow = valid.copy()
    present = ids[header]
    one = len(present) and present.min() == present.max()
    for schema_id in ([int(present[0])] if one else np.unique(present).tolist()):
        program = _program(decoding, side, schema_id, type_)
        if program is None:
            continue
        rows = np.nonzero(header & (ids == schema_id))[0]
        array, bad = decode_rows(program, padded, starts[rows] + HEADER_SIZE, ends[rows])
        good = ~bad
        rows_done.append(rows[good])
        arrays.append(array.filter(pa.array(good)))
        slow[rows[good]] = False
    slow_rows = np.nonzero(slow)[0]
    if len(slow_rows):
        values = decoding._avro_column(side, [column[int(i)].as_py() for i in slow_rows], local := {})
        failed.update({int(slow_rows[i]): why for i, why in local.items()})
        rows_done.append(slow_rows)
        arrays.append(decoding.to_array(side, values, failed, rows=[int(i) for i in slow_rows]))
    nulls = np.nonzero(~valid)[0]
    rows_done.append(nulls)
    arrays.append(pa.nulls(len(nulls), type_))
    order = np.concatenate(rows_done)
    joined = pa.concat_arrays([a.cast(type_) if a.type != type_ else a for a in arrays if len(a)] or
                              [pa.nulls(0, type_)])
    if not len(order) or (order[1:] > order[:-1]).all():
        return joined  # rows already in order (one writer id, or ids in runs, no slow rows)
    inverse = np.empty(n, np.int64)
    inverse[order] = np.arange(n)
    return joined.take(pa.array(inverse))


def _program(decoding: Any, side: Any, schema_id: int, type_: pa.DataType) -> Any:
    """The columnar program of a writer id (cached per side and id), None when fastavro must decode it."""
    cache = decoding.__dict__.setdefault("_programs", {})
    key = (side.name, schema_id)
    if key not in cache:
        cache[key] = None
        from kstore_cli.cluster.schema_decoders import Undecodable, dependencies
        from kstore_cli.spark.avro_arrow import named_types
        from kstore_cli.spark.avro_columns import compile_program

        sv = decoding.store.by_id(schema_id) if decoding.store is not None else None
        if sv is not None and TYPE_FORMATS.get(sv.schema_type) == "avro":
            try:
                named: Dict[str, Any] = {}
                for dep in dependencies(decoding.store, sv):
                    named.update(named_types(json.loads(dep.schema)))
                writer = json.loads(sv.schema)
                reader = None if writer == side.reader else side.reader
                program = compile_program(writer, reader, named, side.named)
                cache[key] = program if program is not None and program.out_type == type_ else None
            except (Undecodable, ValueError, KeyError, TypeError):
                cache[key] = None
    return cache[key]
