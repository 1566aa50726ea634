"""Objects in remote storage (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``) through pyarrow's filesystems.

What the readers need of a remote ``.log`` or index: its size, ranged reads (``read_at``: one request per
range, never a whole-object download of a segment) retried with backoff on a dropped connection or another
transient error (:func:`transient`), then one :class:`~kstore_cli.errors.RemoteReadError` naming the object
URI and the byte range; and one recursive listing of a folder. An error that no retry cures (a missing
bucket, access denied, an endpoint whose name does not resolve) is that line at once. Credentials, region
and endpoint come from the usual environment of each filesystem (``AWS_*``, ``~/.aws``, Google's and
Azure's) and from storage options (``--storage-option endpoint_override=http://...``: the keyword arguments
of ``pyarrow.fs.S3FileSystem``, ``GcsFileSystem``, ``AzureFileSystem``, ``HadoopFileSystem``), set once per
process with :func:`configure`.

pyarrow is the optional ``spark`` extra: it is imported only when a URI is met. ``file://`` URIs are local
paths (:func:`local_path`): they keep the mmap readers.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from kstore_cli.errors import FileUnreadableError, MissingDependencyError, RemoteReadError, UsageError

#: Bytes one ranged read of a task asks for at most (beside a batch larger than that): object stores
#: answer a request in tens of ms whatever its size, so reads are few and large; the next one is fetched
#: while this one is decoded (two in memory at most).
READ_AHEAD = 8 * 1024 * 1024
#: The first read of a range: planner lookups read one batch, not a read-ahead's worth.
FIRST_READ = 64 * 1024
#: Attempts of one read or listing before it fails, and the first pause between them (doubled each time).
ATTEMPTS = 4
BACKOFF_SECONDS = 0.2

_SCHEMES_WITH_CLASS = {"s3": "S3FileSystem", "gs": "GcsFileSystem", "gcs": "GcsFileSystem",
                       "abfs": "AzureFileSystem", "abfss": "AzureFileSystem", "hdfs": "HadoopFileSystem"}
_options: Dict[str, str] = {}
_filesystems: Dict[Tuple[str, str, Tuple[Tuple[str, str], ...], bool], Any] = {}
_lock = threading.Lock()
#: uri -> (size, mtime in ms) from listings: a planner asks each object's size once, the listing told it.
_known: Dict[str, Tuple[int, int]] = {}


class ReadStats:
    """Ranged reads made by this process (a test and bench hook): count, bytes, largest request."""

    reads = 0
    bytes = 0
    largest = 0


def is_uri(path: object) -> bool:
    """Whether `path` is a remote URI (``scheme://...``; ``file://`` is local)."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    """A ``file://`` URI's local path; any other path unchanged."""
    return path[len("file://"):] if path.startswith("file://") else path


def configure(options: Optional[Mapping[str, str]]) -> None:
    """The storage options of this process's filesystems (``endpoint_override``, ``region``, ...)."""
    global _options
    options = dict(options or {})
    if options != _options:
        with _lock:
            _options = options
            _filesystems.clear()


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text) if low.lstrip("-").isdigit() else float(text) if low.replace(".", "", 1).isdigit() else text
    except ValueError:
        return text


def _split(uri: str) -> Tuple[str, str, str]:
    scheme, _, rest = uri.partition("://")
    netloc, _, path = rest.partition("/")
    return scheme.lower(), netloc, path


def filesystem(uri: str, writing: bool = False) -> Tuple[Any, str]:
    """The pyarrow filesystem of `uri` (storage options applied) and the object path in it. `writing`: for
    an output, whose S3 requests (a multipart upload's parts) the AWS SDK retries on its retryable errors."""
    try:
        from pyarrow import fs as pafs
    except ImportError:
        raise MissingDependencyError("reading remote URIs needs pyarrow: pip install 'kstore-cli[spark]'") from None
    scheme, netloc, path = _split(uri)
    key = (scheme, netloc, tuple(sorted(_options.items())), writing)
    with _lock:
        fs = _filesystems.get(key)
    if fs is None:
        try:
            if scheme == "s3" or (_options and scheme in _SCHEMES_WITH_CLASS):
                kwargs = {k: _value(v) for k, v in _options.items()}
                if scheme == "s3":
                    # Reads: one retry layer, ours (_retrying: backoff, then the line naming the range), not
                    # two. Writes: the SDK's standard one (throttling, 5xx, the network), as only it can resend.
                    kwargs.setdefault("retry_strategy",
                                      pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS if writing else 1))
                cls = getattr(pafs, _SCHEMES_WITH_CLASS[scheme])
                if scheme == "hdfs":
                    host, _, port = netloc.partition(":")
                    fs = cls(host, int(port or 8020), **kwargs)
                elif scheme in ("abfs", "abfss"):
                    kwargs.setdefault("account_name", netloc.partition("@")[2].split(".")[0] or netloc)
                    fs = cls(**kwargs)
                else:
                    fs = cls(**kwargs)
            else:
                fs, _path = pafs.FileSystem.from_uri(uri)
        except TypeError as exc:  # a keyword the filesystem does not take
            raise UsageError(f"a storage option {scheme}:// does not take: {_one_line(exc)}") from None
        except (ValueError, OSError) as exc:
            raise FileUnreadableError(f"cannot open its filesystem: {_one_line(exc)}", path=uri) from None
        with _lock:
            _filesystems[key] = fs
    if scheme in ("s3", "gs", "gcs"):
        return fs, f"{netloc}/{path}".rstrip("/")
    if scheme in ("abfs", "abfss"):
        return fs, f"{netloc.partition('@')[0]}/{path}".rstrip("/")
    return fs, "/" + path.rstrip("/")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


#: pyarrow's errors are OSErrors whose text carries the cause; for S3 the AWS SDK's error type
#: (``AWS Error SLOW_DOWN during GetObject operation``, ``AWS Error UNKNOWN (HTTP status 503)``) and curl's
#: code (``curlCode: 18, Transferred a partial file``). These may pass if the call is made again: the
#: network (a dropped, refused or reset connection, a timeout), a 5xx answer, throttling.
_TRANSIENT = re.compile(
    r"AWS Error (NETWORK_CONNECTION|SLOW_DOWN|THROTTLING|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|REQUEST_TIMEOUT)"
    r"|HTTP status (5\d\d|429)|short read|timed? ?out|connection (reset|refused|aborted|closed)|broken pipe"
    r"|unavailable|throttl|slow ?down|too many requests|try again", re.IGNORECASE)
#: Network errors no retry cures: a host or proxy name that does not resolve (curl's codes 5 and 6).
_NOT_TRANSIENT = re.compile(r"curlCode: [56]\b|resolve (host|proxy)", re.IGNORECASE)


def transient(exc: OSError) -> bool:
    """Whether a failed remote call may pass if made again (so it is retried). Not: a missing bucket,
    access denied, bad credentials, a 4xx answer, a name that does not resolve, anything unknown."""
    text = str(exc)
    if isinstance(exc, FileNotFoundError) or _NOT_TRANSIENT.search(text):
        return False
    return isinstance(exc, (ConnectionError, TimeoutError)) or bool(_TRANSIENT.search(text))


def _retrying(what: str, uri: str, call, *args):
    """call(*args), retried with backoff on a transient OSError; RemoteReadError after the last attempt,
    or at once for an error no retry cures."""
    delay = BACKOFF_SECONDS
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call(*args)
        except FileNotFoundError:
            raise FileUnreadableError("no such object", path=uri) from None
        except OSError as exc:
            if not transient(exc):
                raise RemoteReadError(f"{what} failed: {_reason(exc)}", path=uri) from None
            if attempt == ATTEMPTS:
                raise RemoteReadError(f"{what} failed after {ATTEMPTS} attempts: {_reason(exc)}",
                                      path=uri) from None
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def _reason(exc: BaseException) -> str:
    """The error's one line without pyarrow's ``When reading ... in bucket 'b': `` (the URI is named)."""
    return re.sub(r"^When [^:]*? in bucket '[^']*': ", "", _one_line(exc))


class Entry(NamedTuple):
    """One object (or folder) of a listing."""

    uri: str
    is_file: bool
    size: int
    mtime_ms: int


def list_tree(uri: str) -> List[Entry]:
    """Everything below `uri`, from one recursive listing (retried), sorted by URI."""
    from pyarrow import fs as pafs

    fs, root = filesystem(uri)
    base = uri.rstrip("/")

    def listing():
        return fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=False))

    out = []
    for info in _retrying("listing", uri, listing):
        rel = info.path[len(root):].lstrip("/")
        full = f"{base}/{rel}"
        mtime = int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0
        is_file = info.type == pafs.FileType.File
        if is_file:
            _known[full] = (info.size, mtime)
        out.append(Entry(full, is_file, info.size if is_file else 0, mtime))
    return sorted(out)


def stat(uri: str) -> Tuple[int, int]:
    """(size, mtime in ms) of an object: from a listing when one named it, else asked (retried)."""
    known = _known.get(uri)
    if known is not None:
        return known
    from pyarrow import fs as pafs

    fs, path = filesystem(uri)
    info = _retrying("stat", uri, fs.get_file_info, path)
    if info.type != pafs.FileType.File:
        raise FileUnreadableError("no such object" if info.type == pafs.FileType.NotFound else "not a file",
                                  path=uri)
    mtime = int(info.mtime_ns // 1_000_000) if info.mtime_ns is not None else 0
    _known[uri] = (info.size, mtime)
    return _known[uri]


def output_info(uri: str) -> Any:
    """The file info of an output URI (asked as :func:`stat` asks); for ``s3://``, ``gs://`` and ``abfs://``
    a missing output needs its bucket (container): pyarrow's writers would fail only in each task."""
    from pyarrow import fs as pafs

    fs, path = filesystem(uri)
    info = _retrying("stat", uri, fs.get_file_info, path)
    bucket = path.split("/")[0]
    if info.type == pafs.FileType.NotFound and _split(uri)[0] in ("s3", "gs", "gcs", "abfs", "abfss") and bucket:
        if _retrying(f"stat of bucket {bucket}", uri, fs.get_file_info, bucket).type == pafs.FileType.NotFound:
            raise FileUnreadableError(f"no such bucket: {bucket} (kstore creates no bucket)", path=uri)
    return info


class RemoteFile:
    """An object opened for ranged reads: ``size`` and :meth:`read` (retried, then one error line)."""

    def __init__(self, uri: str, size: Optional[int] = None) -> None:
        """`size`: the object's size or the end of the range to be read, when known (no request then)."""
        self.uri = uri
        self.size = stat(uri)[0] if size is None else size
        self._fs, self._path = filesystem(uri)
        self._file = None

    def _read_into_at(self, start: int, view: memoryview) -> None:
        if self._file is None:
            self._file = self._fs.open_input_file(self._path)
        try:
            self._file.seek(start)
            got = self._file.readinto(view)
        except OSError:
            self._file = None  # a new connection for the next attempt
            raise
        if got != len(view):
            self._file = None
            raise OSError(f"short read: {got} of {len(view)} bytes")

    def read_into(self, start: int, view: memoryview) -> None:
        """Bytes [start, start + len(view)) into `view` (within the size), retried; RemoteReadError naming the
        range. No copy: the bytes land where the caller frames them."""
        if not len(view):
            return
        if start + len(view) > self.size:
            raise ValueError(f"bytes {start}-{start + len(view)} lie past {self.uri}'s end ({self.size})")
        ReadStats.reads += 1
        ReadStats.bytes += len(view)
        ReadStats.largest = max(ReadStats.largest, len(view))
        _retrying(f"read of bytes {start}-{start + len(view)}", self.uri, self._read_into_at, start, view)

    def read(self, start: int, length: int) -> bytes:
        """Bytes [start, start + length) (clipped to the size), retried; RemoteReadError naming the range."""
        data = bytearray(max(0, min(length, self.size - start)))
        self.read_into(start, memoryview(data))
        return bytes(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_object(uri: str) -> bytes:
    """A small object's bytes (an index, snapshot or checkpoint file), in read-ahead sized reads."""
    f = RemoteFile(uri)
    try:
        return b"".join(f.read(pos, READ_AHEAD) for pos in range(0, f.size, READ_AHEAD))
    finally:
        f.close()
