"""Finding segments: a PATH given on the command line as a ``.log`` file, a partition
directory or a data directory (a ``log.dirs`` entry), resolved to partitions and
their segments in base-offset order.

What counts as a partition directory (LocalLog.parseTopicPartitionName):
``<topic>-<partition>``. In a data directory, ``-delete``, ``-future`` and
``-stray`` directories are skipped (a replica being deleted, moved in, or left
over; the broker does not serve them) and listed in :attr:`DataDir.skipped`,
as are directories that are not partitions at all (``remote-log-index-cache``).
``__cluster_metadata-0`` is a normal log (KafkaMetadataLog wraps the same
UnifiedLog), so it is included for reading; the commands that change logs
leave it alone (:mod:`kstore_cli.log.scope`). A skipped directory can
still be named explicitly as a PATH.
"""

from __future__ import annotations

import bisect
import fnmatch
import heapq
import os
import sys
from array import array
from itertools import accumulate
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, overload

from kstore_cli.errors import FileUnreadableError, UsageError
from kstore_cli.log import names
from kstore_cli.log.checkpoint import (
    CLEAN_SHUTDOWN,
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from kstore_cli.log.fileops import LOCK_FILE, TMP_SUFFIX
from kstore_cli.log.log_segment import LogSegment, LookupStats, largest_timestamp
from kstore_cli.record import storage
from kstore_cli.record.reader import read_batches

_INDEX_SUFFIXES = (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)
_LEFTOVER_SUFFIXES = (names.DELETED_SUFFIX, names.CLEANED_SUFFIX, names.SWAP_SUFFIX, TMP_SUFFIX, ".tmp")
#: Files only a data directory (a ``log.dirs`` entry) holds, never a partition directory.
DATA_DIR_FILES = frozenset({
    META_PROPERTIES, RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT, CLEAN_SHUTDOWN, LOCK_FILE,
})
#: How many folder levels below a PATH are searched for data directories (folder/broker/data dir).
FIND_DEPTH = 2


def _offset_of(name: str) -> Optional[int]:
    head = name.split(".", 1)[0]
    if len(head) < 20 or not head.isdigit():
        return None
    return int(head)


#: A partition's segment as the directory scan finds it: Kafka's LogSegment.
Segment = LogSegment


class Partition:
    """A partition directory: its segments, snapshots, and files a broker would not load."""

    def __init__(self, path: str, data_dir: Optional[str] = None,
                 listing: Optional[List[Tuple[str, bool]]] = None) -> None:
        """`data_dir`: the real path of the dir holding it, when the caller knows it (a data dir's walk);
        `listing`: its (name, is_file) entries, already listed (a remote partition's, from one listing)."""
        self.path = path if listing is not None else os.path.abspath(path)
        parsed = names.parse_partition_dir(self.path)
        self.topic, self.partition = parsed if parsed else (os.path.basename(self.path), -1)
        self.segments: List[Segment] = []
        #: {offset: path} of <offset>.snapshot files.
        self.snapshots: Dict[int, str] = {}
        #: .deleted / .cleaned / .swap / temporary files left by an interrupted operation.
        self.leftovers: List[str] = []
        #: Index files whose .log does not exist (LogLoader deletes them as "orphaned").
        self.orphan_indexes: List[str] = []
        #: Other regular files (checkpoints, partition.metadata, unknown files).
        self.other_files: List[str] = []
        self._data_dir: Optional[str] = data_dir
        #: It holds a file only a data directory has (meta.properties, a data-dir checkpoint, .lock).
        self.holds_data_dir_files = False
        self._classify(self._scan() if listing is None else sorted(listing))

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def data_dir(self) -> str:
        """The data directory holding this partition (where ``.lock`` and the checkpoints are): from the
        real path, so a partition reached through a symlinked alias has its real data dir's lock and
        checkpoints, not the alias's parent. Resolved once per partition."""
        if self._data_dir is None:
            self._data_dir = os.path.dirname(os.path.realpath(self.path))
        return self._data_dir

    def _scan(self) -> List[Tuple[str, bool]]:
        try:
            # scandir: a regular file is told by the entry's type, no stat per file (is_file follows a
            # symlink as os.path.isfile does)
            with os.scandir(self.path) as listing:
                entries = sorted((e.name, e.is_file()) for e in listing)
        except FileNotFoundError:
            raise FileUnreadableError("no such directory", path=self.path) from None
        except NotADirectoryError:
            raise FileUnreadableError("not a directory", path=self.path) from None
        except OSError as exc:
            raise FileUnreadableError(f"cannot be listed: {exc.strerror}", path=self.path) from None
        return entries

    def _classify(self, entries: List[Tuple[str, bool]]) -> None:
        by_offset: Dict[int, Segment] = {}
        indexes: List[Tuple[int, str, str]] = []
        prefix = os.path.join(self.path, "")
        for name, is_file in entries:
            if name in DATA_DIR_FILES:
                self.holds_data_dir_files = True
            if not is_file:
                continue
            full = prefix + name
            if name.endswith(_LEFTOVER_SUFFIXES):
                self.leftovers.append(full)
                continue
            offset = _offset_of(name)
            suffix = "." + name.split(".", 1)[1] if "." in name else ""
            if offset is None:
                self.other_files.append(full)
            elif suffix == names.LOG_SUFFIX:
                by_offset[offset] = Segment(offset, self.path)
            elif suffix in _INDEX_SUFFIXES:
                indexes.append((offset, suffix, full))
            elif suffix == names.SNAPSHOT_SUFFIX:
                self.snapshots[offset] = full
            else:
                self.other_files.append(full)
        for offset, suffix, full in indexes:
            segment = by_offset.get(offset)
            if segment is None:
                self.orphan_indexes.append(full)
            elif suffix == names.INDEX_SUFFIX:
                segment.index = full
            elif suffix == names.TIME_INDEX_SUFFIX:
                segment.timeindex = full
            else:
                segment.txnindex = full
        self.segments = [by_offset[o] for o in sorted(by_offset)]

    def segment(self, base_offset: int) -> Segment:
        for segment in self.segments:
            if segment.base_offset == base_offset:
                return segment
        raise UsageError(f"no segment with base offset {base_offset}", path=self.path)

    def snapshot_at(self, offset: int) -> Optional[str]:
        return self.snapshots.get(offset)

    def __repr__(self) -> str:
        return f"Partition({self.path!r}, segments={len(self.segments)})"


class PartitionDir:
    """A partition dir a data dir's walk found, by its name only: what a lazy survey keeps of it (the process
    that checks it lists it: :meth:`load`). Named as :class:`Partition` names it."""

    __slots__ = ("path", "topic", "partition", "_data_dir")

    def __init__(self, path: str, data_dir: Optional[str]) -> None:
        """`data_dir`: the real path of the dir holding it (None: resolved from the path on first use)."""
        self.path = path
        parsed = names.parse_partition_dir(path)
        topic, self.partition = parsed if parsed else (os.path.basename(path), -1)
        self.topic = sys.intern(topic)  # one string per topic
        self._data_dir = data_dir

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def data_dir(self) -> str:
        if self._data_dir is None:
            self._data_dir = os.path.dirname(os.path.realpath(self.path))
        return self._data_dir

    def load(self) -> Partition:
        """The partition, listed now (FileUnreadableError when it cannot be)."""
        return Partition(self.path, data_dir=self._data_dir)

    def __repr__(self) -> str:
        return f"PartitionDir({self.path!r})"


#: How many names are sorted at a time (runs then merged): no list of every name (10,000 partitions) is made.
_RUN = 1024


def _packed(ordered: List[str]) -> Tuple[str, array]:
    return "".join(ordered), array("I", accumulate(map(len, ordered)))


def _unpacked(run: Tuple[str, array]) -> Iterator[str]:
    text, ends = run
    return (text[ends[i - 1] if i else 0:ends[i]] for i in range(len(ends)))


def _sorted_packed(names_: Iterable[str]) -> Tuple[str, array]:
    """The names in sorted order, joined, and where each ends: sorted in runs of :data:`_RUN`, then merged."""
    runs: List[Tuple[str, array]] = []
    run: List[str] = []
    for name in names_:
        run.append(name)
        if len(run) == _RUN:
            run.sort()
            runs.append(_packed(run))
            run = []
    run.sort()
    if not runs:
        return _packed(run)
    runs.append(_packed(run))
    run = []
    pieces: List[str] = []
    ends = array("I")
    for name in heapq.merge(*map(_unpacked, runs)):
        run.append(name)
        ends.append((ends[-1] if ends else 0) + len(name))
        if len(run) == _RUN:
            pieces.append("".join(run))
            run.clear()
    pieces.append("".join(run))
    return "".join(pieces), ends


class PartitionDirs(Sequence[PartitionDir]):
    """A data dir's partition dirs by name, in name order, as a lazy walk keeps them: the names in one string
    (about 20 bytes a partition rather than 250 as objects: 10,000 partitions), each :class:`PartitionDir`
    made when asked for. `links`: the names of the children that are symlinks (their data dir is their
    target's); `real`: the real path of the data dir the others are in."""

    __slots__ = ("path", "real", "_names", "_ends", "_links")

    def __init__(self, path: str, real: str, names_: Iterable[str], links: Iterable[str] = ()) -> None:
        """`names_`: the partition dirs' names, in any order, taken one at a time (`links` is read after them)."""
        self.path = path
        self.real = real
        self._names, self._ends = _sorted_packed(names_)
        self._links = frozenset(links)

    def name_at(self, i: int) -> str:
        return self._names[self._ends[i - 1] if i else 0:self._ends[i]]

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> PartitionDir: ...
    @overload
    def __getitem__(self, i: slice) -> List[PartitionDir]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        name = self.name_at(i)
        return PartitionDir(os.path.join(self.path, name), None if name in self._links else self.real)

    def __iter__(self) -> Iterator[PartitionDir]:
        return (self[i] for i in range(len(self)))

    def position(self, path: str) -> Optional[int]:
        """Where the partition dir at `path` is among these (None: not one of them)."""
        parent, name = os.path.split(path)
        if parent != self.path:
            return None
        lo, hi = 0, len(self)
        while lo < hi:  # bisect over names made one at a time (none held)
            mid = (lo + hi) // 2
            if self.name_at(mid) < name:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self) and self.name_at(lo) == name else None

    def __contains__(self, item: object) -> bool:
        path = getattr(item, "path", item)
        return isinstance(path, str) and self.position(path) is not None

    def names(self) -> Iterator[str]:
        return (self.name_at(i) for i in range(len(self)))

    @property
    def links(self) -> frozenset:
        """The names of those that are symlinks."""
        return self._links

    def of_topics(self, wanted: Callable[[str], bool]) -> "PartitionDirs":
        """Those of the topics `wanted` wants (--topics)."""
        return self.where(lambda name: wanted(_topic_of(name)))

    def where(self, keep: Callable[[str], bool]) -> "PartitionDirs":
        """Those whose name `keep` keeps (itself when it keeps every one)."""
        kept = [n for n in self.names() if keep(n)]
        return self if len(kept) == len(self) else PartitionDirs(self.path, self.real, kept, self._links)

    def without(self, paths: Iterable[str]) -> "PartitionDirs":
        """These partition dirs but those at `paths`."""
        gone = {os.path.basename(p) for p in paths if os.path.dirname(p) == self.path}
        return self.where(lambda name: name not in gone) if gone else self


class Chain(Sequence):
    """Sequences one after another, by position: no list of all their items is made (10,000 partitions)."""

    __slots__ = ("pieces", "_ends")

    def __init__(self, pieces: Iterable[Sequence]) -> None:
        self.pieces = list(pieces)
        self._ends = list(accumulate(map(len, self.pieces)))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def locate(self, i: int) -> Tuple[int, int]:
        """(which piece, where in it) the item at position `i` is (an empty piece holds none)."""
        if i < 0:
            i += len(self)
        at = bisect.bisect_right(self._ends, i)
        if at >= len(self.pieces):
            raise IndexError(i)
        return at, i - (self._ends[at - 1] if at else 0)

    def __getitem__(self, i):  # type: ignore[override] - positions only, as runner.stream asks
        at, position = self.locate(i)
        return self.pieces[at][position]

    def __iter__(self) -> Iterator:
        return (item for piece in self.pieces for item in piece)


def loaded(partition: "Partition | PartitionDir") -> Partition:
    """The partition listed: a lazy survey's :class:`PartitionDir` is listed now."""
    return partition.load() if isinstance(partition, PartitionDir) else partition


class Target:
    """What one PATH argument resolved to: a partition, and optionally a single segment of it."""

    __slots__ = ("partition", "only")

    def __init__(self, partition: Partition, only: Optional[int] = None) -> None:
        self.partition = partition
        #: Base offset of the one segment named by a ``.log`` PATH; None means every segment.
        self.only = only

    @property
    def segments(self) -> List[Segment]:
        if self.only is None:
            return self.partition.segments
        return [self.partition.segment(self.only)]


class DataDir:
    """A data directory's partitions, and the directories that were skipped (with `partitions` False, only
    those: no partition dir is scanned; with `lazy`, the partitions are held by name, :class:`PartitionDirs`,
    each listed by whoever works on it, who also skips one that holds a data directory's own files: see
    :func:`nested_data_dir`)."""

    def __init__(self, path: str, partitions: bool = True, lazy: bool = False) -> None:
        self.path = os.path.abspath(path)
        #: (path, why) of child directories that are not loaded, in name order.
        self.skipped: List[Tuple[str, str]] = []
        links: List[str] = []
        found = self._walk(lazy, partitions, links)
        self.partitions: Sequence["Partition | PartitionDir"]
        if lazy:
            self.partitions = PartitionDirs(self.path, os.path.realpath(self.path), found, links)
        else:
            self.partitions = [Partition(os.path.join(self.path, name)) for name in sorted(found)]
        self.skipped.sort()

    def _walk(self, lazy: bool, partitions: bool, links: List[str]) -> Iterator[str]:
        """The partition dirs' names, one at a time; the others go to `skipped`, the symlinks' names to `links`."""
        with os.scandir(self.path) as entries:  # the entries' types without a stat each (10,000 partitions)
            for entry in entries:
                if not entry.is_dir():
                    continue
                name, full = entry.name, os.path.join(self.path, entry.name)
                if name.endswith(names.REPLICA_DIR_SUFFIXES):
                    self.skipped.append((full, f"{name.rsplit('-', 1)[1]} replica directory"))
                elif not lazy and holds_data_dir_files(full):
                    self.skipped.append((full, NESTED_DATA_DIR))
                elif names.parse_partition_dir(name) is None:
                    self.skipped.append((full, "not a partition directory"))
                elif partitions:
                    if lazy and entry.is_symlink():  # a child that is a symlink has the data dir it points to
                        links.append(name)
                    yield name


#: Why a data dir's walk skips a child that holds a data directory's own files.
NESTED_DATA_DIR = "a data directory of its own, not a partition"


def nested_data_dir(ref: "Partition | PartitionDir", partition: Partition) -> bool:
    """Whether `partition`, listed from a lazy walk's `ref`, is a child the walk would have skipped as a data
    directory of its own (the walk left that check to whoever lists it)."""
    return isinstance(ref, PartitionDir) and partition.holds_data_dir_files


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def holds_data_dir_files(path: str) -> bool:
    """Whether `path` holds a file only a data directory has (meta.properties, a data-dir checkpoint, .lock)."""
    return any(n in DATA_DIR_FILES for n in _listdir(path))


def is_partition_dir(path: str) -> bool:
    """A directory that holds segment files, or is named like a partition and holds no partitions
    (and none of a data directory's own files: a broker's data dir may be named ``kafka-1``)."""
    try:
        entries = os.listdir(path)
    except OSError:
        return False
    if any(n in DATA_DIR_FILES for n in entries):
        return False
    if any(_offset_of(n) is not None for n in entries):
        return True
    if names.parse_partition_dir(path) is None:
        return False
    return not any(
        os.path.isdir(os.path.join(path, n)) and names.parse_partition_dir(n) is not None for n in entries
    )


def is_data_dir(path: str) -> bool:
    """A directory a broker could have as a ``log.dirs`` entry: not a partition, and holding a data
    directory's own files or at least one partition directory."""
    if not os.path.isdir(path) or is_partition_dir(path):
        return False
    if holds_data_dir_files(path):
        return True
    return any(
        names.parse_partition_dir(n) is not None and os.path.isdir(os.path.join(path, n))
        and is_partition_dir(os.path.join(path, n))
        for n in _listdir(path)
    )


def find_data_dirs(path: str, depth: int = FIND_DEPTH) -> List[str]:
    """The data directories at or below `path` (up to `depth` folder levels down), in name order:
    a folder holding several brokers' data dirs yields each of them."""
    path = os.path.abspath(path)
    if is_data_dir(path):
        return [path]
    if depth <= 0:
        return []
    found: List[str] = []
    for name in sorted(_listdir(path)):
        child = os.path.join(path, name)
        if os.path.isdir(child) and not os.path.islink(child):
            found.extend(find_data_dirs(child, depth - 1))
    return found


def topic_matcher(globs: Optional[str]) -> Callable[[str], bool]:
    """A test of topic names against comma-separated globs (``orders*,payments``); None matches all."""
    patterns = [g.strip() for g in (globs or "").split(",") if g.strip()]
    if not patterns:
        return lambda topic: True
    return lambda topic: any(fnmatch.fnmatchcase(topic, p) for p in patterns)


def _resolved(paths: Iterable[str], lazy: bool, skipped: Optional[List[Tuple[str, str]]]
              ) -> Iterator["Target | PartitionDirs"]:
    """Each PATH as :func:`resolve` takes it, in order: a target, or (with `lazy`) a data dir's partitions."""
    for raw in paths:
        if storage.is_uri(raw):
            yield from resolve_uri(raw)
            continue
        path = os.path.abspath(storage.local_path(raw))
        if os.path.isfile(path):
            if not path.endswith(names.LOG_SUFFIX):
                raise UsageError("expected a .log file, a partition directory or a data directory", path=raw)
            yield Target(Partition(os.path.dirname(path)), names.base_offset_from_name(path))
        elif os.path.isdir(path):
            if is_partition_dir(path):
                yield Target(Partition(path))
                continue
            for data_dir in find_data_dirs(path) or [path]:
                walked = DataDir(data_dir, lazy=lazy)
                if skipped is not None:
                    skipped.extend(walked.skipped)
                if lazy:
                    yield walked.partitions  # type: ignore[misc] - PartitionDirs
                else:
                    yield from (Target(p) for p in walked.partitions)  # type: ignore[arg-type] - listed
        else:
            raise FileUnreadableError("no such file or directory", path=raw)


def resolve(paths: Iterable[str], topics: Optional[str] = None,
            skipped: Optional[List[Tuple[str, str]]] = None) -> List[Target]:
    """Each PATH as targets: a ``.log`` -> one segment; a partition dir -> it; a data dir -> its partitions;
    with `topics` (comma-separated globs), only the partitions of matching topics. `skipped` (a list) is
    given the (path, why) of the data dirs' children their walk left alone."""
    targets: List[Target] = list(_resolved(paths, False, skipped))  # type: ignore[arg-type] - no walk kept
    if topics is not None:
        wanted = topic_matcher(topics)
        targets = [t for t in targets if wanted(t.partition.topic)]
    return targets


def resolve_partitions(paths: Iterable[str], topics: Optional[str] = None,
                       skipped: Optional[List[Tuple[str, str]]] = None) -> Sequence["Partition | PartitionDir"]:
    """The partitions of :func:`resolve`'s targets, each once in the order first named, a data dir's by name
    only (:class:`PartitionDirs`: whoever works on one lists it, see :func:`loaded`, and skips one that holds a
    data directory's own files, see :func:`nested_data_dir`)."""
    wanted = topic_matcher(topics)
    pieces: List[Sequence["Partition | PartitionDir"]] = []
    named: Dict[str, Partition] = {}  # what PATHs named themselves (a few): each once
    walked: Dict[str, PartitionDirs] = {}
    for found in _resolved(paths, True, skipped):
        if isinstance(found, PartitionDirs):
            if found.path in walked:
                continue  # a data dir named twice
            walked[found.path] = found
            found = found.without(named).of_topics(wanted)
            pieces.append(found)
        else:
            partition = found.partition
            if partition.path in named or any(partition.path in w for w in walked.values()):
                continue
            named[partition.path] = partition
            if wanted(partition.topic):
                if pieces and isinstance(pieces[-1], list):
                    pieces[-1].append(partition)
                else:
                    pieces.append([partition])
    return Chain(pieces)


def _topic_of(name: str) -> str:
    parsed = names.parse_partition_dir(name)
    return parsed[0] if parsed else name


def resolve_uri(uri: str) -> List[Target]:
    """A remote PATH (``s3://bucket/kafka/data``...) as :func:`resolve` resolves a local one, from one
    recursive listing: a ``.log`` object -> one segment; else every folder holding segment files that is
    named like a partition (replica dirs skipped as a data dir's walk skips them) -> its partition."""
    uri = uri.rstrip("/")
    if uri.endswith(names.LOG_SUFFIX):
        parent = uri.rsplit("/", 1)[0]
        part = _remote_partitions(parent, storage.list_tree(parent), whole=True).get(parent)
        if part is None or not any(s.log == uri for s in part.segments):
            raise FileUnreadableError("no such object", path=uri)
        return [Target(part, names.base_offset_from_name(uri))]
    found = _remote_partitions(uri, storage.list_tree(uri))
    return [Target(found[k]) for k in sorted(found)]


def _remote_partitions(root: str, entries: List[storage.Entry], whole: bool = False) -> Dict[str, Partition]:
    """Partitions by URI from a listing below `root` (`whole`: root itself is the partition)."""
    folders: Dict[str, List[Tuple[str, bool]]] = {}
    for entry in entries:
        parent, _, name = entry.uri.rpartition("/")
        folders.setdefault(parent, []).append((name, entry.is_file))
    if whole:
        return {root: Partition(root, root.rsplit("/", 1)[0], folders.get(root, []))}
    out: Dict[str, Partition] = {}
    for folder, listing in folders.items():
        name = folder.rsplit("/", 1)[1]
        if folder != root and not folder.startswith(root + "/"):
            continue
        if name.endswith(names.REPLICA_DIR_SUFFIXES) or names.parse_partition_dir(name) is None:
            continue
        if any(is_file and _offset_of(n) is not None for n, is_file in listing):
            out[folder] = Partition(folder, folder.rsplit("/", 1)[0], listing)
    return out


def nothing_found(paths: Iterable[str], topics: Optional[str] = None) -> UsageError:
    """The usage error of PATHS (and --topics) leaving no partition to work on."""
    return UsageError("no partitions found in " + ", ".join(paths) + (f" matching --topics {topics!r}" if topics else ""))


def resolve_some(paths: Iterable[str], topics: Optional[str] = None) -> List[Target]:
    """:func:`resolve`, refusing (usage error) when nothing is found."""
    paths = list(paths)
    targets = resolve(paths, topics)
    if not targets:
        raise nothing_found(paths, topics)
    return targets


def coordinator_partitions(paths: Iterable[str], topic: str, num_partitions: int,
                           option: str) -> Tuple[List["Partition"], List["Partition"], List[int]]:
    """Every partition under `paths`, those of a coordinator's internal `topic` (by partition number), and
    the numbers found; a partition number past `num_partitions` is a usage error naming `option`."""
    if num_partitions < 1:
        raise UsageError(f"the number of {topic} partitions must be at least 1, not {num_partitions}")
    partitions = [t.partition for t in resolve(paths)]
    internal = sorted((p for p in partitions if p.topic == topic), key=lambda p: p.partition)
    found = sorted({p.partition for p in internal})
    beyond = [n for n in found if n >= num_partitions]
    if beyond:
        raise UsageError(f"{topic}-{beyond[0]} found but the topic has {num_partitions} partitions (set {option})")
    return partitions, internal, found


def group_by_data_dir(targets: Iterable[Target]) -> Dict[str, List[Target]]:
    """Targets keyed by their data directory (one lock per data dir)."""
    out: Dict[str, List[Target]] = {}
    for target in targets:
        out.setdefault(target.partition.data_dir, []).append(target)
    return out


def lock_path(data_dir: str) -> str:
    return os.path.join(data_dir, LOCK_FILE)


# --------------------------------------------------------------------------- lookups


def _records_from(partition: Partition, seg_idx: int, position: int, stats: LookupStats,
                  accept_batch, accept_record):
    """Records (segment, batch, record) from `position` of segment `seg_idx` onward, in log order,
    starting at the first record of an accepted batch that is accepted."""
    started = False
    for i in range(seg_idx, len(partition.segments)):
        segment = partition.segments[i]
        start = position if i == seg_idx else 0
        for batch in read_batches(segment.log, start=start):
            stats.log_bytes += batch.size
            if not started:
                stats.batches_scanned += 1
                if not accept_batch(batch):
                    continue
            for record in batch:  # streamed: a huge compressed batch is not held whole
                if not started:
                    if not accept_record(record):
                        continue
                    started = True
                yield segment, batch, record


def find_offset(partition: Partition, target: int, stats: Optional[LookupStats] = None):
    """Records from the first one with offset >= target (the segment by base offset, then the
    sparse offset index, then a forward scan: LogSegment.translateOffset)."""
    stats = stats if stats is not None else LookupStats()
    bases = [s.base_offset for s in partition.segments]
    if not bases:
        return iter(())
    i = max(0, bisect.bisect_right(bases, target) - 1)
    position = partition.segments[i].translate_offset(target, stats)
    return _records_from(partition, i, position, stats,
                         lambda b: b.last_offset >= target, lambda r: r.offset >= target)


def find_timestamp(partition: Partition, timestamp: int, stats: Optional[LookupStats] = None):
    """Records from the first one with timestamp >= `timestamp` (fetchOffsetByTimestamp: the first
    segment whose largest timestamp reaches it, its time index, its offset index, a scan)."""
    stats = stats if stats is not None else LookupStats()
    for i, segment in enumerate(partition.segments):
        if largest_timestamp(segment, stats)[0] < timestamp:  # UnifiedLog.fetchOffsetByTimestamp's skip
            continue
        position = segment.translate_offset(segment.offset_for_timestamp(timestamp, stats), stats)
        return _records_from(partition, i, position, stats,
                             lambda b: b.max_timestamp >= timestamp, lambda r: r.timestamp >= timestamp)
    return iter(())


class Lookup:
    """``kstore find``: the records from an offset or a timestamp on, found as the broker finds them,
    and what the lookup read to get to the first one."""

    def __init__(self, partition_dir: str, *, offset: Optional[int] = None, timestamp: Optional[int] = None,
                 count: int = 1) -> None:
        if (offset is None) == (timestamp is None):
            raise UsageError("give exactly one of --offset and --timestamp")
        if not is_partition_dir(partition_dir):
            raise UsageError("not a partition directory (it holds no segments)", path=partition_dir)
        self.partition = Partition(partition_dir)
        self.target = f"offset {offset}" if offset is not None else f"timestamp {timestamp}"
        self.count = count
        self.stats = LookupStats()
        self._found = (find_offset(self.partition, offset, self.stats) if offset is not None
                       else find_timestamp(self.partition, timestamp, self.stats))
        #: (segment base offset, batch position, offset) of the first record found, and the lookup's cost then.
        self.first: Optional[Tuple[int, int, int]] = None
        self.first_stats: Optional[LookupStats] = None
        self.printed = 0

    def records(self):
        """Up to ``count`` (segment, batch, record) from the target on."""
        for segment, batch, record in self._found:
            if self.first is None:
                self.first = (segment.base_offset, batch.position, record.offset)
                self.first_stats = self.stats.copy()
            yield segment, batch, record
            self.printed += 1
            if self.printed >= self.count:
                return

    def summary(self) -> dict:
        """The lookup line (JSON's last object): found or not, where, bytes read to get there."""
        out = {"type": "lookup", "target": self.target, "found": self.first is not None, "records": self.printed}
        if self.first is not None:
            out.update(segment=self.first[0], batch_position=self.first[1], offset=self.first[2])
            out.update(self.first_stats.to_dict())
        else:
            out.update(self.stats.to_dict())
        return out


def partitions_of(targets: Iterable[Target]) -> List[Partition]:
    """The partitions of `targets`, each once, in the order first named (several .log files of one
    partition name it once)."""
    seen: Dict[str, Partition] = {}
    for target in targets:
        seen.setdefault(target.partition.path, target.partition)
    return list(seen.values())
