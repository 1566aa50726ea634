"""JSON Schema and Protobuf payloads of Confluent's wire format, decoded with the registry's schemas.

JSON Schema (KafkaJsonSchemaDeserializer): the payload after the 5-byte header is JSON text, validated against
the writer schema (its ``$schema`` draft, ``jsonschema``'s validator for it; referenced schemas registered by
their reference name).

Protobuf (KafkaProtobufDeserializer): after the header, the message indexes (MessageIndexes.readFrom: a zigzag
varint count, then that many zigzag varints, the path of the message among the file's message types and their
nested types; a single 0 byte stands for ``[0]``, the first message), then the message's bytes. Descriptors are
built from the registry's ``.proto`` texts and their references by ``grpc_tools.protoc`` (the texts written into
a private temporary directory, ``--descriptor_set_out --include_imports``), one descriptor pool per schema id;
messages are parsed with google.protobuf's message_factory and shown with json_format's proto3 JSON mapping
(``preserving_proto_field_name=True``: field names as written in the .proto; ``always_print_fields_with_no_presence
=True``: fields at their default value shown; enums by name; int64 as strings, as the mapping says).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Dict, List, Tuple

from kstore_cli.cluster.schema_registry import SchemaStore, SchemaVersion
from kstore_cli.errors import MissingDependencyError


class Undecodable(Exception):
    """Why a key or value does not decode (the reason goes to decodeError or the dead letters)."""


def dependencies(store: SchemaStore, sv: SchemaVersion, seen: Tuple[Tuple[str, int], ...] = ()) -> List[SchemaVersion]:
    """The versions `sv` references, directly or not, each once, a version after those it references."""
    out: List[SchemaVersion] = []
    for ref in sv.references:
        target = store.versions.get((ref.subject, ref.version))
        if target is None or (ref.subject, ref.version) in seen:
            raise Undecodable(f"schema id {sv.id} references {ref.subject} version {ref.version}, which is "
                              "not in the store" if target is None else "a reference cycle")
        for dep in dependencies(store, target, seen + ((sv.subject, sv.version),)) + [target]:
            if dep not in out:
                out.append(dep)
    return out


def read_zigzag_varint(data: bytes, pos: int) -> Tuple[int, int]:
    """A zigzag-encoded varint at `pos` (ByteUtils.readVarint): (value, next position)."""
    shift = raw = 0
    while True:
        if pos >= len(data):
            raise Undecodable("the Protobuf message indexes are cut short")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 28:
            raise Undecodable("a Protobuf message index is not a valid varint")


def read_message_indexes(data: bytes, pos: int) -> Tuple[List[int], int]:
    """Confluent's message indexes at `pos` (MessageIndexes.readFrom): ([0] for a single 0 byte), next position."""
    count, pos = read_zigzag_varint(data, pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > 100:
        raise Undecodable(f"{count} Protobuf message indexes: not Confluent's message-index list")
    indexes = []
    for _ in range(count):
        index, pos = read_zigzag_varint(data, pos)
        indexes.append(index)
    return indexes, pos


class JsonSchemaValidator:
    """A JSON Schema version's validator, with its references registered."""

    def __init__(self, store: SchemaStore, sv: SchemaVersion) -> None:
        try:
            import jsonschema
            from referencing import Registry, Resource
        except ImportError:
            raise MissingDependencyError("validating JSON Schema needs jsonschema: pip install 'kstore-cli[schemas]'") \
                from None
        try:
            schema = json.loads(sv.schema)
            resources = []
            for dep in dependencies(store, sv):
                names = [r.name for r in _referrers(store, sv, dep)] or [dep.subject]
                resource = Resource.from_contents(json.loads(dep.schema), default_specification=_draft7())
                resources += [(name, resource) for name in names]
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
            self._validator = cls(schema, registry=Registry().with_resources(resources))
        except Undecodable:
            raise
        except Exception as exc:
            raise Undecodable(f"schema id {sv.id} ({sv.subject} version {sv.version}) is not a JSON Schema "
                              f"jsonschema can use: {exc}") from None
        self.schema_id = sv.id

    def __call__(self, payload: bytes) -> Any:
        try:
            value = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise Undecodable(f"the JSON Schema payload of schema id {self.schema_id} is not JSON text ({exc})") \
                from None
        error = next(iter(self._validator.iter_errors(value)), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise Undecodable(f"the value fails JSON Schema id {self.schema_id} at {where}: {error.message}")
        return value


def _draft7() -> Any:
    from referencing.jsonschema import DRAFT7

    return DRAFT7


def _referrers(store: SchemaStore, sv: SchemaVersion, dep: SchemaVersion) -> list:
    """The references (of `sv` or its dependencies) that name `dep`."""
    refs = list(sv.references)
    for other in dependencies(store, sv):
        refs += other.references
    return [r for r in refs if (r.subject, r.version) == (dep.subject, dep.version)]


class ProtobufSchema:
    """A Protobuf schema version's descriptors (built by protoc from the .proto texts), messages by index path."""

    def __init__(self, store: SchemaStore, sv: SchemaVersion) -> None:
        try:
            from google.protobuf import descriptor_pb2, descriptor_pool
        except ImportError:
            raise MissingDependencyError("decoding Protobuf needs protobuf and grpcio-tools: "
                                         "pip install 'kstore-cli[schemas]'") from None
        self.schema_id = sv.id
        files = descriptor_pb2.FileDescriptorSet.FromString(_protoc(store, sv))
        self.pool = descriptor_pool.DescriptorPool()
        for proto in files.file:
            self.pool.Add(proto)
        main = files.file[-1]
        prefix = f"{main.package}." if main.package else ""
        self.top = [prefix + m.name for m in main.message_type]
        self._classes: Dict[Tuple[int, ...], Callable] = {}

    def message_class(self, indexes: List[int]) -> Any:
        """The message class at `indexes` (top-level message type, then nested types)."""
        key = tuple(indexes)
        if key not in self._classes:
            from google.protobuf import message_factory

            descriptor = None
            for depth, index in enumerate(indexes):
                count = len(self.top) if depth == 0 else len(descriptor.nested_types)
                if not 0 <= index < count:
                    raise Undecodable(f"message index {list(indexes)} is not a message of schema id {self.schema_id}")
                descriptor = (self.pool.FindMessageTypeByName(self.top[index]) if depth == 0
                              else descriptor.nested_types[index])
            self._classes[key] = message_factory.GetMessageClass(descriptor)
        return self._classes[key]

    def decode(self, payload: bytes) -> Any:
        """The message (after the header) as a JSON value."""
        from google.protobuf import json_format
        from google.protobuf.message import DecodeError

        indexes, pos = read_message_indexes(payload, 0)
        message = self.message_class(indexes)()
        try:
            message.ParseFromString(payload[pos:])
        except DecodeError as exc:
            raise Undecodable(f"the Protobuf payload of schema id {self.schema_id} does not parse: {exc}") from None
        return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                         always_print_fields_with_no_presence=True)


def _protoc(store: SchemaStore, sv: SchemaVersion) -> bytes:
    """The FileDescriptorSet (imports included) of `sv`'s .proto text and its references, by protoc."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        raise MissingDependencyError("decoding Protobuf needs grpcio-tools: pip install 'kstore-cli[schemas]'") \
            from None
    with tempfile.TemporaryDirectory(prefix="kstore-proto-") as tmp:
        names = {}
        for dep in dependencies(store, sv):
            for ref in _referrers(store, sv, dep):
                names[ref.name] = dep.schema
        main = f"kstore_schema_{sv.id}.proto"
        names[main] = sv.schema
        for name, text in names.items():
            path = os.path.join(tmp, name)
            if not os.path.realpath(path).startswith(os.path.realpath(tmp) + os.sep):
                raise Undecodable(f"schema id {sv.id}: reference name {name!r} is not a relative .proto path")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(tmp, "descriptors.pb")
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        rc, said = _quiet_protoc(protoc, ["protoc", f"-I{tmp}", f"-I{include}", f"--descriptor_set_out={out}",
                                          "--include_imports", os.path.join(tmp, main)])
        if rc != 0 or not os.path.exists(out):
            first = next((line.replace(tmp + os.sep, "") for line in said.splitlines() if line.strip()), "")
            raise Undecodable(f"schema id {sv.id} ({sv.subject} version {sv.version}): protoc cannot build its "
                              "descriptors from the registry's .proto text" + (f": {first}" if first else ""))
        with open(out, "rb") as f:
            return f.read()


def _quiet_protoc(protoc, argv: List[str]) -> Tuple[int, str]:
    """protoc's exit code and what it printed: its C++ side writes to file descriptor 2, which would put
    lines of its own beside kstore's one error line, so fd 2 goes to a temporary file for the call."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as said:
        os.dup2(said.fileno(), 2)
        try:
            rc = protoc.main(argv)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        said.seek(0)
        return rc, said.read().decode("utf-8", "replace")
