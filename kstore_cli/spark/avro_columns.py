"""Avro payloads of one writer schema decoded column by column with numpy, straight from an Arrow binary
column's buffers: the same values fastavro gives (kstore_cli.spark.decoded's per-record path), without a Python
object per record.

Every row of a batch advances through the writer schema's fields together: a varint, a length-prefixed string,
a double is read at each row's position at once, and the positions move on. Supported: records (nested too),
null, boolean, int, long, float, double, string, bytes, enum, ``[null, T]`` unions, and the logical types date,
time-*, timestamp-*, local-timestamp-*, uuid and decimal on bytes (up to 8 bytes of unscaled value). A schema with
anything else (arrays, maps, fixed, other unions), and a resolution other than fields added (with a default) or
removed, is left to fastavro: :func:`compile_program` returns None. A row that overruns its payload, holds a bad
varint, union branch, enum index, an over-long decimal or invalid UTF-8 is marked, and goes to fastavro too (which
decodes it or says why not): rows are never guessed.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from kstore_cli.record import decode
from kstore_cli.spark.avro_arrow import avro_arrow_type

_PLAIN = {"null", "boolean", "int", "long", "float", "double", "string", "bytes"}
#: Zero bytes after the data, so that a read past a payload's end stays in the buffer (such a row is bad).
PADDING = 16
#: The values of a logical type that fastavro (the per-record path) turns into a Python date, time or
#: datetime: 0001-01-01 to 9999-12-31, a time of day. A value outside is a bad row: fastavro decodes it its
#: own way or says why not (a negative time-millis it wraps; a year 10000 it refuses).
_IN_RANGE = {"date": (-719162, 2932896), "time-millis": (0, 86_400_000 - 1), "time-micros": (0, 86_400_000_000 - 1),
             "timestamp-millis": (-62135596800000, 253402300799999),
             "timestamp-micros": (-62135596800000000, 253402300799999999)}
_IN_RANGE["local-timestamp-millis"] = _IN_RANGE["timestamp-millis"]
_IN_RANGE["local-timestamp-micros"] = _IN_RANGE["timestamp-micros"]
_LOGICAL_KINDS = {"date": "int", "time-millis": "int", "time-micros": "long", "timestamp-millis": "long",
                  "timestamp-micros": "long", "local-timestamp-millis": "long", "local-timestamp-micros": "long",
                  "uuid": "string"}


def _node(schema: Any, named: Dict[str, Any], namespace: Optional[str]) -> Optional[tuple]:
    """A writer schema as a decode tree: (kind, details); None when not supported."""
    if isinstance(schema, str):
        if schema in _PLAIN:
            return (schema,)
        full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
        target = named.get(full, named.get(schema))
        return None if target is None else _node(target, named, namespace)
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema:
            return None
        inner = _node(schema[1 - schema.index("null")], named, namespace)
        return None if inner is None else ("union", 1 - schema.index("null"), inner)
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "decimal" and kind == "bytes":
        return ("decimal", int(schema["precision"]), int(schema.get("scale", 0)))
    if logical in _LOGICAL_KINDS and kind == _LOGICAL_KINDS[logical]:
        return (logical,)
    if kind == "enum":
        named[_name(schema, namespace)] = schema
        return ("enum", list(schema["symbols"]))
    if kind in ("record", "error"):
        full = _name(schema, namespace)
        named[full] = schema
        ns = full.rsplit(".", 1)[0] if "." in full else None
        fields = []
        for f in schema["fields"]:
            child = _node(f["type"], named, ns)
            if child is None:
                return None
            fields.append((f["name"], child))
        return ("record", fields)
    if isinstance(kind, (str, list, dict)) and kind not in ("array", "map", "fixed"):
        return _node(kind, named, namespace)
    return None


def _name(schema: dict, namespace: Optional[str]) -> str:
    name = schema["name"]
    if "." in name or not schema.get("namespace", namespace):
        return name
    return f"{schema.get('namespace', namespace)}.{name}"


class Program:
    """How to decode one writer schema's payloads into the reader schema's Arrow type."""

    def __init__(self, tree: tuple, out_type: pa.DataType, keep: List[Optional[int]],
                 defaults: List[Tuple[int, pa.Array]]) -> None:
        self.tree = tree
        self.out_type = out_type
        self.keep = keep          # per writer field: its index in the reader's struct, or None (dropped)
        self.defaults = defaults  # reader fields the writer lacks: (index, one-value array of the default)


def compile_program(writer: Any, reader: Any, named_writer: Dict[str, Any],
                    named_reader: Dict[str, Any]) -> Optional[Program]:
    """The columnar program for `writer` read as `reader` (None: same as the writer), or None (fastavro)."""
    try:
        tree = _node(writer, dict(named_writer), None)
        out_type = avro_arrow_type(reader if reader is not None else writer,
                                   named_reader if reader is not None else named_writer)[0]
    except (KeyError, TypeError, ValueError):
        return None
    if tree is None or tree[0] != "record" or not pa.types.is_struct(out_type):
        return None
    wfields = [name for name, _ in tree[1]]
    if reader is None:
        return Program(tree, out_type, list(range(len(wfields))), [])
    if not isinstance(reader, dict) or reader.get("type") != "record" or reader.get("name") != writer.get("name"):
        return None
    rfields = reader["fields"]
    wtypes = {f["name"]: f["type"] for f in writer["fields"]}
    rnames = [f["name"] for f in rfields]
    defaults = []
    for i, f in enumerate(rfields):
        if f.get("aliases"):
            return None
        if f["name"] in wtypes:
            if json.dumps(wtypes[f["name"]], sort_keys=True) != json.dumps(f["type"], sort_keys=True):
                return None  # a promotion or a changed type: fastavro resolves it
        elif "default" not in f:
            return None
        else:
            try:
                defaults.append((i, pa.array([f["default"]], out_type.field(i).type)))
            except (pa.ArrowException, TypeError, ValueError):
                return None
    keep = [rnames.index(n) if n in rnames else None for n in wfields]
    return Program(tree, out_type, keep, defaults)


class _Cursor:
    """The numpy reader: every row advances through the writer schema's fields together."""

    def __init__(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.buf = data  # ends with at least 16 zero bytes of padding (PADDING)
        self.pos = starts.astype(np.int64)
        self.end = ends.astype(np.int64)
        self.bad = np.zeros(len(starts), bool)
        # no position goes past here: a read of up to 10 bytes at any position stays in the buffer (a row moved
        # this far has overrun its payload and is bad)
        self._limit = len(data) - PADDING

    def gather(self, width: int) -> np.ndarray:
        """`width` (<= PADDING) bytes at each row's position (past the end: the padding's zeros; such a row is bad)."""
        return np.lib.stride_tricks.sliding_window_view(self.buf, width)[self.pos]

    def advance(self, active: np.ndarray, by: np.ndarray) -> None:
        new = self.pos + np.minimum(by, self._limit + 1)  # a length near 2**63 must not wrap the position around
        self.bad |= active & (new > self.end)
        self.pos = np.minimum(np.where(active, new, self.pos), self._limit)

    def varint(self, active: np.ndarray) -> np.ndarray:
        """A zigzag varint at each row (Avro int and long), byte by byte over the rows still continuing."""
        first = self.buf[self.pos]
        if not (first & 0x80).any():  # one byte at every row (union branches, enums, short lengths): no loop
            self.advance(active, active)
            value = first.astype(np.int64)
            return (value >> 1) ^ -(value & 1)
        b = first.astype(np.uint64)
        raw = b & np.uint64(0x7F)
        length = np.ones(len(b), np.int64)
        going = np.nonzero(b & np.uint64(0x80))[0]
        for k in range(1, 10):
            if not len(going):
                break
            bk = self.buf[self.pos[going] + k].astype(np.uint64)
            raw[going] |= (bk & np.uint64(0x7F)) << np.uint64(7 * k)
            length[going] += 1
            going = going[(bk & np.uint64(0x80)) != 0]
        if len(going):
            self.bad[going] |= active[going]
        self.advance(active, length)
        return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)

    def long(self, active: np.ndarray) -> np.ndarray:
        return self.varint(active)

    def floats(self, width: int, active: np.ndarray) -> np.ndarray:
        raw = np.ascontiguousarray(self.gather(width)).view("<f4" if width == 4 else "<f8").ravel()
        self.advance(active, np.full(len(active), width))
        return raw

    def byte(self, active: np.ndarray) -> np.ndarray:
        raw = self.gather(1).ravel()
        self.advance(active, active)
        return raw

    def present(self, active: np.ndarray, node: tuple) -> np.ndarray:
        """Where a ``[null, T]`` union takes T (a branch other than 0 or 1 makes the row bad)."""
        branch = self.varint(active)
        self.bad |= active & (branch != 0) & (branch != 1)
        return branch == node[1]

    def binary(self, active: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Each row's (start, length) of a length-prefixed string or bytes."""
        length = self.varint(active)
        self.bad |= active & (length < 0)
        start = self.pos.copy()
        take = np.where(active & ~self.bad, np.maximum(length, 0), 0)
        self.advance(active, take)
        return start, take

    def decimal(self, active: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Each row's (value, size) of a decimal's bytes: the value sign-extended where the size is 1 to 8."""
        length = self.varint(active)
        size = np.where(active & ~self.bad & (length >= 0) & (length <= 8), length, 0)
        # The 8 bytes at each row as one big-endian signed long: shifting it right by the bytes past the value's
        # size leaves the two's-complement value, sign-extended (an arithmetic shift); a size 0 is 0.
        wide = np.ascontiguousarray(self.gather(8)).view(">i8").ravel().astype(np.int64)
        low = np.where(size > 0, wide >> ((8 - size) * 8).clip(0, 63), 0)
        self.advance(active, np.where(length > 8, np.maximum(length, 0), size))
        return low, length


class _Native:
    """The native reader (``kstore_cli.spark._avro_c``): every row read through the whole writer schema in C,
    each field's column handed out in the order :func:`_read` asks for them (the schema's field order)."""

    def __init__(self, native: Any, program: Program, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        ops, kinds = _native_ops(program)
        n = len(starts)
        self.end = ends.astype(np.int64)
        self.buf = data
        self.bad = np.zeros(n, bool)
        self._outs = [np.zeros(2 * n if k in (_OP_BYTES, _OP_DECIMAL) else n, _NATIVE_DTYPES[k]) for k in kinds]
        native.decode_rows(ops, data, starts.astype(np.int64), self.end, tuple(self._outs), self.bad.view(np.uint8))
        self._next = iter(self._outs)

    def long(self, active: np.ndarray) -> np.ndarray:
        return next(self._next)

    def floats(self, width: int, active: np.ndarray) -> np.ndarray:
        return next(self._next)

    def byte(self, active: np.ndarray) -> np.ndarray:
        return next(self._next)

    def present(self, active: np.ndarray, node: tuple) -> np.ndarray:
        return next(self._next).view(bool)

    def binary(self, active: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        pairs = next(self._next)
        return pairs[0::2], np.where(active & ~self.bad, pairs[1::2], 0)

    def decimal(self, active: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        pairs = next(self._next)
        return pairs[0::2], pairs[1::2]


_OP_NULL, _OP_BOOL, _OP_LONG, _OP_FLOAT, _OP_DOUBLE, _OP_BYTES, _OP_DECIMAL, _OP_UNION = range(8)
_NATIVE_DTYPES = {_OP_BOOL: np.uint8, _OP_LONG: np.int64, _OP_FLOAT: np.float32, _OP_DOUBLE: np.float64,
                  _OP_BYTES: np.int64, _OP_DECIMAL: np.int64, _OP_UNION: np.uint8}
_LEAF_OPS = {"null": _OP_NULL, "boolean": _OP_BOOL, "float": _OP_FLOAT, "double": _OP_DOUBLE, "string": _OP_BYTES,
             "bytes": _OP_BYTES, "uuid": _OP_BYTES, "decimal": _OP_DECIMAL}


def _native_ops(program: Program) -> Tuple[bytes, List[int]]:
    """The program's writer tree as the native reader's ops (int32 quadruples: op, output, a, b) and each
    output's op (cached on the program)."""
    cached = getattr(program, "_native", None)
    if cached is not None:
        return cached
    ops: List[List[int]] = []
    kinds: List[int] = []

    def emit(node: tuple) -> None:
        kind = node[0]
        if kind == "record":
            for _name, child in node[1]:
                emit(child)
            return
        op = _LEAF_OPS.get(kind, _OP_UNION if kind == "union" else _OP_LONG)
        at = len(ops)
        ops.append([op, len(kinds) if op != _OP_NULL else 0, 1 - node[1] if op == _OP_UNION else 0, 0])
        if op != _OP_NULL:
            kinds.append(op)
        if op == _OP_UNION:
            emit(node[2])
            ops[at][3] = len(ops) - at - 1  # the other branch's ops, skipped where the null one is taken

    emit(program.tree)
    program._native = (np.array(ops, np.int32).tobytes(), kinds)  # type: ignore[attr-defined]
    return program._native  # type: ignore[attr-defined]


def _native_module() -> Any:
    """The native reader's module, or None: without it, or with ``KSTORE_DECODER=python`` (the numpy twin)."""
    if decode.BACKEND != "native":
        return None
    try:  # by name: an extension module, not a source file the import graph (grimp) could place
        return importlib.import_module("kstore_cli.spark._avro_c")
    except ImportError:
        return None


def decode_rows(program: Program, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Tuple[pa.Array, np.ndarray]:
    """The rows' payloads (``data[starts:ends]``; `data` followed by PADDING zero bytes) as an array of the
    program's type, and which rows are bad (their values are null and must be decoded by fastavro)."""
    native = _native_module()
    cur = _Native(native, program, data, starts, ends) if native is not None else _Cursor(data, starts, ends)
    n = len(starts)
    active = np.ones(n, bool)
    children = [_read(cur, child, active) for _name, child in program.tree[1]]
    out: List[Optional[pa.Array]] = [None] * len(program.out_type)
    for index, child in zip(program.keep, children):
        if index is not None:
            out[index] = child
    for index, one in program.defaults:
        out[index] = pa.repeat(one[0], n)
    arrays = [a.cast(program.out_type.field(i).type) if a.type != program.out_type.field(i).type else a
              for i, a in enumerate(out)]
    mask = pa.array(cur.bad)
    return pa.StructArray.from_arrays(arrays, fields=list(program.out_type), mask=mask), cur.bad


def _validity(valid: np.ndarray) -> Optional[pa.Buffer]:
    return None if valid.all() else pa.array(valid).buffers()[1]


def _read(cur: "_Cursor | _Native", node: tuple, active: np.ndarray) -> pa.Array:
    kind = node[0]
    n = len(active)
    if kind == "null":
        return pa.nulls(n)
    if kind == "union":
        # every array _read builds is null wherever its `active` is not set: here, where null is taken
        return _read(cur, node[2], active & cur.present(active, node))
    if kind == "record":
        fields = [(name, _read(cur, child, active)) for name, child in node[1]]
        return pa.StructArray.from_arrays([a for _, a in fields], [name for name, _ in fields],
                                          mask=pa.array(~active))
    if kind in ("string", "bytes", "uuid"):
        return _binary(cur, active, pa.binary() if kind == "bytes" else pa.string())
    if kind == "decimal":
        return _decimal(cur, active, node[1], node[2])
    return _fixed_width(cur, kind, active, node)


def _fixed_width(cur: "_Cursor | _Native", kind: str, active: np.ndarray, node: tuple) -> pa.Array:
    n = len(active)
    if kind in ("float", "double"):
        width = 4 if kind == "float" else 8
        raw = cur.floats(width, active)
        return pa.Array.from_buffers(pa.float32() if width == 4 else pa.float64(), n,
                                     [_validity(active), pa.py_buffer(raw)])
    if kind == "boolean":
        raw = cur.byte(active)
        cur.bad |= active & (raw > 1)
        return pa.array(raw.astype(bool), mask=~active)
    value = cur.long(active)
    if kind in _IN_RANGE:
        low, high = _IN_RANGE[kind]
        outside = (value < low) | (value > high)
        cur.bad |= active & outside
        value = np.where(outside, 0, value)
    if kind == "enum":
        symbols = node[1]
        cur.bad |= active & ((value < 0) | (value >= len(symbols)))
        index = pa.array(np.clip(value, 0, len(symbols) - 1).astype(np.int32), mask=~active)
        return pa.DictionaryArray.from_arrays(index, pa.array(symbols, pa.string())).cast(pa.string())
    if kind in ("int", "date", "time-millis"):
        cur.bad |= active & ((value < -(1 << 31)) | (value >= (1 << 31)))
        ints = pa.array(value.astype(np.int32), mask=~active)
        return ints.cast(pa.date32()) if kind == "date" else ints
    if kind in ("timestamp-millis", "local-timestamp-millis"):
        value = value * 1000  # microseconds, as the per-record path gives them (in range: no overflow)
    if kind.startswith("timestamp"):
        return pa.array(value, pa.timestamp("us", tz="UTC"), mask=~active)
    if kind.startswith("local-timestamp"):
        return pa.array(value, pa.timestamp("us"), mask=~active)
    return pa.array(value, pa.int64(), mask=~active)


def _binary(cur: "_Cursor | _Native", active: np.ndarray, type_: pa.DataType) -> pa.Array:
    start, take = cur.binary(active)
    take = np.where(cur.bad, 0, take)
    # Each row's bytes are data[start:start + take], the rows in buffer order: as offsets start, start + take of
    # one row after another they never go back, so the buffer itself is a binary array of 2n values (the
    # strings and the bytes between them), and Arrow takes every other one. A row with nothing to take starts
    # at its row's end, where the next row's bytes begin at the earliest.
    start = np.where(take > 0, start, cur.end)
    bounds = np.empty(2 * len(take) + 1, np.int64)
    bounds[0:-1:2] = start
    bounds[1::2] = start + take
    bounds[-1] = bounds[-2]
    bounds = np.maximum.accumulate(bounds)  # rows never decoded here keep their place without going back
    if bounds[-1] >= 1 << 31:
        raise OverflowError("more than 2 GiB of strings in one Arrow array")
    whole = pa.Array.from_buffers(pa.binary(), 2 * len(take), [None, pa.py_buffer(bounds.astype(np.int32)),
                                                               pa.py_buffer(cur.buf)])
    taken = whole.take(pa.array(np.arange(0, 2 * len(take), 2)))
    arr = pa.Array.from_buffers(type_, len(take), [_validity(active), *taken.buffers()[1:]])
    if type_ == pa.string():
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:  # invalid UTF-8 somewhere: those rows go to fastavro
            for i, text in enumerate(arr.cast(pa.binary()).to_pylist()):
                if text is not None and not _utf8(text):
                    cur.bad[i] = True
            arr = pa.array([None if b or not a else t for t, a, b in
                            zip(arr.cast(pa.binary()).to_pylist(), active, cur.bad)], pa.string())
    return arr


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _decimal(cur: "_Cursor | _Native", active: np.ndarray, precision: int, scale: int) -> pa.Array:
    low, length = cur.decimal(active)
    cur.bad |= active & ((length < 0) | (length > 8))
    low = np.where(active & ~cur.bad, low, 0)
    pairs = np.stack([low, np.where(low < 0, -1, 0).astype(np.int64)], axis=1).ravel()
    type_ = pa.decimal128(precision, scale) if precision <= 38 else None
    if type_ is None:
        cur.bad |= active
        return pa.nulls(len(active), pa.decimal256(precision, scale))
    return pa.Array.from_buffers(type_, len(active), [_validity(active), pa.py_buffer(pairs.tobytes())])
