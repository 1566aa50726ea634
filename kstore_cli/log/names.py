"""File and directory names of a Kafka log dir (LogFileUtils, LocalLog)."""

from __future__ import annotations

import os
import re

from kstore_cli.errors import UsageError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

#: KRaft's metadata log (its partition dir is __cluster_metadata-0); not a topic the broker's log manager cleans or
#: deletes by retention (the controller snapshots and trims it).
METADATA_LOG_TOPIC = "__cluster_metadata"
#: Its one partition's dir, in the node's metadata.log.dir.
METADATA_PARTITION_DIR = METADATA_LOG_TOPIC + "-0"

#: LocalLog.parseTopicPartitionName: the text after the last '-' is an Integer.parseInt (a sign allowed).
_TOPIC_PARTITION = re.compile(r"^(.+)-([+-]?[0-9]+)$")


def filename_prefix(offset: int) -> str:
    """The 20-digit zero-padded offset that names segment and snapshot files."""
    return f"{offset:020d}"


def base_offset_from_name(path: "str | os.PathLike[str]") -> int:
    """The offset in a segment/index/snapshot file name (text before the first '.')."""
    name = os.path.basename(os.fspath(path))
    head = name.split(".", 1)[0]
    try:
        return int(head)
    except ValueError:
        raise UsageError(f"file name {name!r} does not start with a base offset", path=os.fspath(path)) from None


def sibling(path: "str | os.PathLike[str]", suffix: str) -> str:
    """The file of the same segment with another suffix (e.g. the .log beside an .index)."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    return os.path.join(directory, name.split(".", 1)[0] + suffix)


#: A replica LogManager loads apart: being deleted, moving between dirs, or not in the metadata (stray)
#: (LocalLog.DeleteDirSuffix, FutureDirSuffix, StrayDirSuffix).
REPLICA_DIR_SUFFIXES = ("-delete", "-future", "-stray")


def parse_partition_dir(name: str):
    """(topic, partition) from a partition directory name, or None when it is not one."""
    name = os.path.basename(os.path.normpath(name))
    for suffix in REPLICA_DIR_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)].rsplit(".", 1)[0]
            break
    match = _TOPIC_PARTITION.match(name)
    if not match or not -(1 << 31) <= int(match.group(2)) < (1 << 31):
        return None
    return match.group(1), int(match.group(2))
