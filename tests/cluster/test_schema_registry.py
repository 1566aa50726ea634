"""The schema store read from a Schema Registry's `_schemas` topic, replayed as the registry's KafkaStore
reader applies it (fixtures/schema-registry: records appended through Kafka's own leader code)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from kstore_cli.cluster.schema_registry import (load_schema_store, read_schema_store, schema_file_name,
                                                write_schema_files)
from kstore_cli.errors import UsageError
from kstore_cli.log.logdir import Partition
from kstore_cli.parsers.schema_registry import RegistryRecordError, SchemaReference, parse_key
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from tests.cluster import schema_registry_data as data
from tests.conftest import ROOT

REGISTRY = ROOT / "fixtures" / "schema-registry" / "registry"


def write_partition(directory: Path, records: List[Tuple[Optional[bytes], Optional[bytes]]]) -> Path:
    """A store partition of one-record batches (as KafkaStore sends them), written by kstore's builder."""
    directory.mkdir(parents=True)
    batches = b"".join(build_v2_batch([RecordSpec(i, data.T0 + i, k, v)]) for i, (k, v) in enumerate(records))
    (directory / "00000000000000000000.log").write_bytes(batches)
    return directory


@pytest.fixture(scope="module")
def store():
    return load_schema_store([str(REGISTRY)])


def test_versions_ids_and_deletes(store) -> None:
    got = {k: (v.id, v.schema_type, v.deleted) for k, v in store.versions.items()}
    assert got == {
        ("orders-value", 1): (1, "AVRO", True),        # soft-deleted (value rewritten with deleted: true)
        ("orders-value", 2): (2, "AVRO", False),       # the evolved version
        ("customer-value", 1): (3, "AVRO", False),
        ("shipments-value", 1): (4, "AVRO", False),
        ("events-value", 1): (5, "JSON", False),
        ("pings-value", 1): (6, "PROTOBUF", False),
        ("old-value", 1): (8, "AVRO", True),           # DELETE_SUBJECT up to version 2
        ("old-value", 2): (9, "AVRO", True),
    }  # temp-value v1: tombstoned (hard delete); gone-value: CLEAR_SUBJECT; dup-value and broken-value: not applied
    assert store.versions[("orders-value", 1)].schema == data._c(data.ORDER_V1)
    assert json.loads(store.versions[("orders-value", 2)].schema)["fields"][2]["default"] == "\u00e9t\u00e9"
    assert store.versions[("shipments-value", 1)].references == [
        SchemaReference("com.acme.Customer", "customer-value", 1)]
    assert store.versions[("pings-value", 1)].schema == data.PROTO
    assert sorted(store.ids) == [1, 2, 3, 4, 5, 6, 8, 9]  # 7 (hard-deleted) and 10 (cleared) gone
    assert store.by_id(1).subject == "orders-value" and store.by_id(1).deleted  # soft-deleted ids still resolve
    assert store.by_id(7) is None and store.by_id(10) is None and store.by_id(11) is None
    assert store.latest("orders-value").version == 2
    assert store.latest("old-value") is None
    assert store.subjects() == ["customer-value", "events-value", "orders-value", "pings-value", "shipments-value"]
    assert store.subjects(include_deleted=True) == sorted(store.subjects() + ["old-value"])
    assert store.versions[("orders-value", 2)].offset == 3
    assert store.versions[("orders-value", 2)].timestamp == data.T0 + 3000


def test_config_mode_and_counts(store) -> None:
    assert store.compatibility("orders-value") == ("BACKWARD_TRANSITIVE", "subject")
    assert store.compatibility("customer-value") == ("FULL", "global")
    assert store.compatibility(None) == ("FULL", "global")
    assert store.mode("events-value") == ("READONLY", "subject")
    assert store.mode("orders-value") == ("READWRITE", "global")
    assert store.records == 24 and store.tombstones == 1
    assert store.keytypes == {"NOOP": 2, "CONFIG": 2, "SCHEMA": 16, "MODE": 2, "DELETE_SUBJECT": 1,
                              "CLEAR_SUBJECT": 1}


def test_records_not_applied_are_named(store) -> None:
    assert [(Path(p.path).name, p.offset) for p in store.problems] == [
        ("00000000000000000000.log", 21), ("00000000000000000000.log", 22)]
    assert "not JSON" in store.problems[0].reason
    assert "schema id 2 is already registered with another schema (orders-value version 2)" in store.problems[1].reason


def test_defaults_without_config_or_mode(tmp_path) -> None:
    part = write_partition(tmp_path / "d" / "_schemas-0", [
        (data.schema_key("a", 1), data.schema_value("a", 1, 1, '"string"'))])
    store = read_schema_store(Partition(str(part)))
    assert store.compatibility("a") == ("BACKWARD", "default") and store.mode("a") == ("READWRITE", "default")


def test_last_write_wins_and_tombstones_of_config_and_mode(tmp_path) -> None:
    part = write_partition(tmp_path / "_schemas-0", [
        (data.subject_key("CONFIG", "a"), b'{"subject":"a","compatibilityLevel":"NONE"}'),
        (data.subject_key("CONFIG", "a"), b'{"subject":"a","compatibilityLevel":"FORWARD"}'),
        (data.subject_key("MODE"), b'{"mode":"IMPORT"}'),
        (data.subject_key("MODE"), None),
        # the magic takes no part in a key's identity (SubjectKeyComparator): v1 written twice
        (data.schema_key("a", 1, magic=0), data.schema_value("a", 1, 1, '"int"')),
        (data.schema_key("a", 1, magic=1), data.schema_value("a", 1, 1, '"int"', deleted=True)),
    ])
    store = read_schema_store(Partition(str(part)))
    assert store.compatibility("a") == ("FORWARD", "subject")
    assert store.mode(None) == ("READWRITE", "default")
    assert store.versions[("a", 1)].deleted and store.problems == []


@pytest.mark.parametrize("key, value, why", [
    (None, b"{}", "a record without a key"),
    (b"not json", b"{}", "the key is not JSON"),
    (b'["SCHEMA"]', b"{}", "not an object"),
    (b'{"keytype":"BOGUS","magic":0}', b"{}", "keytype is \"BOGUS\""),
    (b'{"keytype":"SCHEMA","subject":"a","version":1,"magic":2}', b"{}", "magic 2"),
    (data.schema_key("a", 1), b'{"subject":"a","version":1,"schema":"\\"int\\""}', "has no 'id'"),
    (data.schema_key("a", 1), b'{"subject":"a","version":1,"id":"x","schema":"\\"int\\""}', "'id' is not an integer"),
    (data.schema_key("a", 1), b'{"subject":"a","version":1,"id":1}', "has no 'schema'"),
    (data.subject_key("CONFIG"), b'{"compatibilityLevel":"SIDEWAYS"}', "not one of NONE"),
    (data.subject_key("MODE"), b'{"mode":"OPEN"}', "not one of READWRITE"),
    (data.subject_key("DELETE_SUBJECT", "a"), b'{"subject":"a"}', "has no 'version'"),
])
def test_malformed_records(tmp_path, key, value, why) -> None:
    part = write_partition(tmp_path / "_schemas-0", [(key, value),
                                                     (data.schema_key("b", 1), data.schema_value("b", 1, 2, '"long"'))])
    store = read_schema_store(Partition(str(part)))
    assert [(p.offset, why in p.reason) for p in store.problems] == [(0, True)], store.problems
    assert list(store.versions) == [("b", 1)]  # the next record still applied


def test_jackson_coerces_numeric_strings() -> None:
    assert parse_key(b'{"keytype":"SCHEMA","subject":"a","version":"3","magic":"1"}').version == 3
    with pytest.raises(RegistryRecordError):
        parse_key(b'{"keytype":"SCHEMA","subject":"a","version":1.5,"magic":1}')


def test_finding_the_partition(tmp_path) -> None:
    with pytest.raises(UsageError, match="no _schemas-0 partition under"):
        load_schema_store([str(tmp_path)])
    shutil.copytree(REGISTRY / "_schemas-0", tmp_path / "d" / "registry-store-0")
    assert len(load_schema_store([str(tmp_path / "d")], topic="registry-store").versions) == 8
    assert len(load_schema_store([], schemas_from=str(tmp_path / "d" / "registry-store-0")).versions) == 8
    shutil.copytree(REGISTRY / "_schemas-0", tmp_path / "d" / "registry-store-1")
    store = load_schema_store([str(tmp_path / "d")], topic="registry-store")
    assert store.notes and "registry-store-1 not read" in store.notes[0]


def test_several_copies_read_the_leader(tmp_path) -> None:
    shutil.copytree(REGISTRY, tmp_path / "b1")
    short = write_partition(tmp_path / "b2" / "_schemas-0", data.records()[:5])
    store = load_schema_store([str(tmp_path / "b1"), str(tmp_path / "b2")])
    assert store.partition_path == str(tmp_path / "b1" / "_schemas-0") and short.exists()
    assert "2 copies of _schemas-0 found" in store.notes[0]


def test_write_schema_files(tmp_path, store) -> None:
    versions = store.versions_of("orders-value", include_deleted=True) + store.versions_of("pings-value") \
        + store.versions_of("events-value")
    written = write_schema_files(str(tmp_path / "out"), versions)
    assert sorted(Path(p).relative_to(tmp_path / "out").as_posix() for p in written.values()) == [
        "events-value/v1.json", "orders-value/v1.avsc", "orders-value/v2.avsc", "pings-value/v1.proto"]
    assert (tmp_path / "out" / "pings-value" / "v1.proto").read_text() == data.PROTO
    assert (tmp_path / "out" / "orders-value" / "v2.avsc").read_bytes() == data._c(data.ORDER_V2).encode()
    assert not list((tmp_path / "out").rglob("*.tmp*"))
    with pytest.raises(UsageError, match="--write-to is or lies inside the input"):
        write_schema_files(str(REGISTRY / "x"), versions, inputs=[str(REGISTRY)])


def test_subject_file_names_stay_inside() -> None:
    assert schema_file_name("orders-value") == "orders-value"
    assert schema_file_name(":.ctx:com.acme.Order") == ":.ctx:com.acme.Order"
    assert schema_file_name("../etc/passwd") == "..%2Fetc%2Fpasswd"
    assert schema_file_name("..") == "%2E%2E" and schema_file_name(".") == "%2E"
