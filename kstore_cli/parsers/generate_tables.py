"""Generates kstore's message tables from Kafka's own message JSON schemas (developer tool, not run at runtime).

Kafka describes every record it stores in JSON files (``metadata/src/main/resources/common/metadata/*.json``
for the KRaft cluster metadata records, ``group-coordinator/.../common/message/*.json`` for
``__consumer_offsets``, ...); its build turns them into Java classes. This script turns the same files into
the Python modules ``kstore_cli/parsers/metadata_records.py`` and ``kstore_cli/parsers/message_schemas.py``,
so the record type ids, versions, fields and tags kstore decodes are Kafka's, not typed in by hand. Kafka's
JSON files are not committed::

    python -m kstore_cli.parsers.generate_tables /path/to/kafka-checkout [--commit SHA] [-o OUT]

With a git checkout the commit is read from it (``git rev-parse HEAD``); ``--commit`` names it otherwise.
From a bare clone, extract the schema directories first, e.g.::

    git --git-dir kafka.git archive COMMIT metadata/src/main/resources/common/metadata \\
        group-coordinator/src/main/resources/common/message share-coordinator/src/main/resources/common/message \\
        transaction-coordinator/src/main/resources/common/message storage/src/main/resources/message \\
        clients/src/main/resources/common/message | tar -x -C /tmp/kafka
    python -m kstore_cli.parsers.generate_tables /tmp/kafka --commit COMMIT

The checkout may also be a plain directory holding the metadata ``*.json`` files themselves (then only
``metadata_records.py`` is written). With ``server-common/.../MetadataVersion.java`` in the checkout,
``metadata_versions.py`` (the metadata.version feature levels) is written too; Kafka 4 drops the levels below
3.3-IV3 from that enum, so ``--older-kafka DIR --older-commit SHA`` (a 3.x checkout or extract) supplies their
names (Kafka never reuses a level). ``--metadata-only`` leaves ``message_schemas.py`` as it is.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

METADATA_SCHEMA_DIR = "metadata/src/main/resources/common/metadata"
METADATA_VERSION_JAVA = "server-common/src/main/java/org/apache/kafka/server/common/MetadataVersion.java"
DEFAULT_OUTPUT = Path(__file__).with_name("metadata_records.py")
MESSAGES_OUTPUT = Path(__file__).with_name("message_schemas.py")
VERSIONS_OUTPUT = Path(__file__).with_name("metadata_versions.py")

#: table in message_schemas.py -> (what it holds, schema directory, file names (None: every *.json), keyed by
#: api key?, only files of this "type" (None: any))
MESSAGE_SOURCES = [
    ("GROUP_COORDINATOR", "__consumer_offsets records (GroupCoordinatorRecordSerde)",
     "group-coordinator/src/main/resources/common/message", None, False, None),
    ("SHARE_COORDINATOR", "__share_group_state records (ShareCoordinatorRecordSerde)",
     "share-coordinator/src/main/resources/common/message", None, False, None),
    ("TRANSACTION_COORDINATOR", "__transaction_state records (TransactionLog)",
     "transaction-coordinator/src/main/resources/common/message", None, False, None),
    ("CLIENTS", "the consumer protocol inside group metadata, and the KRaft control records",
     "clients/src/main/resources/common/message",
     ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "LeaderChangeMessage", "SnapshotHeaderRecord",
      "SnapshotFooterRecord", "KRaftVersionRecord", "VotersRecord"], False, None),
    ("REMOTE_LOG_METADATA", "__remote_log_metadata records by api key (RemoteLogMetadataSerde)",
     "storage/src/main/resources/message", None, True, "metadata"),
]

#: Keys of a field spec this generator understands; anything else stops it (a new schema feature
#: must be looked at, not silently ignored). ``about``/``entityType``/``ignorable``/``zeroCopy``
#: do not change how bytes decode; ``mapKey`` only makes Java use a keyed collection.
_FIELD_KEYS = {"name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default", "fields",
               "about", "entityType", "mapKey", "ignorable", "zeroCopy"}
_MESSAGE_KEYS = {"apiKey", "type", "name", "validVersions", "flexibleVersions", "fields", "commonStructs",
                 "latestVersionUnstable"}
_PRIMITIVES = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes",
               "uuid", "records"}


class SchemaFileError(Exception):
    """A schema file this generator cannot represent faithfully."""


def strip_comments(text: str) -> str:
    """Kafka's schema files allow ``//`` comment lines (its generator reads them with comments enabled)."""
    out = []
    for line in text.splitlines():
        in_string = False
        cut = len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\" and in_string:
                i += 2
                continue
            if c == '"':
                in_string = not in_string
            elif not in_string and line.startswith("//", i):
                cut = i
                break
            i += 1
        out.append(line[:cut])
    return "\n".join(out)


def load_spec(path: Path) -> Dict[str, Any]:
    """One schema file as a dict."""
    try:
        spec = json.loads(strip_comments(path.read_text(encoding="utf-8")))
    except ValueError as exc:
        raise SchemaFileError(f"{path}: not JSON: {exc}") from None
    unknown = set(spec) - _MESSAGE_KEYS
    if unknown:
        raise SchemaFileError(f"{path}: unsupported message keys {sorted(unknown)}")
    return spec


def to_snake_case(name: str) -> str:
    """``MessageGenerator.toSnakeCase``: an underscore before each capital that follows a non-capital."""
    out = []
    prev_capital = True
    for c in name:
        if c.isupper():
            if not prev_capital:
                out.append("_")
            out.append(c.lower())
            prev_capital = True
        else:
            out.append(c)
            prev_capital = False
    return "".join(out)


def _field_source(field: Dict[str, Any], common: Dict[str, List[Dict[str, Any]]], where: str,
                  indent: str) -> str:
    unknown = set(field) - _FIELD_KEYS
    if unknown:
        raise SchemaFileError(f"{where}.{field.get('name')}: unsupported field keys {sorted(unknown)}")
    name, type_ = field["name"], field["type"]
    element = type_[2:] if type_.startswith("[]") else type_
    subfields: Optional[List[Dict[str, Any]]] = field.get("fields")
    if subfields is None and element not in _PRIMITIVES:
        if element not in common:
            raise SchemaFileError(f"{where}.{name}: struct type {element} has no fields")
        subfields = common[element]
    if element == "records":
        raise SchemaFileError(f"{where}.{name}: the records type is not supported")
    # FieldSpec: a field without "versions" takes its taggedVersions; with neither it is an error.
    versions = field.get("versions", field.get("taggedVersions"))
    if versions is None:
        raise SchemaFileError(f"{where}.{name}: no versions")
    args = [repr(name), repr(type_), repr(versions)]
    for key, kw in (("nullableVersions", "nullable"), ("taggedVersions", "tagged")):
        if key in field:
            args.append(f"{kw}={field[key]!r}")
    if "tag" in field:
        args.append(f"tag={int(field['tag'])}")
    if field.get("default") is not None:  # a JSON null default is Jackson's "not given"
        default = field["default"]
        args.append(f"default={default if isinstance(default, (bool, int)) else str(default)!r}")
    if field.get("mapKey"):
        args.append("map_key=True")
    if subfields is not None:
        inner = indent + "    "
        body = ",\n".join(inner + _field_source(f, common, f"{where}.{name}", inner) for f in subfields)
        args.append("fields=[\n" + body + ",\n" + indent + "]" if subfields else "fields=[]")
    return "F(" + ", ".join(args) + ")"


def message_source(spec: Dict[str, Any], where: str, indent: str = "    ") -> str:
    """``M(name, validVersions, flexibleVersions, [fields])`` for one schema file."""
    common = {c["name"]: c.get("fields", []) for c in spec.get("commonStructs", [])}
    inner = indent + "    "
    fields = ",\n".join(inner + _field_source(f, common, spec["name"], inner) for f in spec.get("fields", []))
    fields_src = "[\n" + fields + ",\n" + indent + "]" if fields else "[]"
    return (f"M({spec['name']!r}, {spec['validVersions']!r}, {spec.get('flexibleVersions', 'none')!r}, "
            f"{fields_src})")


def _commit_of(checkout: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def generate_metadata(schema_dir: Path, commit: str) -> str:
    """The source of ``metadata_records.py`` for the ``*.json`` files of ``schema_dir``."""
    specs = []
    for path in sorted(schema_dir.glob("*.json")):
        spec = load_spec(path)
        if spec.get("type") != "metadata":
            continue
        specs.append(spec)
    by_key: Dict[int, Dict[str, Any]] = {}
    for spec in specs:
        key = int(spec["apiKey"])
        if key in by_key:  # MetadataRecordTypeGenerator refuses the same clash
            raise SchemaFileError(f"api key {key} claimed by {by_key[key]['name']} and {spec['name']}")
        by_key[key] = spec
    if not by_key:
        raise SchemaFileError(f"{schema_dir}: no metadata schema files")
    lines = [
        '"""KRaft cluster metadata record types (``MetadataRecordType``) and their message schemas.',
        "",
        "GENERATED by ``python -m kstore_cli.parsers.generate_tables`` from Apache Kafka's",
        f"``{METADATA_SCHEMA_DIR}/*.json`` at commit {commit}.",
        "Do not edit by hand: regenerate (tests/parsers/test_metadata_records_oracle.py compares this table",
        "with the message classes the oracle's Kafka generated, for every record type that Kafka has).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Dict",
        "",
        "from kstore_cli.parsers.schema import F, Message, MetadataRecordType",
        "",
        "M = Message",
        "",
        f"KAFKA_COMMIT = {commit!r}",
        "",
        "#: api key -> record type, in api key order",
        "METADATA_RECORD_TYPES: Dict[int, MetadataRecordType] = {",
    ]
    for key in sorted(by_key):
        spec = by_key[key]
        enum_name = to_snake_case(spec["name"]).upper()
        lines.append(f"    {key}: MetadataRecordType({key}, {enum_name!r}, "
                     + message_source(spec, spec["name"], "    ") + "),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def generate_messages(kafka: Path, commit: str) -> str:
    """The source of ``message_schemas.py``: the tables of :data:`MESSAGE_SOURCES` from a Kafka checkout."""
    lines = [
        '"""The message schemas of the records kstore decodes besides KRaft metadata, by Kafka module.',
        "",
        "GENERATED by ``python -m kstore_cli.parsers.generate_tables`` from Apache Kafka's message JSON files",
        f"at commit {commit}:",
    ]
    for _, what, directory, names, _, _ in MESSAGE_SOURCES:
        lines.append(f"``{directory}/{'*' if names is None else '{' + ','.join(names) + '}'}.json``,")
    lines[-1] = lines[-1].rstrip(",") + "."
    lines += [
        "Do not edit by hand: regenerate (tests/parsers/test_schemas_oracle.py compares these tables with the",
        "classes Kafka generated from the same files).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Dict",
        "",
        "from kstore_cli.parsers.schema import F, Message",
        "",
        "M = Message",
        "",
        f"KAFKA_COMMIT = {commit!r}",
    ]
    for table, what, directory, names, by_api_key, only_type in MESSAGE_SOURCES:
        folder = kafka / directory
        paths = sorted(folder.glob("*.json")) if names is None else [folder / f"{n}.json" for n in names]
        entries = []
        for path in paths:
            if not path.is_file():
                raise SchemaFileError(f"{path}: missing")
            spec = load_spec(path)
            if only_type is not None and spec.get("type") != only_type:
                continue
            key = int(spec["apiKey"]) if by_api_key else spec["name"]
            entries.append((key, message_source(spec, spec["name"], "    ")))
        if not entries:
            raise SchemaFileError(f"{folder}: no schema files")
        if len({k for k, _ in entries}) != len(entries):
            raise SchemaFileError(f"{folder}: two schema files with one {'api key' if by_api_key else 'name'}")
        key_type = "int" if by_api_key else "str"
        lines += ["", f"#: {what}", f"{table}: Dict[{key_type}, Message] = {{"]
        lines += [f"    {k!r}: {src}," for k, src in (sorted(entries) if by_api_key else entries)]
        lines.append("}")
    return "\n".join(lines) + "\n"


#: ``IBP_4_1_IV0(26, "4.1", "IV0", false),``: the enum constant, feature level, release, sub-version
_MV_CONSTANT = re.compile(r'^\s*(IBP_\w+)\((-?\d+),\s*"([^"]+)",\s*"([^"]*)"(?:,\s*(?:true|false))?\)\s*[,;]',
                          re.MULTILINE)
_MV_ALIAS = re.compile(r"public static final MetadataVersion (LATEST_PRODUCTION|MINIMUM_VERSION|MINIMUM_KRAFT_VERSION)"
                       r"\s*=\s*(IBP_\w+);")


def parse_metadata_versions(java: str, where: str) -> Tuple[Dict[int, str], Dict[str, int]]:
    """The KRaft levels of a ``MetadataVersion.java`` (level -> ``version()``, e.g. ``4.1-IV0``) and its
    LATEST_PRODUCTION / MINIMUM_VERSION (or 3.x's MINIMUM_KRAFT_VERSION) as levels."""
    by_constant: Dict[str, int] = {}
    levels: Dict[int, str] = {}
    for constant, level, release, sub in _MV_CONSTANT.findall(java):
        by_constant[constant] = int(level)
        if int(level) > 0:  # -1: a ZooKeeper-era IBP with no feature level
            levels[int(level)] = f"{release}-{sub}" if sub else release
    if not levels:
        raise SchemaFileError(f"{where}: no MetadataVersion constant with a feature level")
    aliases = {name: by_constant[constant] for name, constant in _MV_ALIAS.findall(java) if constant in by_constant}
    if "LATEST_PRODUCTION" not in aliases:
        raise SchemaFileError(f"{where}: no LATEST_PRODUCTION")
    return levels, aliases


def generate_metadata_versions(java: str, commit: str, older: Optional[Tuple[str, str]] = None) -> str:
    """The source of ``metadata_versions.py`` from ``MetadataVersion.java`` (and an older one, `older` =
    (text, commit), for the levels the newer enum dropped)."""
    levels, aliases = parse_metadata_versions(java, "MetadataVersion.java")
    older_levels: Dict[int, str] = {}
    if older is not None:
        older_levels, _ = parse_metadata_versions(older[0], f"MetadataVersion.java at {older[1]}")
        for level, name in older_levels.items():
            if levels.get(level, name) != name:
                raise SchemaFileError(f"level {level} is {name} at {older[1]} but {levels[level]} at {commit}")
    filled = sorted(set(older_levels) - set(levels))
    table = {**older_levels, **levels}
    lines = [
        '"""metadata.version feature levels (``MetadataVersion``): the name of each KRaft level.',
        "",
        "GENERATED by ``python -m kstore_cli.parsers.generate_tables`` from Apache Kafka's",
        f"``{METADATA_VERSION_JAVA}`` at commit {commit}"
        + (f"\n(level{'s' if len(filled) > 1 else ''} {filled[0]}"
           + (f"-{filled[-1]}" if len(filled) > 1 else "") + f", which that Kafka no longer lists, from commit {older[1]})."
           if filled and older is not None else "."),
        "Do not edit by hand: regenerate. Kafka never reuses a level, so a level's name does not change.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Dict",
        "",
        f"KAFKA_COMMIT = {commit!r}",
        "",
        "#: feature level -> ``MetadataVersion.version()``",
        "METADATA_VERSIONS: Dict[int, str] = {",
    ]
    lines += [f"    {level}: {name!r}," for level, name in sorted(table.items())]
    lines += [
        "}",
        "#: ``MetadataVersion.LATEST_PRODUCTION``: the levels above it are unstable in that Kafka (\"may be changed\",",
        "#: refused unless ``unstable.feature.versions.enable``): a log at such a level may hold records kstore's",
        "#: schemas do not describe",
        f"LATEST_PRODUCTION_LEVEL = {aliases['LATEST_PRODUCTION']}",
    ]
    minimum = aliases.get("MINIMUM_VERSION", aliases.get("MINIMUM_KRAFT_VERSION"))
    if minimum is not None:
        lines += ["#: ``MetadataVersion.MINIMUM_VERSION``: the lowest level that Kafka's broker and controller accept",
                  f"MINIMUM_LEVEL = {minimum}"]
    return "\n".join(lines) + "\n"


def _outputs(args: argparse.Namespace, schema_dir: Path, checkout: bool, commit: str) -> List[Tuple[Path, str]]:
    outputs = [(args.output, generate_metadata(schema_dir, commit))]
    java = args.kafka / METADATA_VERSION_JAVA
    if java.is_file():
        older = None
        if args.older_kafka is not None:
            older_java = args.older_kafka / METADATA_VERSION_JAVA
            if not older_java.is_file():
                raise SchemaFileError(f"{older_java}: missing")
            older = (older_java.read_text(encoding="utf-8"), args.older_commit or _commit_of(args.older_kafka) or "?")
        outputs.append((args.versions_output,
                        generate_metadata_versions(java.read_text(encoding="utf-8"), commit, older)))
    if checkout and not args.metadata_only:
        outputs.append((args.messages_output, generate_messages(args.kafka, commit)))
    return outputs


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kstore_cli.parsers.generate_tables", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kafka", type=Path, help="an apache/kafka checkout, or a directory of the *.json files")
    ap.add_argument("--commit", help="the Kafka commit the files come from (default: git rev-parse HEAD)")
    ap.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT, help="the metadata_records.py to write")
    ap.add_argument("--messages-output", type=Path, default=MESSAGES_OUTPUT, help="the message_schemas.py to write")
    ap.add_argument("--versions-output", type=Path, default=VERSIONS_OUTPUT, help="the metadata_versions.py to write")
    ap.add_argument("--metadata-only", action="store_true", help="write no message_schemas.py")
    ap.add_argument("--older-kafka", type=Path, help="an older checkout whose MetadataVersion.java names the "
                                                     "levels the newer one dropped")
    ap.add_argument("--older-commit", help="the commit of --older-kafka")
    args = ap.parse_args(argv)
    schema_dir = args.kafka / METADATA_SCHEMA_DIR
    checkout = schema_dir.is_dir()
    if not checkout:
        schema_dir = args.kafka
    commit = args.commit or _commit_of(args.kafka)
    if not commit or not re.fullmatch(r"[0-9a-f]{40}", commit):
        ap.error("give the Kafka commit the schema files come from with --commit (40 hex digits)")
    try:
        outputs = _outputs(args, schema_dir, checkout, commit)
    except SchemaFileError as exc:
        print(f"generate_tables: error: {exc}", file=sys.stderr)
        return 1
    for path, source in outputs:
        path.write_text(source, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
