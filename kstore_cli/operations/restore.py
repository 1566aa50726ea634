"""Undoing a cut (``rebuild-index --truncate``, ``recover``): putting a quarantine dir's files and checkpoints back.

A quarantine dir (``<root>/<partition>/<UTC time>/``) holds ``kstore-quarantine.json`` (what the
cut did: the segment, its size before and after, the tail file, the files moved out, the
checkpoint values lowered, the segment ``recover`` rolls after it), the cut tail and the later
segments and snapshots. :func:`plan_restore` reads the manifest through
:func:`~kstore_cli.operations.quarantine.load_manifest` (bare names in their own dirs only, sizes and
sha256 of the quarantined files) and checks that the partition is still exactly as the cut left it
(or as a killed restore left it); :func:`apply_restore` then, each step through :mod:`.fileops` and so
crash-safe:

1. removes the empty segment ``recover`` rolled at the cut, if any (its indexes, then its ``.log``);
2. appends the tail back to its ``.log`` (a kill midway leaves a partial tail, which Kafka's
   recovery cuts and the rerun completes);
3. puts the damaged segment's original indexes back (copies the cut kept), then moves the later
   files back (oldest first, each ``.log`` before its indexes: a kill leaves at worst a segment whose
   indexes a broker rebuilds);
4. raises the checkpoints back to their recorded values (after the files: never ahead of them);
5. marks the manifest ``"restored"`` (the quarantine dir keeps it and the tail file, now a copy).

A rerun accepts every step already done, so it finishes whatever a kill interrupted.
"""

from __future__ import annotations

import datetime
import os
from typing import List, Optional, Tuple

from kstore_cli.errors import CorruptDataError, FileUnreadableError, KstoreError, UsageError
from kstore_cli.log import fileops, names
from kstore_cli.log.checkpoint import (
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
)
from kstore_cli.operations.runner import PartitionRunner
from kstore_cli.operations.quarantine import QuarantineManifest, load_manifest, same_bytes, same_range, write_manifest

_CHUNK = 1 << 20


class PartitionChangedError(CorruptDataError):
    """The partition is no longer as the cut left it: restoring would mix two histories."""


class RestorePlan:
    """What :func:`apply_restore` will do for one quarantine dir."""

    def __init__(self, manifest: QuarantineManifest) -> None:
        self.qdir = manifest.qdir
        self.checked = manifest
        self.manifest = manifest.data
        self.partition: str = manifest.partition
        self.segment: str = manifest.in_partition(self.manifest["segment"])
        self.already_restored = bool(self.manifest.get("restored"))
        #: Bytes still to append to the segment, from this offset of the cut tail.
        self.append_from: Optional[int] = None
        self.append_bytes = 0
        #: The files of the empty segment `recover` rolled after the cut, still to remove.
        self.unroll: List[str] = []
        #: (quarantined file, its place in the partition) still to move back.
        self.moves: List[Tuple[str, str]] = []
        #: Checkpoint changes still to undo (manifest entries).
        self.checkpoints: List[dict] = []

    @property
    def data_dir(self) -> str:
        return self.checked.data_dir

    @property
    def nothing_to_do(self) -> bool:
        return self.already_restored

    def to_dict(self) -> dict:
        return {"type": "restore", "quarantine_dir": self.qdir, "partition": self.partition, "segment": self.segment,
                "already_restored": self.already_restored, "append_bytes": self.append_bytes,
                "remove_rolled": [os.path.basename(p) for p in self.unroll],
                "move_back": [{"from": a, "to": b} for a, b in self.moves],
                "checkpoints": [{"file": self.checked.checkpoint_path(c), "from": c["after"], "to": c["before"]}
                                for c in self.checkpoints]}


def _changed(plan: RestorePlan, what: str) -> PartitionChangedError:
    return PartitionChangedError(
        f"the partition changed since the cut ({what}); refusing to restore into it: a broker or another tool "
        f"wrote it after {plan.qdir}", path=plan.partition)


def _checkpoint_value(path: str, change: dict):
    """The current value a manifest checkpoint entry refers to (None: no entry / no file)."""
    if "topic" not in change:  # leader-epoch-checkpoint: the whole list
        if not os.path.exists(path):
            return []
        return [list(e) for e in read_leader_epoch_checkpoint(path)]
    if not os.path.exists(path):
        return None
    return read_offset_checkpoint(path).get((change["topic"], int(change["partition"])))


def _record(entry: dict, verify_contents: bool) -> Optional[dict]:
    """The size and sha256 a manifest entry recorded (None in a manifest written before kstore recorded
    them, or when contents are not verified this time)."""
    return {"size": entry["size"], "sha256": entry["sha256"]} if verify_contents and "sha256" in entry else None


def plan_restore(qdir: str, verify_contents: bool = True) -> RestorePlan:
    """Check a quarantine dir against its partition; raise PartitionChangedError if the partition is
    not as the cut (or a killed restore) left it, UsageError if the manifest names anything but its own
    files or a quarantined file is not what it recorded. `verify_contents` False skips the sha256 of the
    quarantined files (a first look, repeated in full under the lock before any change)."""
    checked = load_manifest(qdir)
    if checked.kind == "salvage":
        # Salvage rewrote the damaged segments around their damage and kept only the damaged byte ranges:
        # there is no earlier partition here to put back.
        raise UsageError("written by `salvage --in-place`, which restore does not undo: salvage rewrote the "
                         "segments and kept here only their damaged byte ranges (the manifest's \"ranges\" say "
                         "where each was); restore undoes a cut (rebuild-index --truncate, recover)",
                         path=checked.qdir)
    plan = RestorePlan(checked)
    if plan.already_restored:
        return plan
    fileops.refuse_links(fileops.partition_files(plan.partition, plan.data_dir))
    _plan_append(plan, verify_contents)
    moved_from = _plan_moves(plan, verify_contents)
    _plan_unroll(plan, moved_from)
    for i, entry in enumerate(plan.manifest.get("originalIndexes", [])):
        if entry["copy"] is not None:
            checked.check_quarantined(entry["copy"], _record(entry, verify_contents), f"originalIndexes[{i}].copy")
    _plan_checkpoints(plan)
    return plan


def _plan_append(plan: RestorePlan, verify_contents: bool) -> None:
    """The cut segment as the cut (or a killed restore) left it, and what of the tail is still to append."""
    checked, manifest, log = plan.checked, plan.manifest, plan.segment
    valid, before = int(manifest["validBytes"]), int(manifest["logSizeBefore"])
    if not os.path.isfile(log):
        raise _changed(plan, f"{os.path.basename(log)} is gone")
    size = os.path.getsize(log)
    if size < valid or size > before:
        raise _changed(plan, f"{os.path.basename(log)} is {size} bytes, the cut left {valid}")
    tail_name = manifest.get("tailFile")
    if tail_name is not None:
        tail = checked.in_quarantine(tail_name)
        checked.check_quarantined(tail_name, None, "tailFile")
        if os.path.getsize(tail) != before - valid:
            raise checked.refuse("tailFile", f"{tail_name} is {os.path.getsize(tail)} bytes, "
                                             f"logSizeBefore - validBytes is {before - valid}")
        if verify_contents and "tailSha256" in manifest:
            checked.check_quarantined(tail_name, {"size": before - valid, "sha256": manifest["tailSha256"]},
                                      "tailSha256")
        # A restore killed midway: the bytes back in the .log are the tail's first bytes.
        if size > valid and not same_range(log, valid, tail, size - valid):
            raise _changed(plan, f"{os.path.basename(log)} has bytes past the cut that are not the tail's")
    elif size > valid and not _zeros(log, valid, size):
        raise _changed(plan, f"{os.path.basename(log)} has bytes past the cut that are not the cut zeros")
    if size < before:
        plan.append_from, plan.append_bytes = size - valid, before - size


def _plan_moves(plan: RestorePlan, verify_contents: bool) -> set:
    """The quarantined files still to move back; returns the names of every file the cut moved out."""
    checked = plan.checked
    moved_from = set()
    for i, entry in enumerate(plan.manifest["movedFiles"]):
        name = entry["from"]  # back under the same name (load_manifest checked it)
        src, dst = checked.in_quarantine(name), checked.in_partition(name)
        moved_from.add(name)
        here, there = os.path.lexists(src), os.path.lexists(dst)
        if here:
            checked.check_quarantined(name, _record(entry, verify_contents), f"movedFiles[{i}]")
        if here and not there:
            plan.moves.append((src, dst))
        elif there and not here:
            continue  # already back
        elif here and there:
            if not same_bytes(src, dst):
                raise _changed(plan, f"{name} exists again with other bytes")
            plan.moves.append((src, dst))  # a move across file systems killed before its delete
        else:
            raise FileUnreadableError(f"quarantined file missing (and not back in the partition): {dst}", path=src)
    return moved_from


def _plan_unroll(plan: RestorePlan, moved_from: set) -> None:
    """No segment after the cut one but the moved-out ones and the empty one `recover` rolled (to remove)."""
    checked = plan.checked
    base = names.base_offset_from_name(plan.segment)
    rolled = plan.manifest.get("rolledSegment")
    for name in os.listdir(plan.partition):
        if name.endswith(names.LOG_SUFFIX) and name not in moved_from:
            head = name.split(".", 1)[0]
            if head.isdigit() and int(head) > base:
                if name == rolled and os.path.getsize(checked.in_partition(name)) == 0:
                    continue  # the empty segment recover rolled after the cut (UnifiedLog.roll): removed first
                raise _changed(plan, f"a new segment {name} follows the cut one")
    if rolled is not None:
        prefix = rolled[: -len(names.LOG_SUFFIX)]
        # its indexes first, its .log last: a kill in between leaves the empty .log, which the rerun removes
        plan.unroll = [p for p in (checked.in_partition(prefix + s) for s in (
            names.TXN_INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.INDEX_SUFFIX, names.LOG_SUFFIX))
            if os.path.lexists(p)]


def _plan_checkpoints(plan: RestorePlan) -> None:
    """The checkpoint changes still to undo; any other value than the cut's or the original refuses."""
    for change in plan.manifest.get("checkpoints", []):
        path = plan.checked.checkpoint_path(change)
        try:
            current = _checkpoint_value(path, change)
        except KstoreError as exc:
            raise _changed(plan, f"{change['file']} does not parse: {exc.message}") from None
        if current == change["after"]:
            plan.checkpoints.append(change)
        elif current != change["before"]:
            raise _changed(plan, f"{change['file']} holds {current}, the cut left {change['after']}")


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
    manifest, checked = plan.manifest, plan.checked
    valid, before = int(manifest["validBytes"]), int(manifest["logSizeBefore"])
    for path in plan.unroll:
        fileops.unlink(path)
    if plan.unroll:
        fileops.fsync_dir(plan.partition)
    if plan.append_from is not None:
        fileops.append_range(checked.in_quarantine(manifest["tailFile"]) if manifest.get("tailFile") else None,
                             plan.segment, plan.append_from, before - valid, expected_size=valid + plan.append_from)

    # The damaged segment's own indexes as they were before the cut (a manifest written before
    # kstore kept them has none: the cut's indexes then stay, and a broker's lookups scan further).
    for entry in manifest.get("originalIndexes", []):
        if entry["copy"] is None:
            fileops.unlink(checked.in_partition(entry["file"]))
        else:
            fileops.copy_file(checked.in_quarantine(entry["copy"]), checked.in_partition(entry["file"]),
                              follow_links=False)

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
        path = checked.checkpoint_path(change)
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
    write_manifest(plan.qdir, done)


def restore(qdir: str, *, dry_run: bool = False, force: bool = False) -> RestorePlan:
    """``kstore restore``: the plan checked (the quarantined files' hashes: once, under the lock), then applied
    under the data dir's lock, planned again there so that nothing may change in between (not for a dry run)."""
    plan = plan_restore(qdir, verify_contents=dry_run)
    if not dry_run and not plan.nothing_to_do:
        with PartitionRunner({plan.data_dir: [plan.partition]}, force=force).locked():
            plan = plan_restore(qdir)
            apply_restore(plan)
    return plan
