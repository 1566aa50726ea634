"""Undoing a ``rebuild-index --truncate``: putting a quarantine dir's files and checkpoints back.

A quarantine dir (``<root>/<partition>/<UTC time>/``) holds ``kstore-quarantine.json`` (what the
cut did: the segment, its size before and after, the tail file, the files moved out, the
checkpoint values lowered), the cut tail and the later segments and snapshots. :func:`plan_restore`
checks that the partition is still exactly as the cut left it (or as a killed restore left it);
:func:`apply_restore` then, each step through :mod:`.fileops` and so crash-safe:

1. appends the tail back to its ``.log`` (a kill midway leaves a partial tail, which Kafka's
   recovery cuts and the rerun completes);
2. puts the damaged segment's original indexes back (copies the cut kept), then moves the later files back (oldest first, each ``.log`` before its indexes: a kill leaves at
   worst a segment whose indexes a broker rebuilds);
3. raises the checkpoints back to their recorded values (after the files: never ahead of them);
4. marks the manifest ``"restored"`` (the quarantine dir keeps it and the tail file, now a copy).

A rerun accepts every step already done, so it finishes whatever a kill interrupted.
"""

from __future__ import annotations

import datetime
import json
import os
from typing import List, Optional, Tuple

from kstore_cli.errors import CorruptDataError, FileUnreadableError, KstoreError
from kstore_cli.segment import fileops, names
from kstore_cli.segment.checkpoint import (
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
)
from kstore_cli.segment.quarantine import MANIFEST, same_bytes, same_range

_CHUNK = 1 << 20


class PartitionChangedError(CorruptDataError):
    """The partition is no longer as the cut left it: restoring would mix two histories."""


class RestorePlan:
    """What :func:`apply_restore` will do for one quarantine dir."""

    def __init__(self, qdir: str, manifest: dict) -> None:
        self.qdir = qdir
        self.manifest = manifest
        self.partition: str = manifest["partition"]
        self.segment: str = manifest["segment"]
        self.already_restored = bool(manifest.get("restored"))
        #: Bytes still to append to the segment, from this offset of the cut tail.
        self.append_from: Optional[int] = None
        self.append_bytes = 0
        #: (quarantined file, its place in the partition) still to move back.
        self.moves: List[Tuple[str, str]] = []
        #: Checkpoint changes still to undo (manifest entries).
        self.checkpoints: List[dict] = []

    @property
    def data_dir(self) -> str:
        return os.path.dirname(os.path.realpath(self.partition))

    @property
    def nothing_to_do(self) -> bool:
        return self.already_restored

    def to_dict(self) -> dict:
        return {"type": "restore", "quarantineDir": self.qdir, "partition": self.partition, "segment": self.segment,
                "alreadyRestored": self.already_restored, "appendBytes": self.append_bytes,
                "moveBack": [{"from": a, "to": b} for a, b in self.moves],
                "checkpoints": [{"file": c["file"], "from": c["after"], "to": c["before"]} for c in self.checkpoints]}


def _load_manifest(qdir: str) -> dict:
    path = os.path.join(qdir, MANIFEST)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileUnreadableError(f"no {MANIFEST}: not a kstore quarantine dir "
                                  "(give <quarantine root>/<partition>/<UTC time>)", path=qdir) from None
    except OSError as exc:
        raise FileUnreadableError(f"cannot be read: {exc.strerror or exc}", path=path) from None
    try:
        manifest = json.loads(raw.decode("utf-8"))
        for key in ("partition", "segment", "validBytes", "logSizeBefore", "movedFiles"):
            manifest[key]
        int(manifest["validBytes"]), int(manifest["logSizeBefore"])
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise CorruptDataError(f"not a valid quarantine manifest ({type(exc).__name__}: {exc})", path=path) from None
    return manifest


def _changed(plan: RestorePlan, what: str) -> PartitionChangedError:
    return PartitionChangedError(
        f"the partition changed since the cut ({what}); refusing to restore into it: a broker or another tool "
        f"wrote it after {plan.qdir}", path=plan.partition)


def _checkpoint_value(change: dict):
    """The current value a manifest checkpoint entry refers to (None: no entry / no file)."""
    path = change["file"]
    if "topic" not in change:  # leader-epoch-checkpoint: the whole list
        if not os.path.exists(path):
            return []
        return [list(e) for e in read_leader_epoch_checkpoint(path)]
    if not os.path.exists(path):
        return None
    return read_offset_checkpoint(path).get((change["topic"], int(change["partition"])))


def plan_restore(qdir: str) -> RestorePlan:
    """Check a quarantine dir against its partition; raise PartitionChangedError if the partition is
    not as the cut (or a killed restore) left it."""
    qdir = os.path.abspath(qdir)
    if not os.path.isdir(qdir):
        raise FileUnreadableError("no such directory", path=qdir)
    plan = RestorePlan(qdir, _load_manifest(qdir))
    if plan.already_restored:
        return plan
    manifest = plan.manifest
    valid, before = int(manifest["validBytes"]), int(manifest["logSizeBefore"])
    if not os.path.isdir(plan.partition):
        raise FileUnreadableError("the partition dir of the quarantine manifest does not exist", path=plan.partition)
    fileops.refuse_links(fileops.partition_files(plan.partition, plan.data_dir))
    log = plan.segment
    if not os.path.isfile(log):
        raise _changed(plan, f"{os.path.basename(log)} is gone")
    size = os.path.getsize(log)
    tail = manifest.get("tailFile")
    if size < valid or size > before:
        raise _changed(plan, f"{os.path.basename(log)} is {size} bytes, the cut left {valid}")
    if tail is not None:
        fileops.refuse_link(tail)
        if not os.path.isfile(tail) or os.path.getsize(tail) != before - valid:
            raise FileUnreadableError(f"the tail file is missing or not {before - valid} bytes", path=tail)
        # A restore killed midway: the bytes back in the .log are the tail's first bytes.
        if size > valid and not same_range(log, valid, tail, size - valid):
            raise _changed(plan, f"{os.path.basename(log)} has bytes past the cut that are not the tail's")
    elif size > valid and not _zeros(log, valid, size):
        raise _changed(plan, f"{os.path.basename(log)} has bytes past the cut that are not the cut zeros")
    if size < before:
        plan.append_from, plan.append_bytes = size - valid, before - size
    moved_from = set()
    for entry in manifest["movedFiles"]:
        src, dst = entry["to"], entry["from"]  # back: from the quarantine dir to the partition
        moved_from.add(os.path.basename(dst))
        here, there = os.path.lexists(src), os.path.lexists(dst)
        if here and not there:
            fileops.refuse_link(src)
            plan.moves.append((src, dst))
        elif there and not here:
            continue  # already back
        elif here and there:
            if not same_bytes(src, dst):
                raise _changed(plan, f"{os.path.basename(dst)} exists again with other bytes")
            plan.moves.append((src, dst))  # a move across file systems killed before its delete
        else:
            raise FileUnreadableError(f"quarantined file missing (and not back in the partition): {dst}", path=src)
    base = names.base_offset_from_name(log)
    for name in os.listdir(plan.partition):
        if name.endswith(names.LOG_SUFFIX) and name not in moved_from:
            head = name.split(".", 1)[0]
            if head.isdigit() and int(head) > base:
                raise _changed(plan, f"a new segment {name} follows the cut one")
    for entry in manifest.get("originalIndexes", []):
        if entry["copy"] is not None:
            fileops.refuse_link(entry["copy"])
            if not os.path.isfile(entry["copy"]):
                raise FileUnreadableError("the quarantined copy of an original index is missing", path=entry["copy"])
    for change in manifest.get("checkpoints", []):
        try:
            current = _checkpoint_value(change)
        except KstoreError as exc:
            raise _changed(plan, f"{os.path.basename(change['file'])} does not parse: {exc.message}") from None
        if current == change["after"]:
            plan.checkpoints.append(change)
        elif current != change["before"]:
            what = os.path.basename(change["file"])
            raise _changed(plan, f"{what} holds {current}, the cut left {change['after']}")
    return plan


def _zeros(path: str, start: int, end: int) -> bool:
    with open(path, "rb") as f:
        f.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = f.read(min(remaining, _CHUNK))
            if not chunk or chunk.count(0) != len(chunk):
                return False
            remaining -= len(chunk)
    return True


def apply_restore(plan: RestorePlan) -> None:
    """Put the cut tail, the moved files and the lowered checkpoints back (see the module doc)."""
    if plan.already_restored:
        return
    manifest = plan.manifest
    valid, before = int(manifest["validBytes"]), int(manifest["logSizeBefore"])
    if plan.append_from is not None:
        fileops.append_range(manifest.get("tailFile"), plan.segment, plan.append_from, before - valid,
                             expected_size=valid + plan.append_from)

    # The damaged segment's own indexes as they were before the cut (a manifest written before
    # kstore kept them has none: the cut's indexes then stay, and a broker's lookups scan further).
    for entry in manifest.get("originalIndexes", []):
        if entry["copy"] is None:
            fileops.unlink(entry["file"])
        else:
            fileops.copy_file(entry["copy"], entry["file"])

    def order(move: Tuple[str, str]) -> Tuple[int, bool, str]:
        name = os.path.basename(move[1])
        return (int(name.split(".", 1)[0]), not name.endswith(names.LOG_SUFFIX), name)

    for src, dst in sorted(plan.moves, key=order):
        if os.path.lexists(dst):
            fileops.unlink(src)
        else:
            fileops.move_file(src, dst)
    if plan.moves:
        fileops.fsync_dir(plan.partition)
        fileops.fsync_dir(plan.qdir)
    for change in plan.checkpoints:
        path = change["file"]
        if "topic" not in change:
            data = format_leader_epoch_checkpoint([tuple(e) for e in change["before"]]).encode()
        else:
            entries = read_offset_checkpoint(path) if os.path.exists(path) else {}
            key = (change["topic"], int(change["partition"]))
            if key not in entries and isinstance(change.get("line"), int):
                # A dropped entry goes back to its line: the file as it was, byte for byte.
                items = list(entries.items())
                items.insert(change["line"], (key, int(change["before"])))
                entries = dict(items)
            entries[key] = int(change["before"])
            data = format_offset_checkpoint(entries).encode()
        fileops.atomic_write(path, data)
    done = dict(manifest)
    done["restored"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    fileops.atomic_write(os.path.join(plan.qdir, MANIFEST), (json.dumps(done, indent=2) + "\n").encode())
