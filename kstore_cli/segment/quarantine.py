"""The quarantine dir a cut moves data into, beside the data dir: ``<root>/<partition>/<UTC time>/`` with a
manifest (``kstore-quarantine.json``) saying what was moved and cut and which checkpoints were lowered, so
that ``kstore restore`` can put it back. Shared by recovery's cut (``rebuild-index --truncate``,
``recover``), salvage and restore.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from typing import List, Optional

from kstore_cli.segment import fileops
from kstore_cli.segment.logdir import Partition

MANIFEST = "kstore-quarantine.json"


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
