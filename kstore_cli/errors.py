"""The one exception tree of kstore, and the exit codes the CLI maps it to.

Every error raised by the core derives from :class:`KstoreError`. Errors about
bytes on disk carry the file, the byte position, what was expected and what
was found, so a message can point an operator at the exact spot.
"""

from __future__ import annotations

import enum
from typing import Optional


class ExitStatus(enum.IntEnum):
    """Exit codes of every kstore command (documented in the README)."""

    OK = 0
    #: The data has problems (corruption, index mismatches, failed checks).
    PROBLEMS = 1
    #: The command line was wrong.
    USAGE = 2
    #: A file could not be opened or read at all.
    UNREADABLE = 3


class KstoreError(Exception):
    """Base of every error kstore raises on purpose."""

    exit_status: ExitStatus = ExitStatus.PROBLEMS

    def __init__(
        self,
        message: str,
        *,
        path: Optional[str] = None,
        position: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.position = position

    def __reduce__(self):
        # An error raised in a --jobs worker crosses back to the command whatever its class's __init__ takes.
        return _restore_error, (type(self), self.args, self.__dict__)

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = str(self.path)
            if self.position is not None:
                where += f" at byte {self.position}"
            where += ": "
        return where + self.message


class UsageError(KstoreError):
    """Options that do not make sense together, or a bad argument value."""

    exit_status = ExitStatus.USAGE


class InvalidConfigError(UsageError):
    """A config value Kafka's ConfigDef rejects (its ConfigException), with Kafka's own message. Where the
    value comes from the cluster metadata log, the command refuses that partition (exit 1) instead."""


class FileUnreadableError(KstoreError):
    """A file is missing, is a directory, or cannot be opened or read."""

    exit_status = ExitStatus.UNREADABLE


class UnsafeFileError(FileUnreadableError):
    """A file kstore was to write, cut or move is a symbolic link or not a regular file (a FIFO, a
    device...): refused, since writing through it could change a file outside the data dir."""


class RemoteReadError(FileUnreadableError):
    """A remote object (s3://, gs://, ...) could not be listed or read after its retries: the message
    names the byte range, `path` the object URI (kstore_cli.record.storage)."""


class OutputError(FileUnreadableError):
    """The command's own output (stdout, an output file) could not be written."""


class CorruptDataError(KstoreError):
    """Bytes on disk do not follow Kafka's format."""


class CorruptRecordError(CorruptDataError):
    """A batch or record is damaged (Kafka's CorruptRecordException)."""


class InvalidRecordError(CorruptDataError):
    """A batch or record is structurally invalid (Kafka's InvalidRecordException)."""


class CorruptIndexError(CorruptDataError):
    """An offset, time or transaction index is damaged (Kafka's CorruptIndexException)."""


class CorruptSnapshotError(CorruptDataError):
    """A producer-state snapshot is damaged (Kafka's CorruptSnapshotException)."""


class CorruptCheckpointError(CorruptDataError):
    """A text checkpoint file does not parse."""


class CodecError(CorruptDataError):
    """Compressed bytes could not be decompressed."""


class CodecUnavailableError(KstoreError):
    """The library for a compression codec is not installed."""

    exit_status = ExitStatus.UNREADABLE


class MissingDependencyError(KstoreError, ImportError):
    """An optional dependency a command needs is not installed (pyspark and pyarrow: the ``spark``
    extra). Also an ImportError, so ``import kstore_cli.spark`` fails the way a missing import does."""

    exit_status = ExitStatus.UNREADABLE


class RecordTooLargeError(KstoreError):
    """Decompressed data bigger than kstore's bound (KSTORE_MAX_RECORD_BYTES) on what it holds at once.

    Not a verdict on the data (Kafka may hold such a record): kstore refused to read it into
    memory, so the command could not read the file, exit status 3.
    """

    exit_status = ExitStatus.UNREADABLE


class RecordParseError(KstoreError):
    """A record parser (offsets, transaction log, ...) met data it cannot handle.

    Raised where Kafka's DumpLogSegments aborts with an exception instead of
    printing a "skipping" line.
    """


class LogDirLockedError(KstoreError):
    """A live process (a broker, or another kstore) holds the log dir's lock."""


def _restore_error(cls: type, args: tuple, state: dict) -> KstoreError:
    """A pickled KstoreError rebuilt without calling its class's __init__."""
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc
