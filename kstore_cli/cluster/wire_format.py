"""Keys and values in Confluent's wire format (a zero magic byte, the schema id as a 4-byte big-endian int,
the payload: AbstractKafkaSchemaSerDe), decoded with the schemas of a :class:`SchemaStore`, for ``--json``.

Formats: ``avro`` (KafkaAvroDeserializer: the writer schema by id, resolved against the reader schema, the
latest live version of the writer's subject, with fastavro), ``json-schema`` and ``protobuf``
(kstore_cli.cluster.schema_decoders: JSON validated against the writer schema; Protobuf messages by Confluent's
message indexes, shown with the proto3 JSON mapping), ``json`` (the bytes as JSON text), ``string`` (UTF-8),
``binary`` (base64, as without a format), ``auto`` (bytes of 5 or more starting with the magic byte 0 are taken
as the wire format, and the id's schema type chooses among avro, json-schema and protobuf; other bytes shown as
JSON when they are UTF-8 JSON text, else as a string when UTF-8 without control characters, else base64).
A part that does not decode keeps its bytes (base64) and the reason goes in the record's ``decodeError``:
never dropped.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import os
import re
import uuid
from typing import Any, Dict, Optional, Tuple

from kstore_cli.cluster.schema_decoders import JsonSchemaValidator, ProtobufSchema, Undecodable, dependencies
from kstore_cli.cluster.schema_registry import DEFAULT_TOPIC, SchemaStore, SchemaVersion, load_schema_store
from kstore_cli.errors import MissingDependencyError
from kstore_cli.log.logdir import is_partition_dir
from kstore_cli.parsers.decoded import RAW, JsonDecoded

FORMATS = ("auto", "avro", "json-schema", "protobuf", "json", "string", "binary")
#: Each schema type of the registry and the format that decodes it.
TYPE_FORMATS = {"AVRO": "avro", "JSON": "json-schema", "PROTOBUF": "protobuf"}
#: The wire format's magic byte and header size (AbstractKafkaSchemaSerDe.MAGIC_BYTE, idSize 4).
MAGIC_BYTE = 0
HEADER_SIZE = 5
#: Control characters (but tab, newline, carriage return): text holding one is shown as bytes by auto.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


_Undecodable = Undecodable

def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError:
        raise MissingDependencyError("decoding Avro needs fastavro: pip install 'kstore-cli[schemas]'") from None
    return fastavro


def jsonable(value: Any) -> Any:
    """A decoded Avro datum as a JSON value: bytes and fixed as base64, decimals as strings, times ISO-8601."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


class WireFormatDecoder:
    """A ``decode_json`` parser (dump-segment's and find's ``--json``) for --key-format/--value-format; counts
    the parts it could not decode in :attr:`undecodable`."""

    def __init__(self, store: Optional[SchemaStore], key_format: str = "binary", value_format: str = "auto") -> None:
        self.store = store
        self.formats = (key_format, value_format)
        #: What --json's "decoder" field says.
        self.name = f"key={key_format},value={value_format}"
        self.undecodable = 0
        self._parsed: Dict[int, Tuple[Any, Any]] = {}
        self._others: Dict[int, Any] = {}  # schema id -> JsonSchemaValidator or ProtobufSchema
        avro_ids = store is not None and any(sv.schema_type == "AVRO" for sv in store.versions.values())
        if "avro" in self.formats or ("auto" in self.formats and avro_ids):
            _fastavro()  # said once, before any record

    def decode_json(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> JsonDecoded:
        out, errors = [], []
        for part, data, fmt in (("key", key, self.formats[0]), ("value", value, self.formats[1])):
            if data is None:
                out.append(None)
                continue
            try:
                out.append(self._decode(bytes(data), fmt))
            except _Undecodable as exc:
                out.append(RAW)
                errors.append(f"{part}: {exc}")
        if errors:
            self.undecodable += 1
        return JsonDecoded(out[0], out[1], "; ".join(errors) or None)

    def _decode(self, data: bytes, fmt: str) -> Any:
        if fmt == "binary":
            return RAW
        if fmt == "string":
            return _utf8(data)
        if fmt == "json":
            return _json_text(data)
        if fmt in ("avro", "json-schema", "protobuf"):
            return self.schema_payload(data, fmt)
        if len(data) >= HEADER_SIZE and data[0] == MAGIC_BYTE:  # auto: the wire format's magic byte
            return self.schema_payload(data, None)
        try:
            return _json_text(data)
        except _Undecodable:
            pass
        try:
            text = _utf8(data)
        except _Undecodable:
            return RAW
        return text if not _CONTROL.search(text) else RAW

    def _schema_of(self, data: bytes) -> Tuple[int, SchemaVersion]:
        if len(data) < HEADER_SIZE:
            raise _Undecodable(f"{len(data)} bytes: shorter than the wire format's 5-byte header")
        if data[0] != MAGIC_BYTE:
            raise _Undecodable(f"magic byte 0x{data[0]:02x}, not the wire format's 0x00 (Unknown magic byte!)")
        schema_id = int.from_bytes(data[1:5], "big", signed=True)
        sv = self.store.by_id(schema_id) if self.store is not None else None
        if sv is None:
            raise _Undecodable(f"schema id {schema_id} is not in the schema registry's store")
        return schema_id, sv

    def schema_payload(self, data: bytes, fmt: Optional[str]) -> Any:
        """A wire-format part decoded as `fmt` (None: as its id's schema type says); raises Undecodable."""
        schema_id, sv = self._schema_of(data)
        want = TYPE_FORMATS.get(sv.schema_type)
        if fmt is not None and want != fmt:
            raise _Undecodable(f"schema id {schema_id} is a {sv.schema_type} schema, not {fmt.upper()}")
        if want == "avro":
            return self._avro(data, schema_id, sv)
        if want is None:
            raise _Undecodable(f"schema id {schema_id} is of type {sv.schema_type}, which kstore does not decode")
        decoder = self._others.get(schema_id)
        if decoder is None:
            decoder = self._others[schema_id] = (JsonSchemaValidator(self.store, sv) if want == "json-schema"
                                                 else ProtobufSchema(self.store, sv))
        return decoder(data[HEADER_SIZE:]) if want == "json-schema" else decoder.decode(data[HEADER_SIZE:])

    def _avro(self, data: bytes, schema_id: int, sv: SchemaVersion) -> Any:
        if sv.schema_type != "AVRO":
            raise _Undecodable(f"schema id {schema_id} is a {sv.schema_type} schema, not AVRO")
        fastavro = _fastavro()
        writer, reader = self._avro_schemas(schema_id, sv)
        try:
            return jsonable(fastavro.schemaless_reader(io.BytesIO(data[HEADER_SIZE:]), writer, reader))
        except EOFError:
            raise _Undecodable(f"the Avro payload of schema id {schema_id} is cut short") from None
        except Exception as exc:  # fastavro raises plain exceptions of many kinds on bad data
            raise _Undecodable(f"the payload does not decode with schema id {schema_id}: {exc}") from None

    def _avro_schemas(self, schema_id: int, sv: SchemaVersion) -> Tuple[Any, Any]:
        """The parsed writer schema and the reader schema (the subject's latest live version), cached by id."""
        if schema_id not in self._parsed:
            latest = self.store.latest(sv.subject) or sv
            writer = self._parse(sv)
            reader = writer if latest.id == sv.id else self._parse(latest)
            self._parsed[schema_id] = (writer, reader)
        return self._parsed[schema_id]

    def _parse(self, sv: SchemaVersion) -> Any:
        """A schema parsed with its references' named types, referenced schemas first (as AvroSchemaProvider
        resolves them)."""
        fastavro = _fastavro()
        named: Dict[str, Any] = {}
        try:
            for dep in self._dependencies(sv, ()):
                fastavro.parse_schema(json.loads(dep.schema), named_schemas=named)
            return fastavro.parse_schema(json.loads(sv.schema), named_schemas=named)
        except _Undecodable:
            raise
        except Exception as exc:
            raise _Undecodable(f"schema id {sv.id} ({sv.subject} version {sv.version}) does not parse: {exc}") \
                from None

    def _dependencies(self, sv: SchemaVersion, seen: Tuple[Tuple[str, int], ...]) -> list:
        return dependencies(self.store, sv, seen)


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Undecodable(f"not UTF-8 (byte {exc.start})") from None


def _json_text(data: bytes) -> Any:
    try:
        return json.loads(_utf8(data))
    except ValueError as exc:
        raise _Undecodable(f"not JSON text ({exc})") from None


def make_wire_decoder(key_format: str, value_format: str, *, near: str, schemas_from: Optional[str] = None,
                      topic: str = DEFAULT_TOPIC) -> WireFormatDecoder:
    """The decoder for these formats; for avro or auto with the Schema Registry's store read from `schemas_from`
    (its partition dir, or a data dir holding it) or else from the data dir of `near` (a segment or a partition
    dir)."""
    store = None
    if {"avro", "json-schema", "protobuf", "auto"} & {key_format, value_format}:
        if schemas_from is not None and is_partition_dir(os.path.abspath(schemas_from)):
            store = load_schema_store([], topic=topic, schemas_from=schemas_from)
        else:
            path = os.path.abspath(near)
            data_dir = os.path.dirname(path if os.path.isdir(path) else os.path.dirname(path))
            store = load_schema_store([schemas_from or data_dir], topic=topic)
    return WireFormatDecoder(store, key_format, value_format)
