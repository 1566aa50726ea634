"""Kafka's generated message classes (through tests/oracle_java/MetadataSchemas.java) vs kstore's schema tables.

For each message, the helper prints its version range, ``SCHEMAS[v]`` of every version (field order, wire
types, nullability, compact encodings, tagged fields by tag) and every field's default; the same facts are
derived here from a :class:`kstore_cli.parsers.schema.Message`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Sequence

from kstore_cli.parsers.generate_tables import to_snake_case
from kstore_cli.parsers.schema import Field, Message

JAVA = Path(__file__).resolve().parent.parent / "oracle_java" / "MetadataSchemas.java"


def kafka_messages(oracle, args: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """One JVM: every MetadataRecordType, then the named classes / ``serde:CLASS`` mappings."""
    classpath, _ = oracle._env_and_classpath()
    proc = subprocess.run(["java", "-cp", classpath, str(JAVA), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


_CACHE: Dict[str, List[Dict[str, Any]]] = {}


def kafka_everything(oracle) -> List[Dict[str, Any]]:
    """What both schema test modules need, from ONE JVM per test session."""
    if "all" not in _CACHE:
        from tests.parsers.test_schemas_oracle import JAVA_ARGS

        _CACHE["all"] = kafka_messages(oracle, JAVA_ARGS)
    return _CACHE["all"]


_FIXED = {"bool": "BOOLEAN", "int8": "INT8", "int16": "INT16", "uint16": "UINT16", "int32": "INT32",
          "uint32": "UINT32", "int64": "INT64", "uuid": "UUID", "float64": "FLOAT64"}


def _type_json(f: Field, version: int, flexible: bool, nullable: bool) -> Any:
    """What SchemaGenerator.fieldTypeToSchemaType produces for a field at a version, as the helper prints it."""
    if f.element is not None:
        if f.is_struct:
            element = _struct_json(f.fields, version, flexible)
        else:
            element = _type_json(Field("element", f.element), version, flexible, False)
        return {"array": element, "compact": flexible, "nullable": nullable}
    if f.is_struct:
        return _struct_json(f.fields, version, flexible)
    if f.type in ("string", "bytes"):
        return ("COMPACT_" if flexible else "") + ("NULLABLE_" if nullable else "") + f.type.upper()
    return _FIXED[f.type]


def _struct_json(fields: List[Field], version: int, flexible: bool) -> Dict[str, Any]:
    out = [[to_snake_case(f.name), _type_json(f, version, flexible, version in f.nullable)]
           for f in fields if version in f.versions and version not in f.tagged]
    if flexible:
        tagged = sorted([f.tag, to_snake_case(f.name), _type_json(f, version, True, version in f.nullable)]
                        for f in fields if version in f.versions and version in f.tagged)
        out.append(["_tagged_fields", {"tagged": tagged}])
    return {"struct": out}


def our_schemas(msg: Message) -> List[Any]:
    return [_struct_json(msg.fields, v, v in msg.flexible) if v in msg.valid else None
            for v in range(msg.valid.hi + 1)]


def _default_json(f: Field) -> Any:
    d = f.default
    if isinstance(d, (bytes, bytearray)):
        return {"bytes": len(d)}
    if f.is_struct and f.element is None and d is not None:
        return "<" + f.type + ">"
    return d


def _defaults(fields: List[Field], struct_name: str, out: Dict[str, Dict[str, Any]]) -> None:
    out[struct_name] = {f.json_name: _default_json(f) for f in fields}
    for f in fields:
        if f.is_struct:
            _defaults(f.fields, f.element or f.type, out)


def check_defaults(msg: Message, kafka: Dict[str, Dict[str, Any]]) -> None:
    """Every field default of ``msg`` and its nested structs equals what Kafka's accessors return."""
    ours: Dict[str, Dict[str, Any]] = {}
    _defaults(msg.fields, msg.name, ours)
    for struct_name, fields in ours.items():
        assert struct_name in kafka, f"{struct_name} not a class of {msg.name}"
        got = {name: value for name, value in kafka[struct_name].items() if name in fields}
        assert fields == got, f"{msg.name}: {struct_name}"
