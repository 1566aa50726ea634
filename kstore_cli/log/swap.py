"""Replacing a partition's segments crash-safely, with Kafka's own protocol (§8.7), and
resolving what an interrupted replacement left behind, with LogLoader's rules (§6.2 steps 1-2).

The replacement (``LocalLog.replaceSegments``), every step through :mod:`.fileops`::

    0. new segments are complete as <base>.<ext>.cleaned, fsynced     (PartitionWriter)
    1. fsync dir
    2. .cleaned -> .swap, segments in DESCENDING base offset order; fsync dir
    3. old segments' files -> <name>.deleted (ascending); fsync dir
    4. .swap -> final names (ascending); fsync dir
    5. unlink the .deleted files; fsync dir

How a crash at each point is resolved (by a broker's LogLoader, or by :func:`resolve_leftovers`):

* before or during 2: some ``.cleaned`` file remains. Every ``.swap`` at or above the smallest
  ``.cleaned`` offset is deleted -- because step 2 renames in descending order, that is every
  ``.swap`` -- and every ``.cleaned`` is deleted: the replacement is rolled back, the old
  segments are untouched.
* after 2: only ``.swap`` files (no ``.cleaned``). The range ``[min swap base, max swap next
  offset)`` is computed from the ``.log.swap`` files; every other file whose name starts with an
  offset in that range (old segments, their ``.deleted`` copies, snapshots) is deleted and the
  ``.swap`` suffix is stripped: the replacement is completed.

For the range to cover every old segment, the first new segment must carry the first old
segment's base offset and the new segments must reach the old log end offset (an empty last
segment at that offset does); :func:`replace_segments` checks both.

``.kstore-tmp`` files are kstore's own half-written atomic writes; they are deleted too.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence, Set

from kstore_cli.errors import FileUnreadableError, UsageError
from kstore_cli.log import fileops, names
from kstore_cli.log.log_segment import LogSegment, read_next_offset

SEGMENT_SUFFIXES = (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)


def _leading_offset(name: str) -> Optional[int]:
    head = name.split(".", 1)[0]
    if not head.isdigit():
        return None
    return int(head)


def _files_of(directory: str, base_offset: int, suffix: str) -> List[str]:
    prefix = os.path.join(directory, names.filename_prefix(base_offset))
    return [prefix + ext + suffix for ext in SEGMENT_SUFFIXES if os.path.isfile(prefix + ext + suffix)]


def _old_files(segment: LogSegment) -> List[str]:
    return [p for p in (segment.log, segment.index, segment.timeindex, segment.txnindex)
            if p is not None and os.path.isfile(p)]


class ReplaceReport:
    """What :func:`replace_segments` did."""

    def __init__(self) -> None:
        self.installed: List[str] = []
        self.removed: List[str] = []


def stage_extra(path: str, extra: List[str], data: Optional[bytes] = None) -> None:
    """Write `path`'s bytes (or `data`) to ``<path>.cleaned``, one of :func:`replace_segments`' `extra`
    files. It is named in `extra` as soon as it exists, so a failure's clean-up finds it."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    out = fileops.create_file(path + names.CLEANED_SUFFIX)
    extra.append(out.path)
    out.write(data)
    out.finish()


def _check_replacement(directory: str, new_sorted: List[int], old_sorted: List[LogSegment],
                       old_next_offset: Optional[int], new_next_offset: Optional[int], suffix: str) -> None:
    """Refuse (usage error) a replacement whose interruption would not resolve to one copy of every record."""
    if not new_sorted and old_sorted:
        raise UsageError("refusing to replace segments with nothing", path=directory)
    if new_sorted and old_sorted:
        if new_sorted[0] != old_sorted[0].base_offset:
            raise UsageError(
                f"the first new segment ({new_sorted[0]}) must keep the first old segment's base offset "
                f"({old_sorted[0].base_offset}) so that an interrupted swap resolves", path=directory)
        if old_next_offset is not None and new_next_offset is not None and new_next_offset < old_next_offset:
            raise UsageError(
                f"the new segments end at {new_next_offset}, before the old log end {old_next_offset}: "
                "an interrupted swap would not resolve", path=directory)
    for base in new_sorted:
        if not os.path.isfile(os.path.join(directory, names.filename_prefix(base) + names.LOG_SUFFIX + suffix)):
            raise UsageError(f"no {names.filename_prefix(base)}.log{suffix} to swap in", path=directory)


def _extras_by_offset(extra: Sequence[str], suffix: str) -> Dict[int, List[str]]:
    """The `extra` files to swap in, by their leading offset; a file that is not one is a usage error."""
    extras: Dict[int, List[str]] = {}
    for path in extra:
        offset = _leading_offset(os.path.basename(path))
        if offset is None or not path.endswith(suffix) or not os.path.isfile(path):
            raise UsageError(f"not a complete <offset>.<ext>{suffix} file to swap in", path=path)
        extras.setdefault(offset, []).append(os.path.abspath(path))
    return extras


def replace_segments(directory: str, new_bases: Sequence[int], old: Sequence[LogSegment], *,
                     old_next_offset: Optional[int] = None,
                     new_next_offset: Optional[int] = None,
                     suffix: str = names.CLEANED_SUFFIX, extra: Sequence[str] = ()) -> ReplaceReport:
    """Swap the ``.cleaned`` segments `new_bases` in for the segments `old` (Kafka's protocol).

    `old_next_offset`/`new_next_offset` (the log end offsets of the two sets), when given, are
    checked so that a crash between steps resolves to exactly one copy of every record.

    `extra` names more complete ``<offset>.<ext>.cleaned`` files (producer snapshots) that go
    through the same renames: LogLoader, completing an interrupted swap, deletes *every* file
    whose offset is in the swapped range, snapshots included, so a snapshot in that range
    survives a crash only as part of the swap set. Each replaces the file of its final name.
    """
    directory = os.path.abspath(directory)
    report = ReplaceReport()
    new_sorted = sorted(set(new_bases))
    old_sorted = sorted(old, key=lambda s: s.base_offset)
    _check_replacement(directory, new_sorted, old_sorted, old_next_offset, new_next_offset, suffix)
    extras = _extras_by_offset(extra, suffix)
    offsets = sorted(set(new_sorted) | set(extras))

    def swap_set(offset: int, sfx: str) -> List[str]:
        files = _files_of(directory, offset, sfx) if offset in new_sorted else []
        return files + [p[: -len(suffix)] + sfx for p in sorted(extras.get(offset, ()))]

    fileops.fsync_dir(directory)
    # 2. .cleaned -> .swap, descending offsets (the order LogLoader's rollback rule relies on).
    for offset in reversed(offsets):
        for path in swap_set(offset, suffix):
            fileops.rename(path, path[: -len(suffix)] + names.SWAP_SUFFIX)
    fileops.fsync_dir(directory)
    # 3. old segments -> .deleted, ascending.
    deleted: List[str] = []
    for seg in old_sorted:
        for path in _old_files(seg):
            fileops.rename(path, path + names.DELETED_SUFFIX)
            deleted.append(path + names.DELETED_SUFFIX)
            report.removed.append(path)
    fileops.fsync_dir(directory)
    # 4. .swap -> final names.
    for offset in offsets:
        for path in swap_set(offset, names.SWAP_SUFFIX):
            final = path[: -len(names.SWAP_SUFFIX)]
            fileops.rename(path, final)
            report.installed.append(final)
    fileops.fsync_dir(directory)
    # 5. the old files (Kafka deletes them after file.delete.delay.ms; nothing reads them here).
    for path in deleted:
        fileops.unlink(path)
    if deleted:
        fileops.fsync_dir(directory)
    return report


class LeftoverReport:
    """What :func:`resolve_leftovers` found and did."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        #: "rolled-back", "completed", "cleaned" (only stray files) or None (nothing found).
        self.outcome: Optional[str] = None
        self.deleted: List[str] = []
        self.renamed: List[tuple] = []

    @property
    def changed(self) -> bool:
        return bool(self.deleted or self.renamed)

    def to_dict(self) -> dict:
        return {"partition": self.directory, "outcome": self.outcome, "deleted": self.deleted,
                "renamed": [{"from": a, "to": b} for a, b in self.renamed]}


def resolve_leftovers(partition_dir: str, *, dry_run: bool = False) -> LeftoverReport:
    """Finish or roll back an interrupted replacement the way Kafka's LogLoader does at startup.

    Deletes ``*.kstore-tmp`` and ``*.deleted`` files; if any ``.cleaned`` file exists, deletes
    every ``.swap`` at or above the smallest ``.cleaned`` offset and every ``.cleaned``; then, for
    the remaining ``.swap`` files, deletes the other files whose offset lies in the swapped range
    and strips ``.swap``. With `dry_run`, only reports.
    """
    directory = os.path.abspath(partition_dir)
    report = LeftoverReport(directory)
    try:
        entries = sorted(os.listdir(directory))
    except OSError as exc:
        raise FileUnreadableError(f"cannot be listed: {exc.strerror}", path=directory) from None
    regular = [n for n in entries if os.path.isfile(os.path.join(directory, n))]

    def delete(name: str) -> None:
        path = os.path.join(directory, name)
        if not dry_run:
            fileops.unlink(path)
        report.deleted.append(path)

    gone = set()
    for name in regular:
        if name.endswith(fileops.TMP_SUFFIX) or (
                name.endswith(names.DELETED_SUFFIX) and not name.endswith(".checkpoint" + names.DELETED_SUFFIX)):
            delete(name)
            gone.add(name)
    cleaned = [n for n in regular if n.endswith(names.CLEANED_SUFFIX) and n not in gone]
    swaps = [n for n in regular if n.endswith(names.SWAP_SUFFIX) and n not in gone]
    if cleaned:
        swaps = _roll_back(cleaned, swaps, delete, gone)
        report.outcome = "rolled-back"
    if swaps:
        _complete_swap(directory, regular, swaps, delete, gone)
        for name in swaps:
            src = os.path.join(directory, name)
            dst = src[: -len(names.SWAP_SUFFIX)]
            if not dry_run:
                fileops.rename(src, dst)
            report.renamed.append((src, dst))
        report.outcome = "completed"
    elif report.deleted and report.outcome is None:
        report.outcome = "cleaned"
    if report.changed and not dry_run:
        fileops.fsync_dir(directory)
    return report


def _roll_back(cleaned: List[str], swaps: List[str], delete: Callable[[str], None], gone: Set[str]) -> List[str]:
    """LogLoader's rollback of a replacement interrupted before its .swap files were complete: every
    ``.swap`` at or above the smallest ``.cleaned`` offset and every ``.cleaned`` deleted. Returns the
    ``.swap`` files kept."""
    offsets = [o for o in (_leading_offset(n) for n in cleaned) if o is not None]
    min_cleaned = min(offsets) if offsets else None
    kept = []
    for name in swaps:
        offset = _leading_offset(name)
        if min_cleaned is not None and offset is not None and offset >= min_cleaned:
            delete(name)
            gone.add(name)
        else:
            kept.append(name)
    for name in cleaned:
        delete(name)
        gone.add(name)
    return kept


def _complete_swap(directory: str, regular: List[str], swaps: List[str], delete: Callable[[str], None],
                   gone: Set[str]) -> None:
    """LogLoader's completion of a swap: every other file whose offset lies in [min swap base, max swap
    next offset) deleted (the ``.swap`` suffix is stripped by the caller)."""
    log_swaps = [n for n in swaps if n.endswith(names.LOG_SUFFIX + names.SWAP_SUFFIX)]
    bases: Dict[str, int] = {n: _leading_offset(n) for n in log_swaps if _leading_offset(n) is not None}
    if not bases:
        return
    min_swap = min(bases.values())
    max_swap = max(read_next_offset(os.path.join(directory, n), b) for n, b in bases.items())
    for name in regular:
        if name in gone or name.endswith(names.SWAP_SUFFIX):
            continue
        offset = _leading_offset(name)
        if offset is not None and min_swap <= offset < max_swap:
            delete(name)
            gone.add(name)
