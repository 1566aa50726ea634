"""kstore's pass intent: what a compaction pass being swapped in will have done, so that a rerun after a
crash finishes that pass instead of cleaning the swapped range again (see interrupted_pass.py's docstring)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import List, Optional, Tuple

from kstore_cli.errors import FileUnreadableError
from kstore_cli.log import fileops, names

#: kstore's record of a pass being swapped in, in the partition directory. Kafka's LogLoader ignores
#: it: it is no segment, index, snapshot, .deleted, .cleaned or .swap file, and its name starts with
#: no offset, so completing an interrupted swap never deletes it (spec §6.2).
INTENT_FILE = "kstore-compact-intent.json"


INTENT_VERSION = 1


_INTENT_KEYS = {"topic", "partition", "checkpointed", "firstDirtyOffset", "firstUncleanableOffset", "endOffset",
                "mapStopOffset", "legacyHorizon", "now", "lastRecords", "groups", "current", "newFiles", "txnBefore",
                "txnAfter"}


def intent_path(partition_dir: str) -> str:
    return os.path.join(partition_dir, INTENT_FILE)


def drop_intent(partition_dir: str) -> None:
    """Remove the intent (the pass it records is finished, or it no longer fits the directory)."""
    fileops.unlink(intent_path(partition_dir))
    fileops.fsync_dir(partition_dir)


def file_identity(path: str) -> List:
    """[size, SHA-256] of a file: tells a swapped-in segment from the one it replaced."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return [size, digest.hexdigest()]


class PassIntent:
    """What a pass being swapped in will have done, written (atomically) before each group's swap.

    It holds what the rest of the pass needs and what is not in the files once groups are swapped
    in: the checkpoint entry the pass started from, its dirty range and end offset, where the offset
    map stopped, the legacy delete horizon, the active producers, the groups (old segment bases and
    ``.log`` sizes), which group is being swapped (``current``) with the identity of its new files,
    and the transaction state before and after that group.
    """

    def __init__(self, data: dict) -> None:
        self.data = data

    @property
    def end_offset(self) -> int:
        return self.data["endOffset"]

    @property
    def groups(self) -> List[List[List[int]]]:
        return self.data["groups"]

    def save(self, partition_dir: str) -> None:
        text = json.dumps(self.data, sort_keys=True, separators=(",", ":")) + "\n"
        fileops.atomic_write(intent_path(partition_dir), text.encode())

    @classmethod
    def load(cls, partition_dir: str) -> "Optional[PassIntent]":
        """The intent in the directory; None when there is none; an unreadable one raises ValueError."""
        path = intent_path(partition_dir)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise FileUnreadableError(f"cannot be read: {exc.strerror or exc}", path=path) from None
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != INTENT_VERSION or not _INTENT_KEYS <= set(data):
            raise ValueError("not a kstore compact intent of a known version")
        return cls(data)

    def swap_completed(self, partition_dir: str) -> bool:
        """Whether the current group's swap took effect (after resolve_leftovers): its new files are
        there under their final names with the recorded bytes. (New bytes equal to the old ones
        count as done: once :meth:`swap_leftovers` are gone the two states are the same.)"""
        group = self.groups[self.data["current"]]
        prefix = os.path.join(partition_dir, names.filename_prefix(group[0][0]))
        for ext, identity in self.data["newFiles"].items():
            path = prefix + ext
            if not os.path.isfile(path) or file_identity(path) != identity:
                return False
        return True

    def swap_leftovers(self, partition_dir: str) -> Tuple[List[str], Optional[str]]:
        """The files of the current group's old segments that its (completed) swap left behind, and
        why the intent no longer fits the directory (None when it does).

        LogLoader completes an interrupted swap by deleting the segments based in [new base, new
        segment's next offset): when cleaning emptied the group's tail (the new segment ends before
        a later old segment's base), the later old segments stay, and a crash in the middle of the
        renames leaves an old segment's indexes without their ``.log``. Such files belong to the
        replaced segments; removing them finishes the replacement the intent names, as the
        uninterrupted run did. An old segment still there with another size is not ours: stale."""
        group = self.groups[self.data["current"]]
        leftovers: List[str] = []
        prefix = os.path.join(partition_dir, names.filename_prefix(group[0][0]))
        for ext in (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX):
            if ext not in self.data["newFiles"] and os.path.isfile(prefix + ext):
                leftovers.append(prefix + ext)
        for base, size in group[1:]:
            prefix = os.path.join(partition_dir, names.filename_prefix(base))
            log = prefix + names.LOG_SUFFIX
            if os.path.exists(log) and os.path.getsize(log) != size:
                return [], f"segment {base} changed since"
            # The .log first: without it the rest is an orphan a broker deletes anyway.
            for ext in (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX,
                        names.SNAPSHOT_SUFFIX):
                if os.path.isfile(prefix + ext):
                    leftovers.append(prefix + ext)
        return leftovers, None
