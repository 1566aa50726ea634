"""The locks a command takes before it changes anything: the data dir's ``.lock`` (as the broker takes it),
and flock(2) on the directories a command builds an output beside."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from typing import Dict, Iterable, Iterator, List, Mapping, Optional

from kstore_cli.errors import FileUnreadableError, KstoreError, LogDirLockedError
from kstore_cli.log.fileops import (
    _CLOEXEC, _NOFOLLOW, LOCK_FILE, _create, owner_for, partition_files, refuse_link, refuse_links,
)


class LogDirLock:
    """The data dir's ``.lock``, taken the way the broker takes it (an exclusive fcntl lock).

    A broker (or another kstore) holding it makes acquisition fail with
    LogDirLockedError, unless force=True, in which case the lock is skipped.
    """

    _held: Dict[str, int] = {}

    def __init__(self, data_dir: str, force: bool = False, partitions: Iterable[str] = ()) -> None:
        # The real path: a data dir reached through a symlinked alias is the same data dir, one lock.
        self.data_dir = os.path.realpath(data_dir)
        self.path = os.path.join(self.data_dir, LOCK_FILE)
        self.force = force
        #: Partition dirs about to be changed: a symbolic link (or a FIFO...) among their files or
        #: the data dir's checkpoints makes acquisition fail before anything changes, --force or not.
        self.partitions = list(partitions)
        self._fd: Optional[int] = None

    def __enter__(self) -> "LogDirLock":
        for partition in self.partitions:
            refuse_links(partition_files(partition, self.data_dir))
        if self.force:
            return self
        fd = self._open()
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise LogDirLockedError(
                    "the log dir is locked by a running process (a Kafka broker or another kstore); "
                    "stop it first, or pass --force if you are sure nothing is using this directory",
                    path=self.path,
                ) from None
            raise FileUnreadableError(f"cannot lock: {exc.strerror}", path=self.path) from None
        self._fd = fd
        return self

    def _open(self) -> int:
        """The lock file, never through a link; created (exclusively, with the data dir's owner and
        the mode of its files, as the broker creates it) when missing."""
        try:
            try:
                if not os.path.lexists(self.path):
                    return _create(self.path, owner_for(self.path))
                return self._open_existing()
            except FileExistsError:
                return self._open_existing()
        except KstoreError:
            raise
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                refuse_link(self.path)
            raise FileUnreadableError(f"cannot open the log dir lock: {exc.strerror}", path=self.path) from None

    def _open_existing(self) -> int:
        fd = os.open(self.path, os.O_RDWR | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            refuse_link(self.path)
        return fd

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


@contextlib.contextmanager
def lock_data_dirs(partitions_by_data_dir: Mapping[str, Iterable[str]], *, force: bool = False,
                   enabled: bool = True) -> Iterator[None]:
    """Every data dir's ``.lock`` taken first (in path order), held until the block ends: a command
    changes nothing unless all the dirs it will touch are its own. `partitions_by_data_dir` maps each
    data dir to the partition dirs about to change (checked for links before anything is locked).
    ``enabled=False`` (a dry run) takes none."""
    with contextlib.ExitStack() as stack:
        if enabled:
            for data_dir in sorted(partitions_by_data_dir):
                stack.enter_context(LogDirLock(data_dir, force=force,
                                               partitions=list(partitions_by_data_dir[data_dir])))
        yield


def _nearest_dir(path: str) -> str:
    """The real path of `path`, or of its nearest existing ancestor when it does not exist yet."""
    target = os.path.abspath(path)
    while not os.path.isdir(target) and os.path.dirname(target) != target:
        target = os.path.dirname(target)
    return os.path.realpath(target)


@contextlib.contextmanager
def lock_dirs(directories: Iterable[str], what: str) -> Iterator[None]:
    """An exclusive flock(2) on each directory itself (its nearest existing ancestor when it does not exist
    yet; each once, in path order), held until the block ends: for outputs built beside their final name
    (merge's ``<output>.kstore-tmp``), so that two runs never build, or clear, the same temp dir at once.
    A lock on a directory leaves no file behind; another run holding one is LogDirLockedError (exit 1)."""
    fds: List[int] = []
    try:
        for target in sorted({_nearest_dir(d) for d in directories}):
            try:
                fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
            except OSError as exc:
                raise FileUnreadableError(f"cannot open to lock: {exc.strerror}", path=target) from None
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK):
                    raise LogDirLockedError(f"another kstore process is writing {what} here (it holds a lock "
                                            "on this directory); wait for it to finish", path=target) from None
                raise FileUnreadableError(f"cannot lock: {exc.strerror}", path=target) from None
        yield
    finally:
        for fd in fds:
            os.close(fd)  # closing the last descriptor releases its flock


def is_locked(data_dir: str) -> bool:
    """Whether another process holds the data dir's lock (read-only probe)."""
    path = os.path.join(os.path.realpath(data_dir), LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        # A shared probe lock is refused while someone holds the exclusive one.
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            return exc.errno in (errno.EACCES, errno.EAGAIN)
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
