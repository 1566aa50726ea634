"""Every file change kstore makes goes through here: atomic writes, renames, deletes,
truncation and directory fsyncs (the log dir lock, built on them, is :mod:`kstore_cli.log.locks`).

Keeping them in one module gives two guarantees a reviewer can check in one
place: writes are temporary file -> fsync -> atomic rename -> directory fsync,
and tests can arm a crash point (SIGKILL at the N-th operation, via the
``KSTORE_CRASH_AT`` environment variable or :func:`arm_crash`) to prove that a
kill at any step leaves a recoverable directory, or a fault (:func:`arm_fault`:
the N-th operation fails with an errno such as ENOSPC or EACCES, as the OS would
report a full disk or a permission problem) to prove that errors are reported
and leave a recoverable directory too.

Every file created here takes its owner, group and mode from the file it replaces, else from the
directory's segment files (:func:`owner_for`), as the broker created them, whatever user and umask
kstore runs with; every file is created ``O_CREAT|O_EXCL|O_NOFOLLOW`` and no write, truncation or
append goes through a symbolic link (:func:`refuse_link`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import sys
from typing import Callable, Iterable, Iterator, List, Optional, Tuple

from kstore_cli.errors import FileUnreadableError, KstoreError, UnsafeFileError
from kstore_cli.record.reader import describe_kind

CRASH_ENV = "KSTORE_CRASH_AT"
LOCK_FILE = ".lock"
TMP_SUFFIX = ".kstore-tmp"
#: Suffixes of the transient names a file has on its way to its final name (the final name's
#: owner and mode are what the transient file gets).
_TRANSIENT_SUFFIXES = (TMP_SUFFIX, ".cleaned", ".swap", ".deleted")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Flags of every file kstore creates: never an existing entry, never through a symbolic link.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC

_op_count = 0
_crash_at: Optional[int] = None
_crash_hook: Optional[Callable[[int, str, str], None]] = None
_env_read = False
_fault_at: Optional[int] = None
_fault_errno = 0
_pending_fault: Optional[int] = None
#: Every operation performed since arm_crash/arm_fault, as (kind, path), for tests that audit what a command
#: did. Nothing is recorded until a test arms the hooks: in production the list stays empty.
journal: List[tuple] = []
_recording = False


def arm_crash(at: Optional[int], hook: Optional[Callable[[int, str, str], None]] = None) -> None:
    """Kill the process (or call hook) just before the at-th file operation (1-based); None disarms."""
    global _crash_at, _op_count, _crash_hook, _env_read, _fault_at, _pending_fault, _recording
    _crash_at = at
    _crash_hook = hook
    _op_count = 0
    _env_read = True
    _fault_at = None
    _pending_fault = None
    _recording = True
    journal.clear()


def arm_fault(at: int, err: int = errno.ENOSPC) -> None:
    """Make the at-th file operation (1-based, counted as for arm_crash) fail with OSError(err),
    where the OS would report it (a write for ENOSPC, the open/rename/unlink itself otherwise);
    arm_crash(None) disarms. For tests: a full disk or a read-only file cannot be made portably."""
    global _fault_at, _fault_errno, _op_count, _pending_fault, _crash_at, _env_read, _recording
    _crash_at = None
    _env_read = True
    _fault_at = at
    _fault_errno = err
    _pending_fault = None
    _op_count = 0
    _recording = True
    journal.clear()


def _injected() -> None:
    """Raise the armed fault, once, at the first I/O point of the operation it was armed for."""
    global _pending_fault
    if _pending_fault is not None:
        err, _pending_fault = _pending_fault, None
        raise OSError(err, os.strerror(err))


def operation_count() -> int:
    """File operations performed since the last arm_crash (or start)."""
    return _op_count


def _step(kind: str, path: str) -> None:
    global _op_count, _crash_at, _env_read
    _parent_alive_or_die()
    if not _env_read:
        _env_read = True
        value = os.environ.get(CRASH_ENV)
        if value:
            _crash_at = int(value)
    global _pending_fault
    _op_count += 1
    if _recording:
        journal.append((kind, path))
    if _fault_at is not None and _op_count == _fault_at:
        _pending_fault = _fault_errno
    if _crash_at is not None and _op_count == _crash_at:
        if _crash_hook is not None:
            _crash_hook(_op_count, kind, path)
        else:
            os.kill(os.getpid(), signal.SIGKILL)
        _parent_alive_or_die()  # a hook that paused (a test's) may have outlived the parent


# --------------------------------------------------------------------------- worker processes

#: In a worker process (``recover --jobs``): the pid of the parent that holds the data dirs' ``.lock``.
_parent_pid: Optional[int] = None
#: In a worker process: the lock the workers share for files several of them rewrite (the data dir's
#: checkpoints, see :func:`shared_update`).
_shared_lock = None
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the kernel kills this process when its parent dies (Linux;
    elsewhere only the check in :func:`_step` stands)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def bind_to_parent(parent_pid: int, shared_lock: object = None) -> None:
    """First thing a worker process does: bind itself to its parent `parent_pid`, which holds the data
    dirs' ``.lock`` for it (a forked child does not inherit an fcntl lock), so that it writes nothing
    once the lock is no longer held by its living parent: the kernel SIGKILLs it when the parent dies;
    a parent that died before that was armed is seen now (the worker was reparented: another ppid);
    and every file operation first checks the parent again (:func:`_parent_alive_or_die`). The kernel
    drops a dying parent's locks just before it signals the children: a worker inside a file operation
    at that instant is stopped there as by a crash (every step is crash-safe) and starts no other.
    `shared_lock` (a multiprocessing lock) serializes :func:`shared_update` across the workers."""
    global _parent_pid, _shared_lock
    _die_with_parent()
    _parent_pid = parent_pid
    _shared_lock = shared_lock
    _parent_alive_or_die()


def _parent_alive_or_die() -> None:
    """In a worker whose parent is gone (the lock with it): die at once, as the kernel's SIGKILL would,
    so that nothing more is written and no cleanup (which writes too) runs."""
    if _parent_pid is not None and os.getppid() != _parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def shared_update() -> Iterator[None]:
    """A read-modify-write of a file several workers rewrite (a data dir's checkpoint, one entry per
    partition): one worker at a time, so none loses another's entry nor takes its temporary file.
    A no-op outside a worker (a single process is alone under the data dir's ``.lock``)."""
    if _shared_lock is None:
        yield
        return
    with _shared_lock:
        yield


#: What an error in the middle of a command means for the data (appended to its message).
_PARTIAL = "stopped there; rerun the command once this is fixed and it finishes or rolls back the change"
_NEW_FILE = "nothing was replaced"


def _fail(action: str, path: str, exc: OSError, consequence: str = _NEW_FILE) -> KstoreError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        reason = "no space left on device"
    return FileUnreadableError(f"could not {action}: {reason}; {consequence}", path=path)


# --------------------------------------------------------------------------- owners, modes, links

#: (uid, gid, permission bits) a new file gets.
Owner = Tuple[int, int, int]


def refuse_link(path: str) -> None:
    """Raise UnsafeFileError when path exists and is not a regular file (a symbolic link, a FIFO...):
    kstore never writes through a link nor onto anything but a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise FileUnreadableError(f"cannot be examined: {exc.strerror or exc}", path=path) from None
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise UnsafeFileError(
            f"is a symbolic link (to {target}); kstore never writes through a link: replace it with the "
            "file itself (or name the real path) and rerun", path=path)
    raise UnsafeFileError(f"is {describe_kind(st.st_mode)}, not a regular file; refusing to change it", path=path)


def refuse_links(paths: Iterable[str]) -> None:
    """:func:`refuse_link` for each path (checked before a command changes anything)."""
    for path in paths:
        refuse_link(path)


def partition_files(partition_dir: str, data_dir: Optional[str] = None) -> List[str]:
    """Every entry a mutating command may write, rename or cut for a partition: the entries of
    the partition dir (segments, indexes, snapshots, checkpoints, leftovers), and the data dir's
    checkpoints and .lock."""
    out: List[str] = []
    try:
        with os.scandir(partition_dir) as it:
            out.extend(e.path for e in it if not e.is_dir(follow_symlinks=False))
    except OSError as exc:
        raise FileUnreadableError(f"cannot be listed: {exc.strerror or exc}", path=partition_dir) from None
    if data_dir is not None:
        try:
            with os.scandir(data_dir) as it:
                out.extend(e.path for e in it
                           if (e.name.endswith("-checkpoint") or e.name == LOCK_FILE)
                           and not e.is_dir(follow_symlinks=False))
        except OSError as exc:
            raise FileUnreadableError(f"cannot be listed: {exc.strerror or exc}", path=data_dir) from None
    return out


def _owner_of(st: os.stat_result, from_dir: bool = False) -> Owner:
    mode = stat.S_IMODE(st.st_mode)
    if from_dir:
        mode &= 0o666  # a directory's x bits mean "searchable", not "executable"
    return st.st_uid, st.st_gid, mode


def owner_for(path: str) -> Optional[Owner]:
    """The owner and mode a file kstore writes at path gets, as the broker created its files: those
    of the file it replaces (or becomes, for a transient name); else of the directory's segment files
    (another regular file of the directory when it has none); else the directory's own (x bits off)."""
    path = os.fspath(path)
    candidates = [path]
    stripped = path
    while stripped.endswith(_TRANSIENT_SUFFIXES):
        stripped = stripped[: stripped.rfind(".")]
        candidates.append(stripped)
    for candidate in candidates:
        try:
            st = os.lstat(candidate)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            return _owner_of(st)
    directory = os.path.dirname(os.path.abspath(path))
    other: Optional[os.stat_result] = None
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.name.endswith(_TRANSIENT_SUFFIXES) or entry.name == LOCK_FILE:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if entry.name.endswith(".log"):
                    return _owner_of(st)
                if other is None:
                    other = st
        if other is not None:
            return _owner_of(other)
        return _owner_of(os.stat(directory), from_dir=True)
    except OSError:
        return None


def apply_owner(fd: int, owner: Optional[Owner]) -> None:
    """Give an open file (just created by kstore) the owner, group and mode `owner`."""
    if owner is None:
        return
    uid, gid, mode = owner
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) != (uid, gid):
        try:
            os.fchown(fd, uid, gid)
        except PermissionError:
            if os.geteuid() == 0:
                raise
            # Not root: the file stays ours (the user running kstore), as any tool's output would.
    os.fchmod(fd, mode)  # after the chown, which clears set-id bits


def _create(path: str, owner: Optional[Owner]) -> int:
    """Create path exclusively (O_EXCL|O_NOFOLLOW: never an existing entry, never through a link),
    private until it has `owner`'s owner and mode."""
    fd = os.open(path, _CREATE_FLAGS, 0o600)
    try:
        apply_owner(fd, owner)
    except OSError:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    return fd


def _create_tmp(tmp: str, owner: Optional[Owner]) -> int:
    """:func:`_create` for kstore's own temporary name: a leftover under that name (a killed run's,
    or anything planted there) is removed first -- unlink removes a link, never its target."""
    try:
        return _create(tmp, owner)
    except FileExistsError:
        st = os.lstat(tmp)
        if stat.S_ISDIR(st.st_mode):
            raise
        os.unlink(tmp)
    return _create(tmp, owner)


def fsync_dir(directory: str) -> None:
    """fsync a directory so renames and deletes in it survive a power loss."""
    _step("fsync-dir", directory)
    try:
        _injected()
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _fail("sync the directory", directory, exc, _PARTIAL) from None


def atomic_write(path: str, data: "bytes | Callable[[object], None]") -> None:
    """Replace path with data: temporary file, fsync, rename over path, fsync the directory.

    data may be bytes or a function that writes to the open binary file. The new file keeps the
    owner and mode of the one it replaces (:func:`owner_for`); the temporary file is created
    exclusively in path's own directory without following links, and a path that is a symbolic
    link (or not a regular file) is refused.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = path + TMP_SUFFIX
    refuse_link(path)
    _step("write", tmp)
    created = False
    try:
        _injected()
        fd = _create_tmp(tmp, owner_for(path))
        created = True
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            _step("fsync", tmp)
            os.fsync(f.fileno())
    except OSError as exc:
        if created:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise _fail("write", tmp, exc, f"{os.path.basename(path)} was not replaced") from None
    rename(tmp, path)
    fsync_dir(directory)


def rename(src: str, dst: str) -> None:
    """Atomic rename (the caller fsyncs the directory when the step must be durable)."""
    _step("rename", f"{src} -> {dst}")
    try:
        _injected()
        os.replace(src, dst)
    except OSError as exc:
        if src.endswith(TMP_SUFFIX):
            try:
                os.unlink(src)
            except OSError:
                pass
            raise _fail(f"rename to {dst}", src, exc, f"{os.path.basename(dst)} was not replaced") from None
        raise _fail(f"rename to {dst}", src, exc, _PARTIAL) from None


def unlink(path: str, missing_ok: bool = True) -> None:
    _step("unlink", path)
    try:
        _injected()
        os.unlink(path)
    except FileNotFoundError:
        if not missing_ok:
            raise FileUnreadableError("no such file", path=path) from None
    except OSError as exc:
        raise _fail("delete", path, exc, _PARTIAL) from None


def truncate(path: str, size: int) -> None:
    """Cut a file to size bytes and fsync it (never through a link: a link is refused)."""
    refuse_link(path)
    _step("truncate", path)
    try:
        _injected()
        fd = os.open(path, os.O_WRONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UnsafeFileError("is not a regular file; refusing to truncate it", path=path)
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_link(path)
        raise _fail("truncate", path, exc, _PARTIAL) from None


def _open_source(src: str) -> int:
    """Open a file kstore copies from: read-only, not through a link, a regular file (no hang on a FIFO)."""
    fd = os.open(src, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeFileError("is not a regular file; refusing to copy it", path=src)
    return fd


def copy_range(src: str, dst: str, start: int, end: int) -> None:
    """Write bytes [start, end) of src to a new file dst (fsynced), e.g. to keep a cut tail aside.
    dst gets src's owner and mode."""
    refuse_link(src)
    _step("write", dst)
    created = False
    try:
        fdin = _open_source(src)
        with os.fdopen(fdin, "rb") as fin:
            fd = _create(dst, _owner_of(os.fstat(fdin)))
            created = True
            with os.fdopen(fd, "wb") as fout:
                _injected()
                fin.seek(start)
                remaining = end - start
                while remaining > 0:
                    chunk = fin.read(min(remaining, 1 << 20))
                    if not chunk:
                        break
                    fout.write(chunk)
                    remaining -= len(chunk)
                fout.flush()
                os.fsync(fout.fileno())
    except OSError as exc:
        if created:  # a half copy is worth nothing; the source still has every byte
            try:
                os.unlink(dst)
            except OSError:
                pass
        raise _fail("write", dst, exc, _PARTIAL) from None


def append_range(src: Optional[str], dst: str, start: int, end: int, *, expected_size: int) -> None:
    """Append bytes [start, end) of src (zeros when src is None) to dst, which must be expected_size
    bytes long (so a rerun never appends twice), and fsync it. Never through a link."""
    refuse_link(dst)
    _step("append", dst)
    try:
        _injected()
        fd = os.open(dst, os.O_WRONLY | os.O_APPEND | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "wb") as fout:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeFileError("is not a regular file; refusing to append to it", path=dst)
            if st.st_size != expected_size:
                raise FileUnreadableError(f"is {st.st_size} bytes, expected {expected_size}; nothing appended",
                                          path=dst)
            fin = os.fdopen(_open_source(src), "rb") if src is not None else None
            try:
                if fin is not None:
                    fin.seek(start)
                remaining = end - start
                while remaining > 0:
                    n = min(remaining, 1 << 20)
                    chunk = fin.read(n) if fin is not None else bytes(n)
                    if not chunk:
                        raise FileUnreadableError(f"ends before byte {end}", path=src)
                    fout.write(chunk)
                    remaining -= len(chunk)
            finally:
                if fin is not None:
                    fin.close()
            fout.flush()
            os.fsync(fout.fileno())
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_link(dst)
        raise _fail("append to", dst, exc, _PARTIAL) from None


def make_dirs(directory: str, like: Optional[str] = None) -> None:
    """Create a directory and its parents (fsyncing each new one's parent). Each new directory gets
    the owner and mode of the directory `like` (default: its nearest existing ancestor)."""
    directory = os.path.abspath(directory)
    missing = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    try:
        template = os.stat(like if like is not None else d)
    except OSError:
        template = None
    for d in reversed(missing):
        _step("mkdir", d)
        try:
            _injected()
            os.mkdir(d, 0o700)
            if template is not None:
                fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC)
                try:
                    apply_owner(fd, (template.st_uid, template.st_gid, stat.S_IMODE(template.st_mode)))
                finally:
                    os.close(fd)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _fail("create directory", d, exc, _PARTIAL) from None
        fsync_dir(os.path.dirname(d))


def remove_empty_dir(directory: str) -> None:
    """Remove an empty directory (and fsync its parent)."""
    _step("rmdir", directory)
    try:
        _injected()
        os.rmdir(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _fail("remove directory", directory, exc, _PARTIAL) from None
    fsync_dir(os.path.dirname(os.path.abspath(directory)))


def move_file(src: str, dst: str) -> None:
    """Move src to dst (which must not exist): a rename on the same file system, else
    copy (fsynced) then delete. The caller fsyncs the source directory."""
    if os.path.lexists(dst):
        raise FileUnreadableError("destination already exists; nothing was moved", path=dst)
    refuse_link(src)
    _step("rename", f"{src} -> {dst}")
    try:
        _injected()
        os.rename(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise _fail(f"move to {dst}", src, exc, _PARTIAL) from None
    size = os.path.getsize(src)
    copy_range(src, dst, 0, size)
    fsync_dir(os.path.dirname(os.path.abspath(dst)))
    unlink(src)


#: What a new file gathers before a write(2).
WRITE_BUFFER_BYTES = 1 << 20


class NewFile:
    """A file being created by a writer: opened exclusively, written in pieces, then fsynced.

    Creating and finishing are file operations (crash points); the writes between them
    are not, so a crash test's step count does not grow with the data.
    """

    __slots__ = ("path", "_f", "size")

    def __init__(self, path: str) -> None:
        self.path = os.fspath(path)
        _step("create", self.path)
        try:
            if _pending_fault is not None and _pending_fault != errno.ENOSPC:
                _injected()  # EACCES & co. come from open(); a full disk from the first write
            # A large buffer: a write call per batch of a few KiB cost 3x the CPU of the bytes themselves.
            self._f = os.fdopen(_create(self.path, owner_for(self.path)), "wb", buffering=WRITE_BUFFER_BYTES)
        except FileExistsError:
            raise FileUnreadableError("already exists; remove the leftover first", path=self.path) from None
        except OSError as exc:
            raise _fail("create", self.path, exc, _NEW_FILE) from None
        self.size = 0

    def write(self, data: "bytes | memoryview") -> None:
        try:
            _injected()
            self._f.write(data)
        except OSError as exc:
            raise _fail("write", self.path, exc, _NEW_FILE) from None
        self.size += len(data)

    def finish(self) -> None:
        """Flush, fsync and close (the directory entry is fsynced by the caller)."""
        _step("fsync", self.path)
        try:
            _injected()
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
        except OSError as exc:
            raise _fail("write", self.path, exc, _NEW_FILE) from None

    def abort(self) -> None:
        """Close and delete the unfinished file."""
        try:
            self._f.close()
        except OSError:
            pass
        unlink(self.path)


def create_file(path: str) -> NewFile:
    """A new file (which must not exist yet) to write to; see :class:`NewFile`."""
    return NewFile(path)


def set_mtime(path: str, mtime: float) -> None:
    """Set a file's modification time (Kafka's time retention falls back to a segment's mtime)."""
    _step("utime", path)
    try:
        _injected()
        os.utime(path, (mtime, mtime))
    except OSError as exc:
        raise _fail("set the time of", path, exc, _PARTIAL) from None


def copy_file(src: str, dst: str, *, follow_links: bool = True) -> None:
    """Replace dst with a copy of src (atomically, as :func:`atomic_write`). `follow_links` False: src is
    never read through a link (a file of a dir another user can write, e.g. a quarantine dir)."""
    try:
        fd = os.open(src, os.O_RDONLY | _CLOEXEC | os.O_NONBLOCK | (0 if follow_links else _NOFOLLOW))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UnsafeFileError("is not a regular file; refusing to copy it", path=src)
            data = f.read()
    except OSError as exc:
        raise FileUnreadableError(f"cannot be read: {exc.strerror or exc}", path=src) from None
    atomic_write(dst, data)


def remove_tree(directory: str) -> None:
    """Remove a directory kstore built (a leftover of an interrupted run) with everything in it, deepest
    first; a symbolic link in it is removed, never followed."""
    if os.path.islink(directory) or not os.path.isdir(directory):
        unlink(directory)
        return
    for root, dirs, files in os.walk(directory, topdown=False):
        for name in files:
            unlink(os.path.join(root, name))
        for name in dirs:
            path = os.path.join(root, name)
            if os.path.islink(path):
                unlink(path)
            else:
                remove_empty_dir(path)
    remove_empty_dir(directory)
