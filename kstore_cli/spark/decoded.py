"""spark-export's decoded key and value columns (``--key-format/--value-format``) and its dead letters.

A step on a task's Arrow record batches (Spark's Kafka-source schema, topic and partition still in them): the
``key``/``value`` binary column replaced by its decoded, typed column, and every record that does not decode
taken out into the dead letters (``_kstore_dead_letters/`` beside the output's files: topic, partition, offset,
timestamp, the raw key and value, which side, the reason): never dropped, never a stop.

Column types per format: ``avro``: the reader schema's Arrow type (kstore_cli.spark.avro_arrow; a record is a
struct column), each value the writer schema's datum (by the id in its header) resolved against the reader
schema, as KafkaAvroDeserializer with a reader schema does; ``json-schema``: the payload's JSON text as a string
column, after validation against the writer schema (JSON Schema has no one-to-one Spark type: a JSON string that
``from_json`` or ``get_json_object`` reads); ``protobuf``: the message in the proto3 JSON mapping (see
kstore_cli.cluster.schema_decoders) as a JSON string column; ``json``: JSON text checked, kept as a string
column; ``string``: UTF-8 text; ``binary``: the bytes as today. ``auto`` takes the type of the topic's subject
(``<topic>-key``/``<topic>-value``, TopicNameStrategy); a topic without one keeps its bytes.

The reader schema: ``--reader-schema FILE|SUBJECT`` (an ``.avsc`` file or a subject's latest live version), else
the latest live version of ``<topic>-value`` (``<topic>-key`` for keys); all selected topics must share it (a
column has one type). The :class:`Decoding` travels to the executors pickled with the job: the schema store's
versions and the reader schemas, no registry; parsed schemas and message classes are rebuilt there, cached by id.

Avro columns go through the columnar decoder first (kstore_cli.spark.avro_fast: numpy, about 10x fastavro's
per-record speed); rows and schemas it does not take are decoded here, per record, with fastavro.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa

from kstore_cli.cluster.schema_decoders import Undecodable
from kstore_cli.cluster.wire_format import HEADER_SIZE, MAGIC_BYTE, TYPE_FORMATS, WireFormatDecoder
from kstore_cli.spark.avro_arrow import avro_arrow_type, named_types

#: --key-format/--value-format of spark-export.
FORMATS = ("auto", "avro", "json-schema", "protobuf", "json", "string", "binary")
#: Where the dead letters go, under the output.
DEAD_LETTERS_DIR = "_kstore_dead_letters"
DEAD_LETTER_SCHEMA = pa.schema([
    pa.field("topic", pa.string()), pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("key", pa.binary()),
    pa.field("value", pa.binary()), pa.field("side", pa.string()), pa.field("reason", pa.string()),
])
_STRING_KINDS = ("json-schema", "protobuf", "json", "string")


class Side:
    """How one column (key or value) is decoded: its format and, for avro, the reader schema (JSON form and the
    named types of its references)."""

    def __init__(self, name: str, kind: str, reader: Any = None, named: Optional[Dict[str, Any]] = None,
                 reader_text: Optional[str] = None) -> None:
        self.name = name
        self.kind = kind
        self.reader = reader
        self.named = named or {}
        self.reader_text = reader_text

    def arrow_type(self) -> Tuple[pa.DataType, Any]:
        if self.kind == "avro":
            return avro_arrow_type(self.reader, self.named)
        return (pa.string(), None) if self.kind in _STRING_KINDS else (pa.binary(), None)


class Decoding:
    """The decoding step (pickled to executors; caches rebuilt there)."""

    def __init__(self, store: Any, key: Side, value: Side) -> None:
        self.store = store
        self.sides = (key, value)
        self._reset()

    def _reset(self) -> None:
        self._wire: Optional[WireFormatDecoder] = None
        self._types: Dict[str, Tuple[pa.DataType, Any]] = {}
        self._avro: Dict[Tuple[str, int], Tuple[Any, Any]] = {}
        self._programs: Dict[Tuple[str, int], Any] = {}  # kstore_cli.spark.avro_fast

    def __getstate__(self) -> dict:
        return {"store": self.store, "sides": self.sides}  # parsed schemas and programs rebuilt where used

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def type_of(self, side: Side) -> Tuple[pa.DataType, Any]:
        if side.name not in self._types:
            self._types[side.name] = side.arrow_type()
        return self._types[side.name]

    def schema(self, base: pa.Schema) -> pa.Schema:
        """`base` (the export's Arrow schema) with the key and value columns of their decoded types."""
        for side in self.sides:
            i = base.get_field_index(side.name)
            base = base.set(i, pa.field(side.name, self.type_of(side)[0]))
        return base

    def apply(self, batch: pa.RecordBatch) -> Tuple[pa.RecordBatch, Optional[pa.RecordBatch]]:
        """The batch with decoded columns, and the records that did not decode (None when all did)."""
        failed: Dict[int, Tuple[str, str]] = {}
        arrays = {side.name: self._decode_side(side, batch.column(side.name), failed)
                  for side in self.sides if side.kind != "binary"}
        dead = None
        if failed:
            dead = _dead_letters(batch, failed)
            keep = pa.array([i not in failed for i in range(batch.num_rows)])
            batch = batch.filter(keep)
            arrays = {name: array.filter(keep) for name, array in arrays.items()}
        for name, array in arrays.items():
            batch = batch.set_column(batch.schema.get_field_index(name), pa.field(name, array.type), array)
        return batch, dead

    def _decode_side(self, side: Side, column: pa.Array, failed: Dict[int, Tuple[str, str]]) -> pa.Array:
        if side.kind == "avro":
            from kstore_cli.spark.avro_fast import decode_avro_column

            fast = decode_avro_column(self, side, column, failed)
            if fast is not None:
                return fast
        return self.to_array(side, self._decode_column(side, column.to_pylist(), failed), failed)

    def to_array(self, side: Side, values: list, failed: Dict[int, Tuple[str, str]],
                 rows: Optional[Sequence[int]] = None) -> pa.Array:
        """Decoded values as the side's Arrow array; a value that does not fit its type (an Avro int past 32
        bits...) is a failed row (`rows`: the row of each value, when not 0..n-1)."""
        type_, fix = self.type_of(side)
        fixed = values if fix is None else [fix(v) for v in values]
        try:
            return pa.array(fixed, type_)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            pass
        out = []
        for i, value in enumerate(fixed):
            try:
                pa.array([value], type_)
                out.append(value)
            except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
                failed.setdefault(i if rows is None else rows[i],
                                  (side.name, f"the decoded value does not fit the column type {type_}: {exc}"))
                out.append(None)
        return pa.array(out, type_)

    def _decode_column(self, side: Side, raw: List[Optional[bytes]], failed: Dict[int, Tuple[str, str]]) -> list:
        if side.kind == "avro":
            return self._avro_column(side, raw, failed)
        out: list = []
        for i, data in enumerate(raw):
            if data is None:
                out.append(None)
                continue
            try:
                out.append(self._decode_text(side.kind, data))
            except Undecodable as exc:
                failed.setdefault(i, (side.name, str(exc)))
                out.append(None)
        return out

    def _decode_text(self, kind: str, data: bytes) -> str:
        """A string column's value: the UTF-8 text, the JSON text, or the decoded wire-format payload as JSON."""
        if kind in ("string", "json"):
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise Undecodable(f"not UTF-8 (byte {exc.start})") from None
            if kind == "json":
                try:
                    json.loads(text)
                except ValueError as exc:
                    raise Undecodable(f"not JSON text ({exc})") from None
            return text
        value = self.wire().schema_payload(data, kind)
        if kind == "json-schema":
            return data[HEADER_SIZE:].decode("utf-8")  # validated: the producer's JSON text as written
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def wire(self) -> WireFormatDecoder:
        if self._wire is None:
            self._wire = WireFormatDecoder(self.store, "binary", "binary")
        return self._wire

    def _avro_column(self, side: Side, raw: List[Optional[bytes]], failed: Dict[int, Tuple[str, str]]) -> list:
        """Each value's datum: the writer schema by id resolved against the reader schema (fastavro, parsed
        schemas cached by id)."""
        from fastavro import schemaless_reader

        out: list = []
        schemas = self._avro
        for i, data in enumerate(raw):
            if data is None:
                out.append(None)
                continue
            try:
                if len(data) < HEADER_SIZE or data[0] != MAGIC_BYTE:
                    self.wire()._schema_of(data)  # raises with the reason
                pair = schemas.get((side.name, int.from_bytes(data[1:5], "big", signed=True)))
                if pair is None:
                    pair = self._avro_pair(side, data)
                stream = io.BytesIO(data)
                stream.seek(HEADER_SIZE)
                out.append(schemaless_reader(stream, pair[0], pair[1]))
            except Undecodable as exc:
                failed.setdefault(i, (side.name, str(exc)))
                out.append(None)
            except EOFError:
                failed.setdefault(i, (side.name, f"the Avro payload of schema id {_id(data)} is cut short"))
                out.append(None)
            except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on bad data or resolution
                failed.setdefault(i, (side.name, _avro_reason(data, exc)))
                out.append(None)
        return out

    def _avro_pair(self, side: Side, data: bytes) -> Tuple[Any, Any]:
        """(parsed writer schema, parsed reader schema or None when they are the same text)."""
        import fastavro

        wire = self.wire()
        schema_id, sv = wire._schema_of(data)
        if TYPE_FORMATS.get(sv.schema_type) != "avro":
            raise Undecodable(f"schema id {schema_id} is a {sv.schema_type} schema, not AVRO")
        writer = wire._parse(sv)
        reader = None
        if json.loads(sv.schema) != side.reader:
            try:
                named: Dict[str, Any] = {}
                for schema in side.named.values():
                    fastavro.parse_schema(schema, named_schemas=named)
                reader = fastavro.parse_schema(side.reader, named_schemas=named)
            except Exception as exc:  # noqa: BLE001
                raise Undecodable(f"the reader schema does not parse: {exc}") from None
        self._avro[(side.name, schema_id)] = (writer, reader)
        return writer, reader


def _id(data: bytes) -> int:
    return int.from_bytes(data[1:5], "big", signed=True)


def _avro_reason(data: bytes, exc: Exception) -> str:
    if type(exc).__name__ == "SchemaResolutionError":
        return f"the writer schema id {_id(data)} does not resolve against the reader schema: {exc}"
    return f"the payload does not decode with schema id {_id(data)}: {exc}"


def _dead_letters(batch: pa.RecordBatch, failed: Dict[int, Tuple[str, str]]) -> pa.RecordBatch:
    rows = sorted(failed)
    taken = batch.take(pa.array(rows, pa.int64()))
    return pa.RecordBatch.from_arrays([
        taken.column("topic"), taken.column("partition"), taken.column("offset"), taken.column("timestamp"),
        taken.column("key").cast(pa.binary()), taken.column("value").cast(pa.binary()),
        pa.array([failed[i][0] for i in rows], pa.string()), pa.array([failed[i][1] for i in rows], pa.string()),
    ], schema=DEAD_LETTER_SCHEMA)


class DeadLetterFile:
    """A task's dead letters: one Parquet file under the job's staging dir, moved into place with the job's
    other files (an entry with ``rows`` 0 and ``dead_letters``), counted by reason kind."""

    def __init__(self, decoding: Decoding, fs: Any, staging: str, name: str, compression: Optional[str]) -> None:
        self.decoding = decoding
        self.fs = fs
        self.staging = staging
        self.final = f"{DEAD_LETTERS_DIR}/{name}.parquet"
        self.compression = compression
        self.writer = None
        self.rows = 0

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch decoded; its undecodable records written here."""
        batch, dead = self.decoding.apply(batch)
        if dead is not None:
            import pyarrow.parquet as pq

            if self.writer is None:
                self.fs.create_dir(f"{self.staging}/{DEAD_LETTERS_DIR}", recursive=True)
                self.writer = pq.ParquetWriter(self._hidden(), DEAD_LETTER_SCHEMA, filesystem=self.fs,
                                               compression=self.compression)
            self.writer.write_batch(dead)
            self.rows += dead.num_rows
        return batch

    def _hidden(self) -> str:
        return f"{self.staging}/{DEAD_LETTERS_DIR}/.{os.path.basename(self.final)}.inprogress"

    def commit(self) -> List[Dict]:
        if self.writer is None:
            return []
        self.writer.close()
        self.writer = None
        staged = f"{self.staging}/{self.final}"
        self.fs.move(self._hidden(), staged)
        return [{"path": self.final, "rows": 0, "dead_letters": self.rows, "bytes": self.fs.get_file_info(staged).size}]

    def abort(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
                self.fs.delete_file(self._hidden())
            except OSError:
                pass
            self.writer = None


def build_decoding(paths: Sequence[str], topics: Sequence[str], key_format: str = "binary",
                   value_format: str = "binary", *, schemas_from: Optional[str] = None,
                   reader_schema: Optional[str] = None) -> Optional[Decoding]:
    """The decoding step of an export of `topics` (None for binary keys and values: today's output). Reads the
    registry's store topic (`schemas_from`, else the ``_schemas`` partition among `paths`); UsageError when a
    column cannot have one type."""
    from kstore_cli.errors import UsageError

    for option, fmt in (("--key-format", key_format), ("--value-format", value_format)):
        if fmt not in FORMATS:
            raise UsageError(f"{option} must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if key_format == value_format == "binary":
        if reader_schema is not None:
            raise UsageError("--reader-schema needs --value-format avro or auto")
        return None
    store = None
    if {"avro", "json-schema", "protobuf", "auto"} & {key_format, value_format}:
        store = _load_store(paths, schemas_from)
    sides = [_side(store, "key", key_format, topics, None),
             _side(store, "value", value_format, topics, reader_schema)]
    decoding = Decoding(store, *sides)
    for side in sides:
        try:
            decoding.type_of(side)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"the {side.name} reader schema has no Arrow type ({exc})") from None
    return decoding


def _load_store(paths: Sequence[str], schemas_from: Optional[str]) -> Any:
    from kstore_cli.cluster.schema_registry import load_schema_store
    from kstore_cli.errors import UsageError
    from kstore_cli.log.logdir import is_partition_dir

    if schemas_from is not None and is_partition_dir(os.path.abspath(schemas_from)):
        return load_schema_store([], schemas_from=schemas_from)
    where = [schemas_from] if schemas_from else [p for p in paths if "://" not in p]
    try:
        return load_schema_store(where)
    except UsageError as exc:
        if not exc.message.startswith("no _schemas-0 partition"):
            raise
        # spark-export's own hint (it has --schemas-from, not the other commands' --schemas-topic)
        raise UsageError(f"no _schemas-0 partition under {', '.join(where)}: name the Schema Registry's store "
                         "partition with --schemas-from PARTITION_DIR") from None


def _side(store: Any, name: str, fmt: str, topics: Sequence[str], reader_schema: Optional[str]) -> Side:
    """The column's format (auto resolved by the topics' subjects) and, for avro, its reader schema."""
    from kstore_cli.errors import UsageError

    subjects = {f"{t}-{name}" for t in topics}
    latest = {s: store.latest(s) for s in sorted(subjects)} if store is not None else {}
    if fmt == "auto":
        kinds = {TYPE_FORMATS.get(sv.schema_type) for sv in latest.values() if sv is not None}
        if len(kinds) > 1:
            raise UsageError(f"--{name}-format auto: the subjects {', '.join(sorted(subjects))} are of different "
                             "schema types; export their topics apart (--topics)")
        fmt = kinds.pop() if kinds else "binary"
    if fmt != "avro":
        if reader_schema is not None and name == "value":
            raise UsageError("--reader-schema needs Avro values (--value-format avro, or auto on an Avro subject)")
        return Side(name, fmt)
    if reader_schema is not None:
        return _reader_side(store, name, reader_schema)
    texts = {sv.schema for sv in latest.values() if sv is not None}
    if len(texts) != 1:
        why = ("no live version of " + " or ".join(sorted(subjects)) if not texts
               else "the subjects " + ", ".join(sorted(subjects)) + " have different latest schemas")
        raise UsageError(f"--{name}-format avro needs one reader schema: {why} in the schema registry's store; "
                         "name one with --reader-schema FILE|SUBJECT (values) or export the topics apart (--topics)")
    sv = next(v for v in latest.values() if v is not None)
    return _avro_side(store, name, sv)


def _avro_side(store: Any, name: str, sv: Any) -> Side:
    from kstore_cli.cluster.schema_decoders import dependencies

    named: Dict[str, Any] = {}
    for dep in dependencies(store, sv):
        named.update(named_types(json.loads(dep.schema)))
    return Side(name, "avro", json.loads(sv.schema), named, sv.schema)


def _reader_side(store: Any, name: str, reader_schema: str) -> Side:
    """--reader-schema: an .avsc file, else a subject (its latest live version)."""
    from kstore_cli.errors import UsageError

    if os.path.isfile(reader_schema):
        try:
            with open(reader_schema, encoding="utf-8") as f:
                text = f.read()
            return Side(name, "avro", json.loads(text), {}, text)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--reader-schema {reader_schema}: not an Avro schema file ({exc})") from None
    sv = store.latest(reader_schema) if store is not None else None
    if sv is None or TYPE_FORMATS.get(sv.schema_type) != "avro":
        raise UsageError(f"--reader-schema {reader_schema}: neither a file nor a subject with a live Avro version "
                         "in the schema registry's store")
    return _avro_side(store, name, sv)


def dead_letter_count(written: List[Dict]) -> int:
    """The dead letters the tasks wrote (their file entries)."""
    return sum(w.get("dead_letters", 0) for w in written)


def source_decoding(options: Dict[str, str]) -> Optional[Decoding]:
    """The decoding step of ``spark.read.format("kstore")`` from its options ``keyFormat``, ``valueFormat``,
    ``schemasFrom``, ``readerSchema`` (spark-export's options; None when keys and values stay binary)."""
    from kstore_cli.spark.options import ReadOptions
    from kstore_cli.spark.plan import plan_read

    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    key_format, value_format = opts.get("keyformat", "binary"), opts.get("valueformat", "binary")
    if key_format == value_format == "binary":
        return None
    read = ReadOptions(options)
    topics = sorted({s.topic for s in plan_read(read).scans})
    return build_decoding(read.paths, topics, key_format, value_format, schemas_from=opts.get("schemasfrom"),
                          reader_schema=opts.get("readerschema"))


def spark_schema(decoding: Decoding, base: pa.Schema) -> Any:
    """The Spark schema (StructType) of the decoded rows."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(decoding.schema(base))


def decoded_batches(decoding: Decoding, batches: Any, dead_letter_path: Optional[str]) -> Any:
    """The data source's batches decoded. Records that do not decode go to Parquet files under
    `dead_letter_path` (the ``deadLetterPath`` option; one file per batch, named by its first dead letter's
    topic, partition and offset, so that a query scanning twice or a retried task rewrites the same file);
    without it the read fails with the first one's reason, so that none is dropped silently."""
    import uuid

    from kstore_cli.errors import CorruptDataError

    for batch in batches:
        batch, dead = decoding.apply(batch)
        if dead is not None:
            if dead_letter_path is None:
                first = dead.slice(0, 1).to_pylist()[0]
                raise CorruptDataError(
                    f"{first['topic']}-{first['partition']} offset {first['offset']}: the {first['side']} does not "
                    f"decode: {first['reason']} ({dead.num_rows} records of this batch; the deadLetterPath option "
                    "keeps them instead)")
            import pyarrow.parquet as pq

            os.makedirs(dead_letter_path, exist_ok=True)
            first = dead.slice(0, 1).to_pylist()[0]
            name = f"part-{first['topic']}-{first['partition']}-{first['offset']}.parquet".replace("/", "%2F")
            hidden = os.path.join(dead_letter_path, f".{name}.{uuid.uuid4().hex}.inprogress")
            pq.write_table(pa.Table.from_batches([dead]), hidden)
            os.replace(hidden, os.path.join(dead_letter_path, name))
        yield batch
