"""The keys and values Confluent Schema Registry writes to its store topic (``_schemas``), read as its
``SchemaRegistrySerializer`` reads them.

Both are JSON (Jackson, ``JacksonMapper``). Keys carry ``keytype`` (``SchemaRegistryKeyType``) and
``magic``; ``SchemaKey`` adds subject and version (``{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}``),
``ConfigKey``/``ModeKey``/``DeleteSubjectKey``/``ClearSubjectKey`` a subject (absent for the global config and
mode), ``NoopKey`` nothing. Values: ``SchemaValue`` (subject, version, id, schemaType: absent means AVRO,
references, deleted, schema), ``ConfigValue`` (compatibilityLevel, ...), ``ModeValue`` (mode),
``DeleteSubjectValue`` (subject, version), ``ClearSubjectValue`` (subject). Unknown fields are ignored
(``@JsonIgnoreProperties(ignoreUnknown = true)``); Jackson coerces a numeric string to an int.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

#: SchemaRegistryKeyType, in its declaration order.
KEY_TYPES = ("ASSOC", "CONFIG", "SCHEMA", "MODE", "NOOP", "DELETE_SUBJECT", "CLEAR_SUBJECT", "CONTEXT")
#: CompatibilityLevel's names.
COMPATIBILITY_LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
                        "FULL_TRANSITIVE")
#: Mode's names.
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
#: The schema types of the registry's providers (AvroSchema.TYPE, JsonSchema.TYPE, ProtobufSchema.TYPE).
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class RegistryRecordError(ValueError):
    """A key or value the registry's serializer would not read (the reason, in words)."""


@dataclass(frozen=True)
class RegistryKey:
    """A store key. Its identity in the registry's store (InMemoryCache's skip-list map ordered by
    SubjectKeyComparator) is keytype, subject and version: the magic does not take part."""

    keytype: str
    subject: Optional[str] = None
    version: Optional[int] = None
    magic: int = 0

    @property
    def identity(self) -> Tuple[str, Optional[str], Optional[int]]:
        return self.keytype, self.subject, self.version


@dataclass(frozen=True)
class SchemaReference:
    """A reference of a schema to another subject's version (the name the referring schema imports)."""

    name: str
    subject: str
    version: int


@dataclass
class SchemaValue:
    subject: Optional[str]
    version: Optional[int]
    id: int
    schema: str
    schema_type: str = "AVRO"
    references: List[SchemaReference] = field(default_factory=list)
    deleted: bool = False


def _load(data: bytes, what: str) -> dict:
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RegistryRecordError(f"the {what} is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise RegistryRecordError(f"the {what} is JSON but not an object: {_short(obj)}")
    return obj


def _short(obj: Any) -> str:
    text = json.dumps(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(obj: dict, name: str, what: str, required: bool = True) -> Optional[int]:
    """An int field as Jackson reads one (a numeric string is coerced; a float or a boolean is not)."""
    value = obj.get(name)
    if value is None:
        if required:
            raise RegistryRecordError(f"the {what} has no {name!r}")
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegistryRecordError(f"the {what}'s {name!r} is not an integer: {_short(value)}")
    return value


def _str(obj: dict, name: str, what: str, required: bool = False) -> Optional[str]:
    value = obj.get(name)
    if value is None:
        if required:
            raise RegistryRecordError(f"the {what} has no {name!r}")
        return None
    if not isinstance(value, str):
        raise RegistryRecordError(f"the {what}'s {name!r} is not a string: {_short(value)}")
    return value


def _enum(obj: dict, name: str, names: Tuple[str, ...], what: str) -> Optional[str]:
    value = _str(obj, name, what)
    if value is not None and value not in names:
        raise RegistryRecordError(f"the {what}'s {name!r} is {value!r}, not one of {', '.join(names)}")
    return value


def parse_key(data: Optional[bytes]) -> RegistryKey:
    """A store key (SchemaRegistrySerializer.deserializeKey); raises RegistryRecordError."""
    if data is None:
        raise RegistryRecordError("a record without a key")
    obj = _load(data, "key")
    keytype = obj.get("keytype")
    if keytype not in KEY_TYPES:
        raise RegistryRecordError(f"the key's keytype is {_short(keytype)}, not one of {', '.join(KEY_TYPES)}")
    magic = _int(obj, "magic", "key", required=False) or 0
    if keytype == "SCHEMA":
        if magic not in (0, 1):  # validateMagicByte
            raise RegistryRecordError(f"a SCHEMA key of magic {magic}: the registry reads magic 0 and 1 only")
        return RegistryKey(keytype, _str(obj, "subject", "key"), _int(obj, "version", "key"), magic)
    if keytype in ("NOOP", "ASSOC", "CONTEXT"):
        return RegistryKey(keytype, magic=magic)
    return RegistryKey(keytype, _str(obj, "subject", "key"), magic=magic)


def _references(obj: dict) -> List[SchemaReference]:
    refs = obj.get("references") or []
    if not isinstance(refs, list):
        raise RegistryRecordError(f"the value's 'references' is not a list: {_short(refs)}")
    out = []
    for ref in refs:
        if not isinstance(ref, dict):
            raise RegistryRecordError(f"a reference is not an object: {_short(ref)}")
        out.append(SchemaReference(_str(ref, "name", "reference", True), _str(ref, "subject", "reference", True),
                                   _int(ref, "version", "reference")))
    return out


def parse_schema_value(data: bytes) -> SchemaValue:
    """A SCHEMA record's value (SchemaValue); raises RegistryRecordError."""
    obj = _load(data, "value")
    deleted = obj.get("deleted", False)
    if not isinstance(deleted, bool):
        raise RegistryRecordError(f"the value's 'deleted' is not a boolean: {_short(deleted)}")
    return SchemaValue(_str(obj, "subject", "value"), _int(obj, "version", "value", required=False),
                       _int(obj, "id", "value"), _str(obj, "schema", "value", required=True),
                       _str(obj, "schemaType", "value") or "AVRO", _references(obj), deleted)


def parse_config_value(data: bytes) -> dict:
    """A CONFIG record's value (ConfigValue): its JSON object, compatibilityLevel checked."""
    obj = _load(data, "value")
    _enum(obj, "compatibilityLevel", COMPATIBILITY_LEVELS, "value")
    return obj


def parse_mode_value(data: bytes) -> Optional[str]:
    """A MODE record's value (ModeValue): its mode."""
    return _enum(_load(data, "value"), "mode", MODES, "value")


def parse_delete_subject_value(data: bytes) -> Tuple[Optional[str], int]:
    """A DELETE_SUBJECT record's value: the subject and the version up to which every version is deleted."""
    obj = _load(data, "value")
    return _str(obj, "subject", "value"), _int(obj, "version", "value")


def parse_clear_subject_value(data: bytes) -> Optional[str]:
    """A CLEAR_SUBJECT record's value: the subject whose soft-deleted versions go."""
    return _str(_load(data, "value"), "subject", "value")
