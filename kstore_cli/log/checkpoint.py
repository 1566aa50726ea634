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
import stat
import sys
import time
from array import array
from bisect import bisect_left
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from kstore_cli.errors import CorruptCheckpointError, FileUnreadableError
from kstore_cli.record.text import java_string_hash

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"

_WS = re.compile(r"\s+")


#: No checkpoint or properties file comes near this (100,000 partitions take ~5 MB); a larger one is not read.
MAX_TEXT_BYTES = 64 << 20


def _read_text(path: str) -> str:
    try:
        # O_NONBLOCK: opening a FIFO planted under a checkpoint's name must not hang (regular files ignore it).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise FileUnreadableError("not a regular file", path=path)
            if st.st_size > MAX_TEXT_BYTES:
                raise CorruptCheckpointError(
                    f"{st.st_size} bytes: larger than any text checkpoint ({MAX_TEXT_BYTES} bytes at most)", path=path)
            raw = f.read(st.st_size + 1)  # (read(n) allocates n bytes up front)
            if len(raw) > MAX_TEXT_BYTES:
                raise CorruptCheckpointError(f"larger than any text checkpoint ({MAX_TEXT_BYTES} bytes at most)",
                                             path=path)
    except FileNotFoundError:
        raise FileUnreadableError("no such file", path=path) from None
    except OSError as exc:
        raise FileUnreadableError(f"cannot be read: {exc.strerror or exc}", path=path) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Kafka reads these files as UTF-8 (MalformedInputException, an IOException).
        raise CorruptCheckpointError("not UTF-8 text", path=path, position=exc.start) from None


# Java's Integer.parseInt / Long.parseLong accept an optional sign and ASCII digits, nothing else.
_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _java_int(text: str, bounds: Tuple[int, int]) -> Optional[int]:
    """The value Java's parseInt/parseLong gives `text`, or None where it throws NumberFormatException."""
    if not _JAVA_INT.match(text) or len(text.lstrip("+-").lstrip("0")) > 19:  # past int64 anyway; int() of
        return None                                                              # 5000 digits would refuse
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def _java_split_ws(line: str) -> List[str]:
    """``line.split("\\s+")`` as Java does it: a leading empty field is kept, trailing ones dropped."""
    parts = re.split(r"[ \t\n\x0b\f\r]+", line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _lines_with_positions(text: str) -> Iterator[Tuple[str, int]]:
    """(line, byte position of its start) as BufferedReader.readLine splits them (\\n, \\r, \\r\\n)."""
    pos = 0
    for match in re.finditer(r"([^\r\n]*)(\r\n|\r|\n|\Z)", text):
        line, end = match.group(1), match.group(2)
        if not line and not end:
            break
        yield line, pos
        pos += len((line + end).encode("utf-8"))


def _malformed(path: str, line: str, position: int) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"Malformed line in checkpoint file [{path}]: {line}", path=path, position=position)


def _bad_number(path: str, line: str, position: int, field: str) -> CorruptCheckpointError:
    """An entry field Java cannot parse: the entry formatters call parseInt/parseLong unguarded, so Kafka
    throws NumberFormatException (not the IOException of a malformed line); ``number_format`` says so."""
    exc = CorruptCheckpointError(
        f'Malformed line in checkpoint file [{path}]: {line} (NumberFormatException: For input string: "{field}")',
        path=path, position=position)
    exc.number_format = True  # type: ignore[attr-defined]
    return exc


def _read_checkpoint_lines(path: str, expected_version: int) -> Iterator[Tuple[str, int]]:
    """The entry lines (with their byte positions) of a CheckpointFile, checked as CheckpointReadBuffer.read
    does, one at a time (a checkpoint of 10,000 partitions is not held as lines): an entry count that does
    not match is raised after the entries it names."""
    lines = _lines_with_positions(_read_text(path))
    first = next(lines, None)
    if first is None:
        return
    version_line, version_pos = first
    version = _java_int(version_line, _INT32)
    if version is None:
        raise _malformed(path, version_line, version_pos)
    if version != expected_version:
        raise CorruptCheckpointError(
            f"Unrecognised version:{version}, expected version: {expected_version} in checkpoint file at: {path}",
            path=path, position=version_pos,
        )
    second = next(lines, None)
    if second is None:
        return
    count_line, count_pos = second
    count = _java_int(count_line, _INT32)
    if count is None or count < 0:  # a negative count fails `new ArrayList<>(count)`
        raise _malformed(path, count_line, count_pos)
    found = 0
    for line, pos in lines:
        if found == count:
            total = found + 1 + sum(1 for _ in lines)
            raise CorruptCheckpointError(
                f"Expected [{count}] entries in checkpoint file [{path}], but found only [{total}]",
                path=path, position=pos)
        found += 1
        yield line, pos
    if found != count:
        raise CorruptCheckpointError(
            f"Expected [{count}] entries in checkpoint file [{path}], but found only [{found}]",
            path=path, position=count_pos)


def _offset_entries(path: str) -> Iterator[Tuple[str, int, int]]:
    """(topic, partition, offset) of each entry of an OffsetCheckpointFile, checked as Kafka reads it."""
    for line, pos in _read_checkpoint_lines(path, 0):
        fields = _java_split_ws(line)
        if len(fields) != 3:
            raise _malformed(path, line, pos)
        partition = _java_int(fields[1], _INT32)
        if partition is None:
            raise _bad_number(path, line, pos, fields[1])
        offset = _java_int(fields[2], _INT64)
        if offset is None:
            raise _bad_number(path, line, pos, fields[2])
        yield sys.intern(fields[0]), partition, offset  # one string per topic, not per entry (10k partitions)


def read_offset_checkpoint(path: "str | os.PathLike[str]") -> Dict[Tuple[str, int], int]:
    """{(topic, partition): offset} from an OffsetCheckpointFile (recovery point, log start, HW, cleaner)."""
    return {(topic, partition): offset for topic, partition, offset in _offset_entries(os.fspath(path))}


class OffsetCheckpointEntries(Mapping[Tuple[str, int], int]):
    """An OffsetCheckpointFile's entries as a read-only mapping {(topic, partition): offset}, held compactly:
    per topic its partitions and offsets in two sorted arrays, 12 bytes an entry rather than about 170 as a
    dict's (a data dir of 10,000 partitions). A partition named twice has its last offset, as in a dict."""

    __slots__ = ("_topics", "_len")

    def __init__(self, entries: Iterable[Tuple[str, int, int]]) -> None:
        staged: Dict[str, Tuple[array, array]] = {}
        for topic, partition, offset in entries:
            partitions, offsets = staged.get(topic) or staged.setdefault(topic, (array("i"), array("q")))
            partitions.append(partition)
            offsets.append(offset)
        self._topics: Dict[str, Tuple[array, array]] = {}
        for topic, (partitions, offsets) in staged.items():
            last = {p: i for i, p in enumerate(partitions)}  # the last entry of each partition
            order = sorted(last)
            self._topics[topic] = (array("i", order), array("q", (offsets[last[p]] for p in order)))
        self._len = sum(len(partitions) for partitions, _ in self._topics.values())  # asked once a partition

    @classmethod
    def read(cls, path: "str | os.PathLike[str]") -> "OffsetCheckpointEntries":
        """The entries of the OffsetCheckpointFile at `path` (CorruptCheckpointError as Kafka would fail)."""
        return cls(_offset_entries(os.fspath(path)))

    def __getitem__(self, key: Tuple[str, int]) -> int:
        topic, partition = key
        found = self._topics.get(topic)
        if found is not None:
            at = bisect_left(found[0], partition)
            if at < len(found[0]) and found[0][at] == partition:
                return found[1][at]
        raise KeyError(key)

    def __iter__(self) -> Iterator[Tuple[str, int]]:
        for topic, (partitions, _) in self._topics.items():
            for partition in partitions:
                yield topic, partition

    def __len__(self) -> int:
        return self._len


def format_offset_checkpoint(entries: Dict[Tuple[str, int], int]) -> str:
    """OffsetCheckpointFile text for these entries."""
    lines = ["0", str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in entries.items()]
    return "\n".join(lines) + "\n"


def read_leader_epoch_checkpoint(path: "str | os.PathLike[str]") -> List[Tuple[int, int]]:
    """[(epoch, start offset)] in file (ascending epoch) order."""
    path = os.fspath(path)
    out = []
    for line, pos in _read_checkpoint_lines(path, 0):
        fields = _java_split_ws(line)
        if len(fields) != 2:
            raise _malformed(path, line, pos)
        epoch = _java_int(fields[0], _INT32)
        if epoch is None:
            raise _bad_number(path, line, pos, fields[0])
        offset = _java_int(fields[1], _INT64)
        if offset is None:
            raise _bad_number(path, line, pos, fields[1])
        out.append((epoch, offset))
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


def format_partition_metadata(topic_id: str) -> bytes:
    """partition.metadata as PartitionMetadataFile.maybeFlush writes it (PartitionMetadata.encode): version 0,
    the topic ID in Uuid.toString's base64, and no newline after it."""
    return f"version: 0\ntopic_id: {topic_id}".encode()


_JAVA_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_JAVA_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: The keys in the order MetaProperties.toProperties puts them (the order within one hash bucket).
_META_KEY_ORDER = ("version", "cluster.id", "broker.id", "node.id", "directory.id")


def _java_properties_escape(text: str, key: bool) -> str:
    """Properties.saveConvert for a Writer (no \\uXXXX escapes)."""
    out = []
    for i, ch in enumerate(text):
        if ch == " " and (key or i == 0):
            out.append("\\ ")
        elif ch in "\\=:#!":
            out.append("\\" + ch)
        else:
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}.get(ch, ch))
    return "".join(out)


def format_meta_properties(props: Dict[str, str], when_ms: int) -> bytes:
    """meta.properties as MetaProperties.toProperties and PropertiesUtils.writePropertiesFile write it:
    ``Properties.store(writer, "")``, i.e. an empty comment line, the time (Date.toString, here in UTC), then
    the entries in the iteration order of Properties' ConcurrentHashMap (16 buckets for a handful of keys,
    by String.hashCode spread; the insertion order within a bucket)."""
    ordered = sorted(props, key=lambda k: (_META_KEY_ORDER.index(k) if k in _META_KEY_ORDER else len(_META_KEY_ORDER)))
    size = 16
    while len(ordered) > size * 3 // 4:
        size *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return ((h ^ (h >> 16)) & 0x7FFFFFFF) & (size - 1)

    keys = sorted(ordered, key=lambda k: (bucket(k), ordered.index(k)))  # sorted() is stable
    t = time.gmtime(when_ms / 1000)
    date = (f"{_JAVA_DAYS[t.tm_wday]} {_JAVA_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC {t.tm_year}")
    lines = ["#", "#" + date] + [f"{_java_properties_escape(k, True)}={_java_properties_escape(props[k], False)}"
                                 for k in keys]
    return ("\n".join(lines) + "\n").encode("utf-8")
