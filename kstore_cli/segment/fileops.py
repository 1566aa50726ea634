"""Every file change kstore makes goes through here: atomic writes, renames, deletes,
truncation, directory fsyncs, and the log dir lock.

Keeping them in one module gives two guarantees a reviewer can check in one
place: writes are temporary file -> fsync -> atomic rename -> directory fsync,
and tests can arm a crash point (SIGKILL at the N-th operation, via the
``KSTORE_CRASH_AT`` environment variable or :func:`arm_crash`) to prove that a
kill at any step leaves a recoverable directory, or a fault (:func:`arm_fault`:
the N-th operation fails with an errno such as ENOSPC or EACCES, as the OS would
report a full disk or a permission problem) to prove that errors are reported
and leave a recoverable directory too.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
from typing import Callable, Dict, List, Optional

from kstore_cli.errors import FileUnreadableError, KstoreError, LogDirLockedError

CRASH_ENV = "KSTORE_CRASH_AT"
LOCK_FILE = ".lock"
TMP_SUFFIX = ".kstore-tmp"

_op_count = 0
_crash_at: Optional[int] = None
_crash_hook: Optional[Callable[[int, str, str], None]] = None
_env_read = False
_fault_at: Optional[int] = None
_fault_errno = 0
_pending_fault: Optional[int] = None
#: Every operation performed, as (kind, path), for tests that audit what a command did.
journal: List[tuple] = []


def arm_crash(at: Optional[int], hook: Optional[Callable[[int, str, str], None]] = None) -> None:
    """Kill the process (or call hook) just before the at-th file operation (1-based); None disarms."""
    global _crash_at, _op_count, _crash_hook, _env_read, _fault_at, _pending_fault
    _crash_at = at
    _crash_hook = hook
    _op_count = 0
    _env_read = True
    _fault_at = None
    _pending_fault = None
    journal.clear()


def arm_fault(at: int, err: int = errno.ENOSPC) -> None:
    """Make the at-th file operation (1-based, counted as for arm_crash) fail with OSError(err),
    where the OS would report it (a write for ENOSPC, the open/rename/unlink itself otherwise);
    arm_crash(None) disarms. For tests: a full disk or a read-only file cannot be made portably."""
    global _fault_at, _fault_errno, _op_count, _pending_fault, _crash_at, _env_read
    _crash_at = None
    _env_read = True
    _fault_at = at
    _fault_errno = err
    _pending_fault = None
    _op_count = 0
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
    if not _env_read:
        _env_read = True
        value = os.environ.get(CRASH_ENV)
        if value:
            _crash_at = int(value)
    global _pending_fault
    _op_count += 1
    journal.append((kind, path))
    if _fault_at is not None and _op_count == _fault_at:
        _pending_fault = _fault_errno
    if _crash_at is not None and _op_count == _crash_at:
        if _crash_hook is not None:
            _crash_hook(_op_count, kind, path)
        else:
            os.kill(os.getpid(), signal.SIGKILL)


#: What an error in the middle of a command means for the data (appended to its message).
_PARTIAL = "stopped there; rerun the command once this is fixed and it finishes or rolls back the change"
_NEW_FILE = "nothing was replaced"


def _fail(action: str, path: str, exc: OSError, consequence: str = _NEW_FILE) -> KstoreError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        reason = "no space left on device"
    return FileUnreadableError(f"could not {action}: {reason}; {consequence}", path=path)


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

    data may be bytes or a function that writes to the open binary file.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = path + TMP_SUFFIX
    _step("write", tmp)
    try:
        with open(tmp, "wb") as f:
            _injected()
            if callable(data):
                data(f)
            else:
                f.write(data)
            f.flush()
            _step("fsync", tmp)
            os.fsync(f.fileno())
    except OSError as exc:
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
    """Cut a file to size bytes and fsync it."""
    _step("truncate", path)
    try:
        _injected()
        with open(path, "r+b") as f:
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise _fail("truncate", path, exc, _PARTIAL) from None


def copy_range(src: str, dst: str, start: int, end: int) -> None:
    """Write bytes [start, end) of src to a new file dst (fsynced), e.g. to keep a cut tail aside."""
    _step("write", dst)
    created = False
    try:
        with open(src, "rb") as fin, open(dst, "xb") as fout:
            created = True
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


class LogDirLock:
    """The data dir's ``.lock``, taken the way the broker takes it (an exclusive fcntl lock).

    A broker (or another kstore) holding it makes acquisition fail with
    LogDirLockedError, unless force=True, in which case the lock is skipped.
    """

    _held: Dict[str, int] = {}

    def __init__(self, data_dir: str, force: bool = False) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.path = os.path.join(self.data_dir, LOCK_FILE)
        self.force = force
        self._fd: Optional[int] = None

    def __enter__(self) -> "LogDirLock":
        if self.force:
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise FileUnreadableError(f"cannot open the log dir lock: {exc.strerror}", path=self.path) from None
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

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is not None:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


def is_locked(data_dir: str) -> bool:
    """Whether another process holds the data dir's lock (read-only probe)."""
    path = os.path.join(data_dir, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
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


def make_dirs(directory: str) -> None:
    """Create a directory and its parents (fsyncing each new one's parent)."""
    directory = os.path.abspath(directory)
    missing = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for d in reversed(missing):
        _step("mkdir", d)
        try:
            _injected()
            os.mkdir(d)
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
    if os.path.exists(dst):
        raise FileUnreadableError("destination already exists; nothing was moved", path=dst)
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
            self._f = open(self.path, "xb")
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


def copy_file(src: str, dst: str) -> None:
    """Replace dst with a copy of src (atomically, as :func:`atomic_write`)."""
    try:
        with open(src, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise FileUnreadableError(f"cannot be read: {exc.strerror or exc}", path=src) from None
    atomic_write(dst, data)
