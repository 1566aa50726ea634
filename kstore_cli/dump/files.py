"""The files to dump and what Java makes of their names (``new File(arg)``, ``getName``, the suffix
DumpLogSegments dispatches on, the sibling files of a segment, KRaft snapshot names)."""

from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

from kstore_cli.errors import KstoreError, UsageError

CHECKPOINT_SUFFIX = ".checkpoint"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"


def split_files_option(value: str) -> List[str]:
    """``String.split(",")``: no trimming, trailing empty strings dropped (``""`` gives ``[""]``)."""
    if value == "":
        return [""]
    parts = value.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def files_to_dump(files_options: Sequence[str], paths: Sequence[str]) -> List[str]:
    """The files of every ``--files a,b`` (Kafka's split) in order, then the positional paths."""
    files: List[str] = []
    for value in files_options:
        files.extend(split_files_option(value))
    return files + list(paths)


def java_file_path(arg: str) -> str:
    """``new File(arg).toString()`` on Unix: repeated slashes collapsed, a trailing slash dropped."""
    if "//" in arg or (arg.endswith("/") and arg != "/"):
        out = []
        prev = ""
        for ch in arg:
            if ch == "/" and prev == "/":
                continue
            out.append(ch)
            prev = ch
        arg = "".join(out)
        if len(arg) > 1 and arg.endswith("/"):
            arg = arg[:-1]
    return arg


def java_absolute_path(path: str) -> str:
    """``File.getAbsolutePath()``: the working directory prepended, nothing else normalised."""
    if path.startswith("/"):
        return path
    cwd = os.getcwd()
    return cwd if path == "" else cwd.rstrip("/") + "/" + path


def file_name(path: str) -> str:
    """``File.getName()``: the text after the last ``/``."""
    return path.rsplit("/", 1)[-1]


def file_suffix(path: str) -> str:
    """The suffix DumpLogSegments dispatches on: from the LAST ``.`` of the file name.

    A name with no ``.`` is a usage error (Kafka dies with StringIndexOutOfBoundsException).
    """
    name = file_name(path)
    dot = name.rfind(".")
    if dot < 0:
        raise UsageError(
            f"the file name {name!r} has no '.', so its kind (.log, .index, .timeindex, .snapshot, "
            ".txnindex, .checkpoint) is unknown (Kafka: StringIndexOutOfBoundsException: begin -1)",
            path=path,
        )
    return name[dot:]


def sibling_path(path: str, suffix: str) -> str:
    """The absolute path of the same segment's file with another suffix, as DumpLogSegments builds it."""
    absolute = java_absolute_path(path)
    parent = absolute.rsplit("/", 1)[0] or "/"
    return parent.rstrip("/") + "/" + file_name(path).split(".", 1)[0] + suffix


def kraft_snapshot_id(path: str) -> Tuple[int, int]:
    """(end offset, epoch) of a ``<20-digit offset>-<10-digit epoch>.checkpoint`` name (Snapshots.parse)."""
    name = file_name(path)
    head, mid = name[:20], name[21:31]
    if len(name) < 31 or not head.isdigit() or not mid.isdigit():
        raise UsageError(
            f"{name!r} is not a KRaft snapshot name (<20-digit end offset>-<10-digit epoch>.checkpoint)",
            path=path,
        )
    return int(head), int(mid)


def located(exc: KstoreError, path: str, position: Optional[int]) -> KstoreError:
    """Give an error the file (and byte position) it is about, when it has none yet."""
    if exc.path is None:
        exc.path = path
        if exc.position is None:
            exc.position = position
    return exc
