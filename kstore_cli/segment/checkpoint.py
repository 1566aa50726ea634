"""Text files of a log dir: offset checkpoints, leader-epoch checkpoint, partition.metadata,
the clean-shutdown marker and meta.properties.

Generic checkpoint format (CheckpointFile)::

    <version>\\n
    <entry count>\\n
    <entry>\\n ...
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Dict, List, Optional, Tuple

from kstore_cli.errors import CorruptCheckpointError, FileUnreadableError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"

_WS = re.compile(r"\s+")


def _read_text(path: str) -> str:
    try:
        with open(path, "r", encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise FileUnreadableError("no such file", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FileUnreadableError(f"cannot be read: {exc}", path=path) from None


def _read_checkpoint_lines(path: str, expected_version: int) -> List[str]:
    text = _read_text(path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return []
    try:
        version = int(lines[0])
    except ValueError:
        raise CorruptCheckpointError(f"Malformed line in checkpoint file [{path}]: {lines[0]}", path=path) from None
    if version != expected_version:
        raise CorruptCheckpointError(
            f"Unrecognised version:{version}, expected version: {expected_version} in checkpoint file at: {path}",
            path=path,
        )
    if len(lines) == 1:
        return []
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"Malformed line in checkpoint file [{path}]: {lines[1]}", path=path) from None
    entries = lines[2:]
    if len(entries) != count:
        raise CorruptCheckpointError(
            f"Expected [{count}] entries in checkpoint file [{path}], but found only [{len(entries)}]", path=path
        )
    return entries


def read_offset_checkpoint(path: "str | os.PathLike[str]") -> Dict[Tuple[str, int], int]:
    """{(topic, partition): offset} from an OffsetCheckpointFile (recovery point, log start, HW, cleaner)."""
    path = os.fspath(path)
    out: Dict[Tuple[str, int], int] = {}
    for line in _read_checkpoint_lines(path, 0):
        fields = _WS.split(line.strip())
        if len(fields) != 3:
            raise CorruptCheckpointError(f"Malformed line in checkpoint file [{path}]: {line}", path=path)
        try:
            out[(fields[0], int(fields[1]))] = int(fields[2])
        except ValueError:
            raise CorruptCheckpointError(f"Malformed line in checkpoint file [{path}]: {line}", path=path) from None
    return out


def format_offset_checkpoint(entries: Dict[Tuple[str, int], int]) -> str:
    """OffsetCheckpointFile text for these entries."""
    lines = ["0", str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in entries.items()]
    return "\n".join(lines) + "\n"


def read_leader_epoch_checkpoint(path: "str | os.PathLike[str]") -> List[Tuple[int, int]]:
    """[(epoch, start offset)] in file (ascending epoch) order."""
    path = os.fspath(path)
    out = []
    for line in _read_checkpoint_lines(path, 0):
        fields = _WS.split(line.strip())
        if len(fields) != 2:
            raise CorruptCheckpointError(f"Malformed line in checkpoint file [{path}]: {line}", path=path)
        try:
            out.append((int(fields[0]), int(fields[1])))
        except ValueError:
            raise CorruptCheckpointError(f"Malformed line in checkpoint file [{path}]: {line}", path=path) from None
    return out


def format_leader_epoch_checkpoint(entries: List[Tuple[int, int]]) -> str:
    lines = ["0", str(len(entries))] + [f"{epoch} {offset}" for epoch, offset in entries]
    return "\n".join(lines) + "\n"


def read_partition_metadata(path: "str | os.PathLike[str]") -> Dict[str, object]:
    """{"version": int, "topicId": str} from partition.metadata."""
    path = os.fspath(path)
    text = _read_text(path)
    lines = text.split("\n")
    if len(lines) < 2:
        raise CorruptCheckpointError(f"Malformed partition metadata file: expected 2 lines, found {len(lines)}", path=path)
    fields = {}
    for line in lines[:2]:
        parts = re.split(r":\s+", line, maxsplit=1)
        if len(parts) != 2:
            raise CorruptCheckpointError(f"Malformed line in partition metadata file: {line!r}", path=path)
        fields[parts[0]] = parts[1]
    try:
        version = int(fields.get("version", ""))
    except ValueError:
        raise CorruptCheckpointError("Malformed version in partition metadata file", path=path) from None
    if version < 0:
        raise CorruptCheckpointError(f"Invalid version {version} in partition metadata file", path=path)
    topic_id = fields.get("topic_id")
    if topic_id is None:
        raise CorruptCheckpointError("No topic_id in partition metadata file", path=path)
    try:
        raw = base64.urlsafe_b64decode(topic_id + "==")
    except ValueError:
        raw = b""
    if len(raw) != 16 or raw == bytes(16):
        raise CorruptCheckpointError(f"Invalid topic ID in partition metadata file ({path})", path=path)
    return {"version": version, "topicId": topic_id}


def read_clean_shutdown(path: "str | os.PathLike[str]") -> Optional[dict]:
    """The clean-shutdown marker's JSON ({} for the empty file older brokers wrote)."""
    path = os.fspath(path)
    text = _read_text(path).strip()
    if not text:
        return {}
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # deeply nested arrays exhaust json's recursion limit
        raise CorruptCheckpointError("clean-shutdown marker is not JSON", path=path) from None


def read_properties(path: "str | os.PathLike[str]") -> Dict[str, str]:
    """A Java properties file (meta.properties, server.properties), common syntax only."""
    path = os.fspath(path)
    props: Dict[str, str] = {}
    pending = ""
    for raw in _read_text(path).splitlines():
        line = pending + raw.lstrip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)$", line)
        if match:
            key, value = match.group(1), match.group(2)
        else:
            key, value = line, ""
        unescape = lambda s: re.sub(r"\\(.)", lambda m: {"t": "\t", "n": "\n", "r": "\r"}.get(m.group(1), m.group(1)), s)
        props[unescape(key)] = unescape(value)
    return props
