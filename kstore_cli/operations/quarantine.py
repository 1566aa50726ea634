"""The quarantine dir a cut moves data into, beside the data dir: ``<root>/<partition>/<UTC time>/`` with a
manifest (``kstore-quarantine.json``) saying what was moved and cut and which checkpoints were lowered, so
that ``kstore restore`` can put it back. Shared by recovery's cut (``rebuild-index --truncate``,
``recover``), salvage and restore.

A quarantine dir and its manifest take the partition's owner, so the broker's user can edit them while
``kstore restore`` runs as root: :func:`load_manifest` is the one reader every command uses, and it
trusts nothing a manifest says about where files are (see its docstring).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import stat
from typing import Any, Dict, List, Optional

from kstore_cli.errors import FileUnreadableError, UsageError
from kstore_cli.record.reader import describe_kind
from kstore_cli.log import fileops, names
from kstore_cli.log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from kstore_cli.log.logdir import Partition

MANIFEST = "kstore-quarantine.json"
#: Manifests from version 2 on name every file by its bare name and record the size and sha256 of
#: every quarantined file; a manifest without "version" was written before (absolute paths, no hashes).
MANIFEST_VERSION = 2
#: The largest manifest kstore reads (a cut's manifest is a few KiB per thousand moved files).
_MAX_MANIFEST_BYTES = 64 << 20


def default_quarantine_root(partition: Partition) -> str:
    """``<data dir>/../kstore-quarantine``: beside the data dir, never inside it (the broker
    refuses a data dir holding a directory that is not a partition)."""
    return os.path.join(os.path.dirname(partition.data_dir), "kstore-quarantine")


def utc_stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def owner_tag(partition: Partition) -> str:
    """8 hex digits naming a partition dir by its real path: the quarantine dirs of same-named partitions of
    different data dirs that share a quarantine root (data dirs side by side, copies of several brokers)
    stay apart, so that one run never tidies, resumes or finishes another's."""
    return hashlib.sha1(os.path.realpath(partition.path).encode()).hexdigest()[:8]


def new_quarantine_dir(partition_root: str, partition: Partition, kind: str = "") -> str:
    """``<partition root>/<UTC time>-<owner tag>[-<kind>]`` (not created)."""
    return os.path.join(partition_root, f"{utc_stamp()}-{owner_tag(partition)}" + (f"-{kind}" if kind else ""))


def quarantine_dirs_of(partition_root: str, partition: Partition) -> List[str]:
    """The quarantine dirs under `partition_root` that this partition dir's runs made, oldest first: named
    with its owner tag, or (made before tags) whose manifest names it."""
    if not os.path.isdir(partition_root):
        return []
    tag, real = owner_tag(partition), os.path.realpath(partition.path)
    out = []
    for name in sorted(os.listdir(partition_root)):
        qdir = os.path.join(partition_root, name)
        if not os.path.isdir(qdir) or os.path.islink(qdir):
            continue
        parts = name.split("-")
        if len(parts) >= 2 and len(parts[1]) == 8 and parts[1] != "salvage":
            mine = parts[1] == tag
        else:
            manifest = read_manifest(qdir)
            mine = manifest is not None and os.path.realpath(str(manifest.get("partition"))) == real
        if mine:
            out.append(qdir)
    return out


def same_bytes(a: str, b: str, a_start: int = 0, a_end: Optional[int] = None) -> bool:
    """Whether file b holds exactly bytes [a_start, a_end) of file a (read in chunks)."""
    try:
        size_a = os.path.getsize(a) if a_end is None else a_end
        if os.path.getsize(b) != size_a - a_start:
            return False
    except OSError:
        return False
    return same_range(a, a_start, b, size_a - a_start)


def same_range(a: str, a_start: int, b: str, length: int) -> bool:
    """Whether bytes [a_start, a_start + length) of file a are the first `length` bytes of file b (read in
    chunks; a shorter b differs)."""
    try:
        with open(a, "rb") as fa, open(b, "rb") as fb:
            fa.seek(a_start)
            remaining = length
            while remaining > 0:
                n = min(remaining, 1 << 20)
                if fa.read(n) != fb.read(n):
                    return False
                remaining -= n
        return True
    except OSError:
        return False


def read_manifest(qdir: str) -> Optional[dict]:
    """A quarantine dir's manifest, or None when it has none or it does not parse."""
    try:
        with open(os.path.join(qdir, MANIFEST), "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def tidy_quarantine(partition_root: str, partition: Partition) -> None:
    """Remove what a killed run left half-done in earlier quarantine dirs of this partition dir: kstore's
    own temporary files and empty dirs. Quarantined data is never touched, nor another partition's dirs
    (a run on a same-named partition of another data dir may be writing there now)."""
    for qdir in quarantine_dirs_of(partition_root, partition):
        for name in sorted(os.listdir(qdir)):
            if name.endswith(fileops.TMP_SUFFIX):
                fileops.unlink(os.path.join(qdir, name))
        if not os.listdir(qdir):
            fileops.remove_empty_dir(qdir)


# --------------------------------------------------------------------------- reading a manifest safely

_SEGMENT_LOG = re.compile(r"[0-9]{20}\.log\Z")
_PARTITION_FILE = re.compile(r"[0-9]{20}\.(log|index|timeindex|txnindex|snapshot)\Z")
_SALVAGED_RANGE = re.compile(r"[0-9]{20}\.log\.[0-9]+-[0-9]+\.[A-Za-z0-9-]+\Z")
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_DATA_DIR_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                         CLEANER_OFFSET_CHECKPOINT)
_INDEX_SUFFIXES = (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)


def sha256_of(path: str, start: int = 0, end: Optional[int] = None) -> str:
    """The sha256 (hex) of bytes [start, end) of a file (to its end when end is None), read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        remaining = -1 if end is None else end - start
        while remaining != 0:
            chunk = f.read(1 << 20 if remaining < 0 else min(remaining, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            if remaining > 0:
                remaining -= len(chunk)
    return digest.hexdigest()


def file_record(path: str, start: int = 0, end: Optional[int] = None) -> Dict[str, Any]:
    """{"size", "sha256"} of bytes [start, end) of a file: what a manifest records of a quarantined file
    (computed from the source before it is moved or copied, since the manifest is written first)."""
    size = (os.path.getsize(path) if end is None else end) - start
    return {"size": size, "sha256": sha256_of(path, start, start + size)}


class QuarantineManifest:
    """A quarantine dir's manifest as :func:`load_manifest` checked it. `data` is the manifest with every
    file named by its bare name (a version-1 manifest's absolute paths reduced to theirs); the methods
    give the one place each name may be."""

    def __init__(self, qdir: str, data: Dict[str, Any], partition: str, legacy: bool, qdir_uid: int) -> None:
        self.qdir = qdir
        self.qdir_uid = qdir_uid
        self.path = os.path.join(qdir, MANIFEST)
        self.data = data
        self.partition = partition
        self.data_dir = os.path.dirname(partition)
        self.legacy = legacy
        self.kind = "salvage" if data.get("kind") == "salvage" else "cut"

    def in_partition(self, name: str) -> str:
        return os.path.join(self.partition, name)

    def in_quarantine(self, name: str) -> str:
        return os.path.join(self.qdir, name)

    def checkpoint_path(self, change: Dict[str, Any]) -> str:
        """A `checkpoints` entry's file: leader-epoch-checkpoint in the partition dir, the others in the data dir."""
        name = change["file"]
        return self.in_partition(name) if name == LEADER_EPOCH_CHECKPOINT else os.path.join(self.data_dir, name)

    def refuse(self, field: str, what: str) -> UsageError:
        return _refusal(self.path, field, what)

    def check_quarantined(self, name: str, record: Optional[Dict[str, Any]], field: str) -> None:
        """Refuse a quarantined file that is not a regular file of this quarantine dir (a hard link only to a
        file of the dir's owner) with the size and sha256 the manifest recorded (a version-1 manifest
        records neither: see the docs)."""
        path = self.in_quarantine(name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise FileUnreadableError(f"quarantined file missing ({field})", path=path) from None
        except OSError as exc:
            raise FileUnreadableError(f"cannot be examined: {exc.strerror or exc}", path=path) from None
        if not stat.S_ISREG(st.st_mode):
            raise self.refuse(field, f"{name} is {describe_kind(st.st_mode)}, not a regular file")
        if st.st_nlink != 1 and st.st_uid != self.qdir_uid:
            # A second name of the quarantine dir owner's own file (a hard-link backup of the data dir) adds
            # nothing that user could not read anyway; a link to anyone else's file may hold their bytes.
            raise self.refuse(field, f"{name} is a hard link ({st.st_nlink} names) to a file of uid {st.st_uid}, "
                                     f"not of the quarantine dir's owner")
        if record is None:
            return
        if st.st_size != record["size"]:
            raise self.refuse(field, f"{name} is {st.st_size} bytes, the manifest says {record['size']}")
        if sha256_of(path) != record["sha256"]:
            raise self.refuse(field, f"{name} does not have the sha256 the manifest recorded")


def _exactly(*allowed: str) -> "re.Pattern[str]":
    return re.compile("(?:" + "|".join(re.escape(a) for a in allowed) + r")\Z")


def _refusal(path: str, field: str, what: str) -> UsageError:
    return UsageError(f"{field}: {what}; refusing the manifest (nothing was changed)", path=path)


def _open_manifest(qdir: str) -> "tuple[bytes, os.stat_result]":
    path = os.path.join(qdir, MANIFEST)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileUnreadableError(f"no {MANIFEST}: not a kstore quarantine dir "
                                  "(give <quarantine root>/<partition>/<UTC time>)", path=qdir) from None
    except OSError as exc:
        if os.path.islink(path):
            raise UsageError("is a symbolic link; a quarantine manifest is never read through a link",
                             path=path) from None
        raise FileUnreadableError(f"cannot be read: {exc.strerror or exc}", path=path) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"is {describe_kind(st.st_mode)}, not a regular file", path=path)
        raw = f.read(_MAX_MANIFEST_BYTES + 1)
    if len(raw) > _MAX_MANIFEST_BYTES:
        raise UsageError(f"larger than {_MAX_MANIFEST_BYTES} bytes: not a kstore quarantine manifest", path=path)
    return raw, st


class _Checker:
    """Checks one manifest's fields (see :func:`load_manifest`); each refusal names the field."""

    def __init__(self, qdir: str, data: Dict[str, Any], legacy: bool) -> None:
        self.qdir, self.data, self.legacy = qdir, data, legacy
        self.path = os.path.join(qdir, MANIFEST)

    def fail(self, field: str, what: str) -> UsageError:
        return _refusal(self.path, field, what)

    def integer(self, value: Any, field: str, minimum: int = 0) -> int:
        if type(value) is not int or value < minimum:
            raise self.fail(field, f"{value!r} is not an integer >= {minimum}")
        return value

    def name(self, value: Any, field: str, directory: str, pattern: "re.Pattern[str]") -> str:
        """A bare file name of `directory` (a version-1 manifest's absolute path: only if it is in `directory`)."""
        if not isinstance(value, str) or not value or "\0" in value:
            raise self.fail(field, f"{value!r} is not a file name")
        if "/" in value:
            if not self.legacy:
                raise self.fail(field, f"{value!r} is not a bare file name (a manifest names files, never paths)")
            if not os.path.isabs(value) or os.path.normpath(value) != value:
                raise self.fail(field, f"{value!r} is not a file of {directory}")
            parent, value = os.path.split(value)
            if os.path.realpath(parent) != os.path.realpath(directory):
                raise self.fail(field, f"{os.path.join(parent, value)!r} is not a file of {directory}")
        if value in (".", "..") or not pattern.match(value):
            raise self.fail(field, f"{value!r} is not the name of a file kstore quarantines there")
        return value

    def record(self, entry: Dict[str, Any], field: str, required: bool) -> Optional[Dict[str, Any]]:
        """The {size, sha256} an entry records of a quarantined file (None: a version-1 manifest's, not recorded)."""
        if "sha256" not in entry and not required:
            return None
        size = self.integer(entry.get("size"), f"{field}.size")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise self.fail(f"{field}.sha256", f"{digest!r} is not a sha256")
        return {"size": size, "sha256": digest}

    def entries(self, field: str) -> List[Dict[str, Any]]:
        value = self.data.get(field, [])
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            raise self.fail(field, "not a list of objects")
        return value


def _lstat(path: str, missing: str) -> os.stat_result:
    """lstat(2) of `path`; a missing or unexaminable path is FileUnreadableError (exit 3)."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        raise FileUnreadableError(missing, path=path) from None
    except OSError as exc:
        raise FileUnreadableError(f"cannot be examined: {exc.strerror or exc}", path=path) from None


def _check_partition(checker: _Checker, value: Any, qdir_st: os.stat_result, manifest_st: os.stat_result,
                     expected: Optional[str]) -> str:
    """The manifest's partition dir: an absolute, normalized path of an existing directory (not a link)
    whose owner wrote the quarantine dir (or root did)."""
    if not isinstance(value, str) or "\0" in value or not os.path.isabs(value) or os.path.normpath(value) != value:
        raise checker.fail("partition", f"{value!r} is not the absolute path of a partition dir")
    if expected is not None and os.path.realpath(value) != os.path.realpath(expected):
        raise checker.fail("partition", f"names {value}, not this partition ({expected})")
    st = _lstat(value, "the partition dir of the quarantine manifest does not exist")
    if not stat.S_ISDIR(st.st_mode):
        raise checker.fail("partition", f"{value} is {describe_kind(st.st_mode)}, not a directory")
    # The quarantine dir and its manifest take the partition's owner: a user who could write them may
    # name only a partition that user owns (what such a user could change anyway), never root's or another's
    # (root's, the partition owner's and our own user's manifests are trusted that far).
    for what, owner_st in (("the quarantine dir", qdir_st), (MANIFEST, manifest_st)):
        if owner_st.st_uid not in (0, st.st_uid, os.geteuid()):
            raise checker.fail("partition", f"{what} belongs to uid {owner_st.st_uid}, {value} to uid {st.st_uid}")
        if owner_st.st_mode & stat.S_IWOTH:
            raise checker.fail("partition", f"{what} is writable by every user")
    return value


def _check_cut(c: _Checker, partition: str) -> Dict[str, Any]:
    """A cut's manifest (rebuild-index --truncate, recover) with every name bare and checked."""
    d = c.data
    out = dict(d)
    qdir, data_dir = c.qdir, os.path.dirname(partition)
    out["segment"] = segment = c.name(d.get("segment"), "segment", partition, _SEGMENT_LOG)
    base = names.base_offset_from_name(segment)
    valid = c.integer(d.get("validBytes"), "validBytes")
    before = c.integer(d.get("logSizeBefore"), "logSizeBefore")
    if valid > before:
        raise c.fail("validBytes", f"{valid} is past logSizeBefore {before}")
    if "nextOffset" in d:
        c.integer(d["nextOffset"], "nextOffset")
    tail = d.get("tailFile")
    if tail is not None:
        out["tailFile"] = c.name(tail, "tailFile", qdir, _exactly(segment + ".tail"))
        if not c.legacy or "tailSha256" in d:
            digest = d.get("tailSha256")
            if not isinstance(digest, str) or not _SHA256.match(digest):
                raise c.fail("tailSha256", f"{digest!r} is not a sha256")
    elif not c.legacy and "tailSha256" in d and d["tailSha256"] is not None:
        raise c.fail("tailSha256", "set without a tailFile")
    if "movedFiles" not in d:
        raise c.fail("movedFiles", "missing")
    out["movedFiles"] = _check_moved(c, partition, segment, base)
    originals = _check_originals(c, partition, segment)
    if "originalIndexes" in d:
        out["originalIndexes"] = originals
    out["checkpoints"] = _check_checkpoints(c, partition, data_dir)
    rolled = d.get("rolledSegment")
    if rolled is not None:
        out["rolledSegment"] = rolled = c.name(rolled, "rolledSegment", partition, _SEGMENT_LOG)
        if names.base_offset_from_name(rolled) <= base:
            raise c.fail("rolledSegment", f"{rolled} does not follow {segment}")
    return out


def _check_moved(c: _Checker, partition: str, segment: str, base: int) -> List[Dict[str, Any]]:
    """A cut's movedFiles: the later segments and snapshots, each moved out under its own name."""
    moved = []
    for i, entry in enumerate(c.entries("movedFiles")):
        field = f"movedFiles[{i}]"
        src = c.name(entry.get("from"), f"{field}.from", partition, _PARTITION_FILE)
        dst = c.name(entry.get("to"), f"{field}.to", c.qdir, _PARTITION_FILE)
        if src != dst:
            raise c.fail(field, f"moves {src} to another name ({dst})")
        if names.base_offset_from_name(src) <= base:  # later segments, snapshots past the new log end
            raise c.fail(field, f"{src} does not follow {segment}")
        moved.append({**entry, "from": src, "to": dst, **(c.record(entry, field, not c.legacy) or {})})
    return moved


def _check_originals(c: _Checker, partition: str, segment: str) -> List[Dict[str, Any]]:
    """A cut's originalIndexes: the cut segment's own indexes, each with its ``.orig`` copy (or none)."""
    prefix = segment[: -len(names.LOG_SUFFIX)]
    originals = []
    for i, entry in enumerate(c.entries("originalIndexes")):
        field = f"originalIndexes[{i}]"
        allowed = _exactly(*(prefix + s for s in _INDEX_SUFFIXES))
        name = c.name(entry.get("file"), f"{field}.file", partition, allowed)
        copy = entry.get("copy")
        if copy is not None:
            copy = c.name(copy, f"{field}.copy", c.qdir, _exactly(name + ".orig"))
        record = c.record(entry, field, not c.legacy) if copy is not None else None
        originals.append({**entry, "file": name, "copy": copy, **(record or {})})
    return originals


def _check_checkpoints(c: _Checker, partition: str, data_dir: str) -> List[Dict[str, Any]]:
    """A cut's checkpoint changes: this partition's entries of the data dir's checkpoints (offsets), or
    its leader-epoch-checkpoint (whole lists of [epoch, start offset])."""
    topic, number = names.parse_partition_dir(partition) or (os.path.basename(partition), -1)  # as Partition
    changes = []
    for i, entry in enumerate(c.entries("checkpoints")):
        field = f"checkpoints[{i}]"
        directory = partition if "topic" not in entry else data_dir
        allowed = (LEADER_EPOCH_CHECKPOINT,) if "topic" not in entry else _DATA_DIR_CHECKPOINTS
        name = c.name(entry.get("file"), f"{field}.file", directory,
                      _exactly(*allowed))
        if "topic" in entry:
            if entry.get("topic") != topic or entry.get("partition") != number:
                raise c.fail(field, f"names {entry.get('topic')}-{entry.get('partition')}, not {topic}-{number}")
            c.integer(entry.get("before"), f"{field}.before")
            if entry.get("after") is not None:
                c.integer(entry["after"], f"{field}.after")
            if "line" in entry:
                c.integer(entry["line"], f"{field}.line")
        else:
            for key in ("before", "after"):
                epochs = entry.get(key)
                if not isinstance(epochs, list) or not all(
                        isinstance(e, list) and len(e) == 2 and all(type(x) is int for x in e) for e in epochs):
                    raise c.fail(f"{field}.{key}", "not a list of [epoch, start offset]")
        changes.append({**entry, "file": name})
    return changes

def _check_salvage(c: _Checker, partition: str) -> Dict[str, Any]:
    """A salvage --in-place manifest: its saved ranges are bare names of the quarantine dir."""
    out = dict(c.data)
    ranges = []
    for i, entry in enumerate(c.entries("ranges")):
        field = f"ranges[{i}]"
        saved = c.name(entry.get("savedAs"), f"{field}.savedAs", c.qdir, _SALVAGED_RANGE)
        ranges.append({**entry, "savedAs": saved, **(c.record(entry, field, False) or {})})
    out["ranges"] = ranges
    return out


def load_manifest(qdir: str, *, partition: Optional[str] = None) -> QuarantineManifest:
    """A quarantine dir's manifest, checked before anything trusts it: the one reader of every command
    (restore, the resume of a cut, salvage's finish).

    The quarantine dir and the manifest are real (not links); the manifest names an existing partition dir
    (`partition`, when given, must be that one) owned by whoever owns the quarantine dir and the manifest
    (unless that is root or the user running kstore); every other file it names is a bare name (no separator, no ``..``, never absolute: a
    version-1 manifest's absolute path counts only if it is in the right dir) of the kind kstore writes
    there: the segment and moved files in the partition dir, the tail and copies in the quarantine dir,
    checkpoints by their Kafka names (leader-epoch-checkpoint in the partition dir, the others in the data
    dir, entries of this topic-partition only). Anything else raises UsageError (exit 2) naming the
    manifest and the field. Sizes and hashes of the quarantined files are checked by the caller
    (:meth:`QuarantineManifest.check_quarantined`) before its first change.
    """
    qdir = os.path.abspath(qdir)
    qdir_st = _lstat(qdir, "no such directory")
    if stat.S_ISLNK(qdir_st.st_mode):
        raise UsageError("is a symbolic link; name the quarantine dir itself", path=qdir)
    if not stat.S_ISDIR(qdir_st.st_mode):
        raise FileUnreadableError("not a directory", path=qdir)
    raw, manifest_st = _open_manifest(qdir)
    path = os.path.join(qdir, MANIFEST)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"not a valid quarantine manifest ({type(exc).__name__}: {exc})", path=path) from None
    if not isinstance(data, dict):
        raise UsageError("not a valid quarantine manifest (not a JSON object)", path=path)
    version = data.get("version")
    if version is not None and version != MANIFEST_VERSION:
        raise UsageError(f"version: {version!r} is not a manifest version this kstore reads "
                         f"({MANIFEST_VERSION}, or none)", path=path)
    if data.get("kind") == "repair":
        raise UsageError("written by `kstore repair`, which restore does not undo: its \"files\" are the files repair "
                         "replaced (copy one back over the file of the same name in the manifest's \"partition\" dir) "
                         "and \"moved\" a directory it moved out of the data dir", path=path)
    checker = _Checker(qdir, data, legacy=version is None)
    part = _check_partition(checker, data.get("partition"), qdir_st, manifest_st, partition)
    checked = _check_salvage(checker, part) if data.get("kind") == "salvage" else _check_cut(checker, part)
    return QuarantineManifest(qdir, checked, part, legacy=version is None, qdir_uid=qdir_st.st_uid)


def write_manifest(qdir: str, data: Dict[str, Any]) -> None:
    """Write a quarantine dir's manifest (atomically, through fileops)."""
    fileops.atomic_write(os.path.join(qdir, MANIFEST), (json.dumps(data, indent=2) + "\n").encode())
