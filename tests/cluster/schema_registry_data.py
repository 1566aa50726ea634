"""The records of a Schema Registry store topic as the registry's KafkaStore writes them: keys and values
serialized as its SchemaRegistrySerializer (Jackson) does: compact JSON, the key fields in @JsonPropertyOrder
(keytype, subject, version, magic), empty and null fields left out (@JsonInclude NON_EMPTY), a SchemaValue's
fields in its @JsonCreator order, non-ASCII text as UTF-8. fixtures/schema-registry/make.py appends them
through Kafka's own leader code; the tests also build variants with kstore's batch builder."""

from __future__ import annotations

import json
from typing import List, Optional, Tuple

T0 = 1_700_000_000_000

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "com.acme",
            "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]}
ORDER_V2 = {"type": "record", "name": "Order", "namespace": "com.acme",
            "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"},
                       {"name": "note", "type": "string", "default": "\u00e9t\u00e9"}]}
CUSTOMER = {"type": "record", "name": "Customer", "namespace": "com.acme",
            "fields": [{"name": "name", "type": "string"}]}
SHIPMENT = {"type": "record", "name": "Shipment", "namespace": "com.acme",
            "fields": [{"name": "to", "type": "com.acme.Customer"}, {"name": "weight", "type": "int"}]}
EVENT_JSON = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"kind": {"type": "string"}}}
PROTO = 'syntax = "proto3";\npackage acme;\n\nmessage Ping {\n  int64 at = 1;\n}\n'


def _j(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _c(schema: dict) -> str:
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False)


def schema_key(subject: str, version: int, magic: int = 1) -> bytes:
    return _j({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": magic})


def subject_key(keytype: str, subject: Optional[str] = None) -> bytes:
    key = {"keytype": keytype}
    if subject is not None:
        key["subject"] = subject
    key["magic"] = 0
    return _j(key)


def schema_value(subject: str, version: int, schema_id: int, schema: str, *, schema_type: Optional[str] = "AVRO",
                 references: Optional[list] = None, deleted: bool = False) -> bytes:
    value = {"subject": subject, "version": version, "id": schema_id}
    if schema_type is not None:
        value["schemaType"] = schema_type
    if references:
        value["references"] = references
    value["schema"] = schema
    value["deleted"] = deleted
    return _j(value)


NOOP = subject_key("NOOP")


def records() -> List[Tuple[Optional[bytes], Optional[bytes]]]:
    """(key, value) in offset order, offset 0 first."""
    return [
        (NOOP, None),                                                                             # 0 startup
        (subject_key("CONFIG"), _j({"compatibilityLevel": "FULL"})),                              # 1 legacy global
        # 2: an old registry's value: no schemaType (AVRO)
        (schema_key("orders-value", 1), schema_value("orders-value", 1, 1, _c(ORDER_V1), schema_type=None)),
        (schema_key("orders-value", 2), schema_value("orders-value", 2, 2, _c(ORDER_V2))),        # 3 evolved
        (schema_key("customer-value", 1), schema_value("customer-value", 1, 3, _c(CUSTOMER))),    # 4
        (schema_key("shipments-value", 1), schema_value(                                          # 5 a reference
            "shipments-value", 1, 4, _c(SHIPMENT),
            references=[{"name": "com.acme.Customer", "subject": "customer-value", "version": 1}])),
        (subject_key("CONFIG", "orders-value"),                                                   # 6
         _j({"subject": "orders-value", "compatibilityLevel": "BACKWARD_TRANSITIVE"})),
        (subject_key("MODE", "events-value"), _j({"subject": "events-value", "mode": "READONLY"})),  # 7
        (schema_key("events-value", 1), schema_value("events-value", 1, 5, _c(EVENT_JSON), schema_type="JSON")),
        (schema_key("pings-value", 1), schema_value("pings-value", 1, 6, PROTO, schema_type="PROTOBUF")),  # 9
        # 10: DELETE /subjects/orders-value/versions/1: the value rewritten, deleted
        (schema_key("orders-value", 1), schema_value("orders-value", 1, 1, _c(ORDER_V1), deleted=True)),
        # 11-13: temp-value v1 soft-deleted, then ?permanent=true: the tombstone (a hard delete)
        (schema_key("temp-value", 1), schema_value("temp-value", 1, 7, '"string"')),
        (schema_key("temp-value", 1), schema_value("temp-value", 1, 7, '"string"', deleted=True)),
        (schema_key("temp-value", 1), None),
        # 14-16: old-value v1, v2; DELETE /subjects/old-value: DELETE_SUBJECT up to version 2
        (schema_key("old-value", 1), schema_value("old-value", 1, 8, '"int"')),
        (schema_key("old-value", 2), schema_value("old-value", 2, 9, '"long"')),
        (subject_key("DELETE_SUBJECT", "old-value"), _j({"subject": "old-value", "version": 2})),
        # 17-19: gone-value v1 soft-deleted, then CLEAR_SUBJECT: its soft-deleted versions go
        (schema_key("gone-value", 1), schema_value("gone-value", 1, 10, '"bytes"')),
        (schema_key("gone-value", 1), schema_value("gone-value", 1, 10, '"bytes"', deleted=True)),
        (subject_key("CLEAR_SUBJECT", "gone-value"), _j({"subject": "gone-value"})),
        (NOOP, None),                                                                             # 20
        # 21: a malformed value (cut short)
        (schema_key("broken-value", 1), b'{"subject":"broken-value","version":1,"id":11,"sche'),
        # 22: another schema under an id already taken: the registry does not apply it
        (schema_key("dup-value", 1), schema_value("dup-value", 1, 2, '"float"')),
        (subject_key("MODE"), _j({"mode": "READWRITE"})),                                         # 23 global
    ]
