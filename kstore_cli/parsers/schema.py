"""One schema-driven reader of Kafka's generated-message encoding, and its JsonConverter twin.

Schemas are written in a compact Python form (see ``schemas.py``) carrying the same facts as Kafka's
message JSON files: field order, types, ``versions``, ``nullableVersions``, ``taggedVersions``/``tag``,
defaults, and the message's ``validVersions``/``flexibleVersions``.

Encoding (``MessageDataGenerator``), per struct, field by field in schema order:

    non-flexible version                      flexible version
    string  int16 length (-1 = null)          unsigned varint length+1 (0 = null)
    bytes   int32 length (-1 = null)          unsigned varint length+1 (0 = null)
    array   int32 count  (-1 = null)          unsigned varint count+1  (0 = null)
    struct  fields (nullable: int8 marker, <0 = null)
    ...                                       then: uvarint count, per tagged field: uvarint tag,
                                              uvarint size, data (always the flexible encoding)

Fields absent from the version, and tagged fields not sent, take their default.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import base64
import math
import struct

from kstore_cli.record.text import java_utf8
from kstore_cli.parsers.wire import JavaError, WireReader, encode_unsigned_varint

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"



class Versions:
    """A version range as Kafka writes it: ``"0+"``, ``"1-3"``, ``"2"`` or ``"none"``."""

    __slots__ = ("lo", "hi")

    def __init__(self, spec: str) -> None:
        spec = spec.strip()
        if spec == "none":
            self.lo, self.hi = 1, 0
        elif spec.endswith("+"):
            self.lo, self.hi = int(spec[:-1]), 0x7FFF
        elif "-" in spec:
            lo, hi = spec.split("-")
            self.lo, self.hi = int(lo), int(hi)
        else:
            self.lo = self.hi = int(spec)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi

    def __repr__(self) -> str:
        return f"Versions({self.lo}-{self.hi})"


class Field:
    """One field of a struct; ``fields`` is set for struct and struct-array types."""

    __slots__ = ("name", "json_name", "type", "versions", "nullable", "tagged", "tag", "default",
                 "fields", "element", "map_key")

    def __init__(self, name: str, type_: str, versions: str = "0+", *, nullable: str = "none",
                 tagged: str = "none", tag: Optional[int] = None, default: Any = None,
                 fields: Optional[Sequence["Field"]] = None, map_key: bool = False) -> None:
        self.name = name
        #: the key of a keyed collection (``mapKey``): Java keeps such arrays in a hash collection
        self.map_key = map_key
        # FieldSpec.camelCaseName(): the schema name with a lower-case first letter.
        self.json_name = name[:1].lower() + name[1:]
        self.type = type_
        self.versions = Versions(versions)
        self.nullable = Versions(nullable)
        self.tagged = Versions(tagged)
        self.tag = tag
        self.fields = list(fields) if fields is not None else None
        self.element = type_[2:] if type_.startswith("[]") else None
        self.default = self._default(default)

    @property
    def is_struct(self) -> bool:
        """A struct, or an array of structs."""
        return self.fields is not None

    def _default(self, given: Any) -> Any:
        if given == "null":
            return None
        t = self.type
        if self.element is not None:
            return []
        if self.is_struct:
            return {f.name: f.default for f in self.fields}
        if given is not None:
            if t == "bool":
                return given in (True, "true")
            if t == "float64":
                return float(given)
            if t in ("string", "uuid"):
                return given
            return int(given, 0) if isinstance(given, str) else given
        return {"bool": False, "string": "", "bytes": b"", "uuid": ZERO_UUID, "float64": 0.0}.get(t, 0)


class Message:
    """A top-level message: its class name, ``validVersions``, ``flexibleVersions`` and fields."""

    __slots__ = ("name", "valid", "flexible", "fields")

    def __init__(self, name: str, valid: str, flexible: str, fields: Sequence[Field]) -> None:
        self.name = name
        self.valid = Versions(valid)
        self.flexible = Versions(flexible)
        self.fields = list(fields)


class MetadataRecordType:
    """One ``MetadataRecordType``: api key, enum name (``PARTITION_CHANGE_RECORD``) and message schema."""

    __slots__ = ("id", "name", "message")

    def __init__(self, id: int, name: str, message: Message) -> None:  # noqa: A002 - Kafka's name
        self.id = id
        self.name = name
        self.message = message

    @property
    def lowest_supported_version(self) -> int:
        """The lowest version of ``validVersions``."""
        return self.message.valid.lo

    @property
    def highest_supported_version(self) -> int:
        """The highest version of ``validVersions``."""
        return self.message.valid.hi

    def __repr__(self) -> str:
        return f"MetadataRecordType({self.id}, {self.name!r}, {self.message.name})"


def F(name: str, type_: str, versions: str = "0+", **kw: Any) -> Field:
    """Shorthand used by the schema tables."""
    return Field(name, type_, versions, **kw)


# --------------------------------------------------------------------------------------------
# Reading


def read_message(msg: Message, data: Union[bytes, WireReader], version: int) -> Dict[str, Any]:
    """``new X(readable, version)``: every field's value (defaults for fields absent from ``version``).

    Raises :class:`JavaError` with the message Kafka's generated ``read`` would throw.
    """
    reader = data if isinstance(data, WireReader) else WireReader(data)
    if version < msg.valid.lo:
        # The generated read has no version check: a field's condition is only written where its versions
        # differ from the message's validVersions (MessageDataGenerator via VersionConditional), so a version
        # below the lowest (-1 from an unsigned varint 0xFFFFFFFF) reads as the lowest one.
        version = msg.valid.lo
    return _read_struct(msg.fields, reader, version, version in msg.flexible)


def _read_struct(fields: List[Field], r: WireReader, version: int, flexible: bool) -> Dict[str, Any]:
    values: Dict[str, Any] = {}
    for f in fields:
        if version not in f.versions or version in f.tagged:
            values[f.name] = f.default
            continue
        values[f.name] = _read_field(f, r, version, flexible)
    if flexible:
        count = r.unsigned_varint()
        for _ in range(count):
            tag = r.unsigned_varint()
            size = r.unsigned_varint()
            for f in fields:
                if f.tag == tag and version in f.tagged and version in f.versions:
                    values[f.name] = _read_field(f, r, version, True, tagged=True)
                    break
            else:
                r.byte_array(size)  # an unknown tagged field is kept raw, never printed
    return values


def _length(r: WireReader, flexible: bool, wide: bool) -> int:
    if flexible:
        return r.unsigned_varint() - 1
    return r.int32() if wide else r.int16()


def _read_string(r: WireReader, flexible: bool, nullable: bool, what: str) -> Optional[str]:
    length = _length(r, flexible, False)
    if length < 0:
        if nullable:
            return None
        raise JavaError(f"non-nullable field {what} was serialized as null")
    if length > 0x7FFF:
        raise JavaError(f"string field {what} had invalid length {length}")
    return java_utf8(r.byte_array(length))


def _read_fixed(t: str, r: WireReader) -> Any:
    if t == "int32":
        return r.int32()
    if t == "int64":
        return r.int64()
    if t == "int16":
        return r.int16()
    if t == "int8":
        return r.int8()
    if t == "bool":
        return r.int8() != 0
    if t == "uuid":
        return r.uuid()
    if t == "uint16":
        return r.uint16()
    if t == "uint32":
        return r.uint32()
    if t == "float64":
        return r.float64()
    raise ValueError(f"unknown fixed type {t}")  # a bug in a schema table, not bad data


def _read_field(f: Field, r: WireReader, version: int, flexible: bool, tagged: bool = False) -> Any:
    t = f.type
    nullable = version in f.nullable
    if f.element is not None:
        count = _length(r, flexible, True)
        if count < 0:
            if nullable:
                return None
            raise JavaError(f"non-nullable field {f.json_name} was serialized as null")
        if count > r.remaining():
            raise JavaError(f"Tried to allocate a collection of size {count}, but there are only "
                            f"{r.remaining()} bytes remaining.")
        el = f.element
        if f.is_struct:
            return [_read_struct(f.fields, r, version, flexible) for _ in range(count)]
        if el == "string":
            return [_read_string(r, flexible, False, f.json_name + " element") for _ in range(count)]
        return [_read_fixed(el, r) for _ in range(count)]
    if f.is_struct:
        # the null marker: an int8 (< 0 = null), or inside a tagged field an unsigned varint (<= 0 = null)
        if nullable and ((r.unsigned_varint() <= 0) if tagged else (r.int8() < 0)):
            return None
        return _read_struct(f.fields, r, version, flexible)
    if t == "string":
        return _read_string(r, flexible, nullable, f.json_name)
    if t == "bytes":
        length = _length(r, flexible, True)
        if length < 0:
            if nullable:
                return None
            raise JavaError(f"non-nullable field {f.json_name} was serialized as null")
        return r.byte_array(length)
    return _read_fixed(t, r)


# --------------------------------------------------------------------------------------------
# Writing (the generated ``write``): used to build test data and, later, records kstore writes itself

_FIXED_STRUCTS = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "uint16": struct.Struct(">H"),
                  "int32": struct.Struct(">i"), "uint32": struct.Struct(">I"), "int64": struct.Struct(">q"),
                  "float64": struct.Struct(">d")}


def write_message(msg: Message, values: Dict[str, Any], version: int) -> bytes:
    """``X.write(writable, cache, version)``: the message's bytes at ``version``.

    ``values`` maps schema field names to values (missing ones take their default). Tagged fields are
    written, in tag order, only when they differ from their default, as Kafka's generated code does.
    Raises ``ValueError`` for a version outside ``validVersions`` or a value the field cannot hold.
    """
    if version not in msg.valid:
        raise ValueError(f"Can't write version {version} of {msg.name}")
    out = bytearray()
    _write_struct(msg.fields, values, version, version in msg.flexible, out)
    return bytes(out)


def _write_struct(fields: List[Field], values: Dict[str, Any], version: int, flexible: bool,
                  out: bytearray) -> None:
    unknown = set(values) - {f.name for f in fields}
    if unknown:
        raise ValueError(f"no such field(s): {sorted(unknown)}")
    tagged = []
    for f in fields:
        value = values.get(f.name, f.default)
        if version not in f.versions:
            if value != f.default:
                raise ValueError(f"field {f.name} is not in version {version} but has a non-default value")
            continue
        if version in f.tagged:
            # Kafka writes a tagged field only when it is not null and differs from its default
            if value is not None and value != f.default:
                tagged.append((f.tag, f, value))
            continue
        _write_field(f, value, version, flexible, out)
    if flexible:
        out += encode_unsigned_varint(len(tagged))
        for tag, f, value in sorted(tagged, key=lambda t: t[0]):
            data = bytearray()
            _write_field(f, value, version, True, data)
            out += encode_unsigned_varint(tag) + encode_unsigned_varint(len(data)) + data
    elif tagged:
        raise ValueError("tagged fields in a non-flexible version")


def _write_length(n: int, flexible: bool, wide: bool, out: bytearray) -> None:
    if flexible:
        out += encode_unsigned_varint(n + 1)
    else:
        out += struct.pack(">i" if wide else ">h", n)


def _write_field(f: Field, value: Any, version: int, flexible: bool, out: bytearray) -> None:
    if value is None:
        if version not in f.nullable:
            raise ValueError(f"non-nullable field {f.name} has no value")
        if f.is_struct and f.element is None:
            out += b"\xff"
        else:
            _write_length(-1, flexible, f.type != "string", out)
        return
    if f.element is not None:
        _write_length(len(value), flexible, True, out)
        for item in value:
            if f.is_struct:
                _write_struct(f.fields, item, version, flexible, out)
            else:
                _write_field(Field(f.name, f.element), item, version, flexible, out)
        return
    if f.is_struct:
        if version in f.nullable:
            out += b"\x01"  # the present marker: int8 1, or (tagged) unsigned varint 1 -- the same byte
        _write_struct(f.fields, value, version, flexible, out)
        return
    t = f.type
    if t == "string":
        data = value.encode("utf-8")
        _write_length(len(data), flexible, False, out)
        out += data
    elif t == "bytes":
        _write_length(len(value), flexible, True, out)
        out += value
    elif t == "bool":
        out += b"\x01" if value else b"\x00"
    elif t == "uuid":
        out += base64.urlsafe_b64decode(value + "==")
    else:
        out += _FIXED_STRUCTS[t].pack(value)


# --------------------------------------------------------------------------------------------
# JsonConverter


def to_json(msg: Message, values: Dict[str, Any], version: int) -> Dict[str, Any]:
    """``XJsonConverter.write(message, version)`` as a JSON tree (dicts keep schema order).

    Like Kafka's generated converter, a top-level message is written at ANY version: the generator's
    version check compares the message's versions with themselves (always true), so a record of a
    version newer than ``validVersions`` prints with the fields of the versions it knows.
    """
    return _struct_json(msg.fields, values, version)


def _struct_json(fields: List[Field], values: Dict[str, Any], version: int) -> Dict[str, Any]:
    node: Dict[str, Any] = {}
    for f in fields:
        if version not in f.versions:
            continue
        value = values[f.name]
        if version in f.tagged and value == f.default:
            continue  # tagged fields are written only when they differ from the default
        node[f.json_name] = _value_json(f, value, version)
    return node


def _value_json(f: Field, value: Any, version: int) -> Any:
    if value is None:
        return None
    if f.element is not None:
        if f.is_struct:
            return [_struct_json(f.fields, v, version) for v in value]
        return list(value)
    if f.is_struct:
        return _struct_json(f.fields, value, version)
    return value


def plain(tree: Any) -> Any:
    """A JSON tree for ``--json`` output: ``bytes`` become their base64 text, and the floats strict JSON
    cannot hold (NaN, infinities) the strings Java prints for them (``"NaN"``, ``"Infinity"``)."""
    if isinstance(tree, dict):
        return {k: plain(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [plain(v) for v in tree]
    if isinstance(tree, (bytes, bytearray)):
        return base64.b64encode(bytes(tree)).decode("ascii")
    if isinstance(tree, float) and not math.isfinite(tree):
        return "NaN" if math.isnan(tree) else ("Infinity" if tree > 0 else "-Infinity")
    return tree
