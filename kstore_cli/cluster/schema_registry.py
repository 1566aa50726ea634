"""Confluent Schema Registry's schemas, read from its store topic (``kafkastore.topic``, ``_schemas``) with no
registry running: the topic replayed as the registry's KafkaStoreReaderThread applies it to its store.

Records in offset order, each key the registry's JSON (kstore_cli.parsers.schema_registry); the last write per
key wins (keytype, subject and version: the store's SubjectKeyComparator) and a null value deletes the key (a
hard delete). On top of the store, KafkaStoreMessageHandler's rules:

- a SCHEMA record whose id is already registered with another schema text is not applied (validateUpdate's
  "duplicate ID": the leader rolls it back, a follower ignores it);
- a SCHEMA record (soft-deleted or not) maps its id to its subject and version; a tombstone removes that
  mapping (InMemoryCache.schemaRegistered / schemaDeleted / schemaTombstoned);
- DELETE_SUBJECT {subject, version} soft-deletes the subject's versions 1..version (handleDeleteSubject);
- CLEAR_SUBJECT {subject} removes the subject's soft-deleted versions (InMemoryCache.clearSubjects);
- NOOP keys (KafkaStore writes them to find the log end) change nothing;
- CONFIG and MODE hold per-subject and (without a subject) global compatibility and mode; a value without a
  subject takes the key's (legacy values, validateUpdate).

A record the registry's reader would not apply (a key or value its serializer rejects) is not applied here
either, and is named in :attr:`SchemaStore.problems` (file, offset, why): never skipped silently.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from kstore_cli.cluster.coordinator import coordinator_batches
from kstore_cli.cluster.replicas import load_copy, reconcile
from kstore_cli.errors import UsageError
from kstore_cli.log.fileops import atomic_write, make_dirs
from kstore_cli.log.logdir import Partition, resolve
from kstore_cli.log.scope import check_output_dir
from kstore_cli.parsers import schema_registry as wire
from kstore_cli.parsers.schema_registry import RegistryKey, RegistryRecordError, SchemaReference

#: The registry's kafkastore.topic default.
DEFAULT_TOPIC = "_schemas"
#: schema.compatibility.level's default (SchemaRegistryConfig), used where no CONFIG record sets one.
DEFAULT_COMPATIBILITY = "BACKWARD"
#: The mode of a registry with no MODE record (AbstractSchemaRegistry.defaultMode).
DEFAULT_MODE = "READWRITE"
#: Each schema type's file extension for --write-to.
EXTENSIONS = {"AVRO": ".avsc", "JSON": ".json", "PROTOBUF": ".proto"}


@dataclass
class SchemaVersion:
    """One version of a subject, as the registry holds it."""

    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: List[SchemaReference]
    deleted: bool
    #: The record that wrote it (offset and timestamp, as the registry keeps them on the value).
    offset: int
    timestamp: int


@dataclass
class Problem:
    """A record of the store topic that the registry would not apply."""

    path: str
    offset: int
    reason: str


@dataclass
class SchemaStore:
    """The registry's state at the end of its store topic."""

    topic: str
    #: The partition directory read (None when none was found).
    partition_path: Optional[str] = None
    versions: Dict[Tuple[str, int], SchemaVersion] = field(default_factory=dict)
    #: id -> {subject: version} (InMemoryCache.guidToSubjectVersions, default context).
    ids: Dict[int, Dict[str, int]] = field(default_factory=dict)
    #: subject (None: global) -> the CONFIG value's JSON object.
    configs: Dict[Optional[str], dict] = field(default_factory=dict)
    #: subject (None: global) -> mode.
    modes: Dict[Optional[str], str] = field(default_factory=dict)
    problems: List[Problem] = field(default_factory=list)
    #: Records read, and per keytype how many.
    records: int = 0
    keytypes: Dict[str, int] = field(default_factory=dict)
    tombstones: int = 0
    #: Notes on the input (other copies or partitions of the topic seen, which one was read).
    notes: List[str] = field(default_factory=list)

    def subjects(self, include_deleted: bool = False) -> List[str]:
        """Subjects with a version (a live one, unless `include_deleted`), sorted."""
        return sorted({s for (s, _v), sv in self.versions.items() if include_deleted or not sv.deleted})

    def by_subject(self, include_deleted: bool = False) -> Dict[str, List[SchemaVersion]]:
        """Subject -> its versions in version order (live ones, unless `include_deleted`), subjects sorted: one
        pass over the store."""
        out: Dict[str, List[SchemaVersion]] = {}
        for (subject, _v), sv in sorted(self.versions.items()):
            if include_deleted or not sv.deleted:
                out.setdefault(subject, []).append(sv)
        return out

    def versions_of(self, subject: str, include_deleted: bool = False) -> List[SchemaVersion]:
        return sorted((sv for (s, _v), sv in self.versions.items()
                       if s == subject and (include_deleted or not sv.deleted)), key=lambda sv: sv.version)

    def latest(self, subject: str) -> Optional[SchemaVersion]:
        """The subject's latest live version (what ``GET /subjects/{s}/versions/latest`` serves)."""
        live = self.versions_of(subject)
        return live[-1] if live else None

    def by_id(self, schema_id: int) -> Optional[SchemaVersion]:
        """The schema registered under `schema_id` (soft-deleted ones included, as ``GET /schemas/ids/{id}``)."""
        for subject, version in sorted(self.ids.get(schema_id, {}).items()):
            found = self.versions.get((subject, version))
            if found is not None:
                return found
        return None

    def compatibility(self, subject: Optional[str]) -> Tuple[str, str]:
        """The level the registry applies to `subject` and where it comes from: "subject", "global" (the
        global CONFIG record) or "default" (schema.compatibility.level's default; a registry configured
        otherwise applies its own)."""
        if subject is not None and self.configs.get(subject, {}).get("compatibilityLevel"):
            return self.configs[subject]["compatibilityLevel"], "subject"
        if self.configs.get(None, {}).get("compatibilityLevel"):
            return self.configs[None]["compatibilityLevel"], "global"
        return DEFAULT_COMPATIBILITY, "default"

    def mode(self, subject: Optional[str]) -> Tuple[str, str]:
        """The mode of `subject` and its source, as :meth:`compatibility`."""
        if subject is not None and self.modes.get(subject):
            return self.modes[subject], "subject"
        if self.modes.get(None):
            return self.modes[None], "global"
        return DEFAULT_MODE, "default"


class _Replay:
    """KafkaStoreReaderThread.doWork and KafkaStoreMessageHandler over one partition's records."""

    def __init__(self, store: SchemaStore) -> None:
        self.store = store

    def record(self, path: str, offset: int, timestamp: int, key: Optional[bytes], value: Optional[bytes]) -> None:
        store = self.store
        store.records += 1
        try:
            parsed = wire.parse_key(key)
            store.keytypes[parsed.keytype] = store.keytypes.get(parsed.keytype, 0) + 1
            if parsed.keytype == "NOOP":
                return
            if value is None:
                store.tombstones += 1
                self._tombstone(parsed)
                return
            self._apply(parsed, value, offset, timestamp)
        except RegistryRecordError as exc:
            store.problems.append(Problem(path, offset, str(exc)))

    def _tombstone(self, key: RegistryKey) -> None:
        store = self.store
        if key.keytype == "SCHEMA":
            old = store.versions.pop((key.subject, key.version), None)
            if old is not None:
                self._unmap_id(old)
        elif key.keytype == "CONFIG":
            store.configs.pop(key.subject, None)
        elif key.keytype == "MODE":
            store.modes.pop(key.subject, None)

    def _apply(self, key: RegistryKey, value: bytes, offset: int, timestamp: int) -> None:
        store = self.store
        if key.keytype == "SCHEMA":
            self._schema(key, wire.parse_schema_value(value), offset, timestamp)
        elif key.keytype == "CONFIG":
            config = wire.parse_config_value(value)
            store.configs[key.subject] = config
        elif key.keytype == "MODE":
            store.modes[key.subject] = wire.parse_mode_value(value)
        elif key.keytype == "DELETE_SUBJECT":
            subject, up_to = wire.parse_delete_subject_value(value)
            for sv in store.versions.values():
                if sv.subject == subject and sv.version <= up_to:
                    sv.deleted = True
        elif key.keytype == "CLEAR_SUBJECT":
            self._clear(wire.parse_clear_subject_value(value))
        # ASSOC and CONTEXT records hold no schema: counted in keytypes only.

    def _schema(self, key: RegistryKey, value: wire.SchemaValue, offset: int, timestamp: int) -> None:
        store = self.store
        if key.subject is None or key.version is None:
            raise RegistryRecordError("a SCHEMA key without a subject or a version")
        holder = store.by_id(value.id)
        if holder is not None and holder.schema != value.schema:
            raise RegistryRecordError(
                f"schema id {value.id} is already registered with another schema ({holder.subject} version "
                f"{holder.version}): the registry does not apply this record (KafkaStoreMessageHandler: "
                "duplicate ID)")
        old = store.versions.get((key.subject, key.version))
        if old is not None and old.id != value.id:
            self._unmap_id(old)
        store.versions[(key.subject, key.version)] = SchemaVersion(
            key.subject, key.version, value.id, value.schema_type, value.schema, value.references, value.deleted,
            offset, timestamp)
        store.ids.setdefault(value.id, {})[key.subject] = key.version

    def _unmap_id(self, old: SchemaVersion) -> None:
        subjects = self.store.ids.get(old.id)
        if subjects is not None and subjects.get(old.subject) == old.version:
            del subjects[old.subject]
            if not subjects:
                del self.store.ids[old.id]

    def _clear(self, subject: Optional[str]) -> None:
        store = self.store
        for key, sv in list(store.versions.items()):
            if sv.deleted and _clear_matches(subject, sv.subject):
                del store.versions[key]
                self._unmap_id(sv)


def _clear_matches(cleared: Optional[str], subject: str) -> bool:
    """InMemoryCache.matchingSubjectPredicate: no subject clears all; a context (``:.ctx:``) its subjects."""
    if cleared is None:
        return True
    if cleared == subject:
        return True
    return cleared.startswith(":.") and cleared.endswith(":") and subject.startswith(cleared)


def find_store_partition(paths: Iterable[str], topic: str = DEFAULT_TOPIC,
                         schemas_from: Optional[str] = None) -> Tuple[Partition, List[str]]:
    """The store topic's partition to read, and notes on what else was seen. `schemas_from` names the partition
    dir; else ``<topic>-0`` under `paths` (several copies: the one Kafka would make leader, as ``kstore
    replicas`` chooses). The registry uses a single-partition topic: other partitions are named, not read."""
    notes: List[str] = []
    if schemas_from is not None:
        found = [t.partition for t in resolve([schemas_from])]
        if len({p.path for p in found}) != 1:
            raise UsageError("--schemas-from must name one partition directory (the store topic's partition 0)",
                             path=schemas_from)
        return found[0], notes
    partitions = {t.partition.path: t.partition for t in resolve(paths) if t.partition.topic == topic}
    zero = [p for p in partitions.values() if p.partition == 0]
    others = sorted(p.path for p in partitions.values() if p.partition != 0)
    if others:
        notes.append(f"{topic} has more partitions than the registry uses (it reads partition 0 only): "
                     + ", ".join(others) + " not read")
    if not zero:
        raise UsageError(f"no {topic}-0 partition under " + ", ".join(paths) + " (the registry's kafkastore.topic: "
                         "--schemas-topic NAME, or --schemas-from PARTITION_DIR)")
    if len(zero) == 1:
        return zero[0], notes
    chosen = reconcile(topic, 0, [load_copy(p) for p in zero]).leader.path
    notes.append(f"{len(zero)} copies of {topic}-0 found; read {chosen}, the copy Kafka would make leader "
                 "(highest leader epoch, then log end offset; kstore replicas compares them)")
    return next(p for p in zero if p.path == chosen), notes


def read_schema_store(partition: Partition, topic: str = DEFAULT_TOPIC) -> SchemaStore:
    """Replay one partition of the registry's store topic (control batches carry no store records)."""
    store = SchemaStore(topic, partition.path)
    replay = _Replay(store)
    for path, batch in coordinator_batches(partition):
        if batch.is_control:
            continue
        for record in batch:
            replay.record(path, record.offset, record.timestamp, record.key, record.value)
    return store


def load_schema_store(paths: Iterable[str], *, topic: str = DEFAULT_TOPIC,
                      schemas_from: Optional[str] = None) -> SchemaStore:
    """The registry's schemas from the store topic under `paths` (or the partition dir `schemas_from`)."""
    paths = list(paths)
    partition, notes = find_store_partition(paths, topic, schemas_from)
    store = read_schema_store(partition, topic)
    store.notes = notes
    return store


def schema_file_name(subject: str) -> str:
    """A subject as one directory name: ``/``, ``%`` and NUL percent-encoded, ``.`` and ``..`` spelled out
    (``%2E``), so that no subject names a path outside the output dir."""
    name = "".join(f"%{ord(c):02X}" if c in "/%\0" else c for c in subject)
    return "%2E" * len(name) if name in (".", "..", "") else name


def write_schema_files(directory: str, versions: Iterable[SchemaVersion], *,
                       inputs: Iterable[str] = ()) -> Dict[Tuple[str, int], str]:
    """Write each version's schema text, as registered, to ``directory/<subject>/v<version><ext>`` (``.avsc``,
    ``.json``, ``.proto``): each file crash-safe (temporary file, fsync, rename, directory fsync). The
    directory may not be or lie inside an input nor a Kafka data dir. Returns (subject, version) -> path."""
    check_output_dir(directory, option="--write-to", inputs=inputs)
    written: Dict[Tuple[str, int], str] = {}
    for sv in versions:
        folder = os.path.join(directory, schema_file_name(sv.subject))
        make_dirs(folder)
        path = os.path.join(folder, f"v{sv.version}{EXTENSIONS.get(sv.schema_type, '.txt')}")
        atomic_write(path, sv.schema.encode("utf-8"))
        written[(sv.subject, sv.version)] = path
    return written
