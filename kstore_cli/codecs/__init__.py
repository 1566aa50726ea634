"""Compression codecs, in a registry keyed by Kafka's codec id (attribute bits 0-2).

Each codec's library is imported only when the codec is first used, so a
missing library fails with an actionable message only when data compressed
with that codec is met.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional, Sequence

from kstore_cli.codecs._bound import ENV_MAX_RECORD_BYTES, too_large
from kstore_cli.errors import CodecError, CodecUnavailableError, RecordTooLargeError, UsageError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

#: Kafka's codec names (CompressionType.name), as printed by kafka-dump-log.
CODEC_NAMES: Dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: Dict[str, int] = {name: codec_id for codec_id, name in CODEC_NAMES.items()}


#: The default bound: 32 MiB. Kafka's producer refuses a record whose uncompressed size is over
#: max.request.size (1 MiB by default), and the broker a batch over message.max.bytes (1 MiB + 12
#: by default); operators raise both for large messages, rarely past a few tens of MiB. 32 MiB held
#: (plus the key/value copies of a record) keeps any command under ~150 MB of RSS.
DEFAULT_MAX_RECORD_BYTES = 32 << 20
#: Decompressed output is pulled in chunks of this size.
CHUNK = 1 << 20
_SUFFIXES = {"": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
             "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from '67108864', '64M', '64MiB', '1G' (binary units); UsageError when it does not parse."""
    raw = text.strip().upper()
    digits = raw.rstrip("KMGIB")
    try:
        value = int(digits) * _SUFFIXES[raw[len(digits):]]
    except (KeyError, ValueError):
        raise UsageError(f"{text!r} is not a size in bytes (e.g. 67108864, 64M, 1G)") from None
    if value <= 0:
        raise UsageError(f"{text!r}: the size must be positive")
    return value


def _env_bound() -> int:
    text = os.environ.get(ENV_MAX_RECORD_BYTES, "").strip()
    if not text:
        return DEFAULT_MAX_RECORD_BYTES
    try:
        return parse_size(text)
    except UsageError:
        return DEFAULT_MAX_RECORD_BYTES  # reported by check_env_bound() at CLI start


def check_env_bound() -> None:
    """Raise UsageError when KSTORE_MAX_RECORD_BYTES is set but is not a size."""
    text = os.environ.get(ENV_MAX_RECORD_BYTES, "").strip()
    if text:
        try:
            parse_size(text)
        except UsageError as exc:
            raise UsageError(f"{ENV_MAX_RECORD_BYTES}: {exc.message}") from None


#: The most decompressed bytes kstore holds at once for one batch: one record when the records are
#: streamed, the whole decompressed batch when a command needs the batch's records together.
max_record_bytes: int = _env_bound()


def set_max_record_bytes(value: int) -> None:
    """Change the bound for this process (tests; the environment variable sets it at import)."""
    global max_record_bytes
    max_record_bytes = int(value)


class Codec:
    """One compression codec: its id, name, and how to decompress and compress."""

    __slots__ = ("codec_id", "name", "package", "_decompress", "_compress", "_stream")

    def __init__(
        self,
        codec_id: int,
        name: str,
        package: Optional[str],
        decompress: Callable[[bytes, int], bytes],
        compress: Optional[Callable[[bytes, int, Optional[int]], bytes]] = None,
        stream: Optional[Callable[[bytes, int], object]] = None,
    ) -> None:
        self.codec_id = codec_id
        self.name = name
        self.package = package
        self._decompress = decompress
        self._compress = compress
        self._stream = stream

    def _unavailable(self, exc: ImportError) -> CodecUnavailableError:
        return CodecUnavailableError(
            f"records are compressed with {self.name}, but the Python package "
            f"'{self.package}' is not installed ({exc}); install it with: "
            f"pip install {self.package}"
        )

    def _unavailable_for_writing(self, exc: ImportError) -> CodecUnavailableError:
        return CodecUnavailableError(
            f"writing {self.name} needs the Python package '{self.package}' "
            f"({exc}); install it with: pip install {self.package}"
        )

    def stream(self, data: "bytes | memoryview", magic: int) -> "DecompressStream":
        """A reader of the decompressed bytes (``read(n)``: at most n bytes, b"" at the end) that holds
        at most about one codec block (lz4 <= 4 MiB, snappy <= the bound, gzip/zstd ~n) besides its input."""
        try:
            if self._stream is None:
                return DecompressStream(self, _WholeReader(self._decompress(data, magic)))
            return DecompressStream(self, self._stream(data, magic))
        except ImportError as exc:
            raise self._unavailable(exc) from None
        except (CodecError, CodecUnavailableError, RecordTooLargeError):
            raise
        except Exception as exc:  # codec libraries raise their own error types
            raise CodecError(f"{self.name} data could not be decompressed: {exc}") from None

    def decompress_small(self, data: "bytes | memoryview", magic: int, limit: int) -> "bytes | bytearray | None":
        """The whole decompressed data when it is at most `limit` bytes, else None (the caller then streams
        with :meth:`stream`); one call for gzip and lz4, the fast path for normal batches."""
        whole = _SMALL.get(self.codec_id)
        if whole is None:
            out = self.stream(data, magic).read_upto(limit + 1)
            return out if len(out) <= limit else None
        try:
            return whole(data, magic, limit)
        except ImportError as exc:
            raise self._unavailable(exc) from None
        except (CodecError, CodecUnavailableError, RecordTooLargeError):
            raise
        except Exception as exc:  # codec libraries raise their own error types
            raise CodecError(f"{self.name} data could not be decompressed: {exc}") from None

    def decompress(self, data: "bytes | memoryview", magic: int, limit: Optional[int] = None) -> "bytes | bytearray":
        """Decompress a whole v2 records section or legacy wrapper value, at most `limit` bytes of output
        (default :data:`max_record_bytes`): RecordTooLargeError past it, before holding more."""
        if limit is None:
            limit = max_record_bytes
        reader = self.stream(data, magic)
        out = reader.read_upto(limit + 1)
        if len(out) > limit:
            raise too_large(f"{self.name} data", f"more than {limit}", limit)
        return out

    def compress(self, data: "bytes | memoryview", magic: int, level: Optional[int] = None) -> bytes:
        """Compress bytes the way Kafka's writer frames them for this codec."""
        if self._compress is None:
            raise CodecError(f"compression with {self.name} is not supported")
        try:
            return self._compress(data, magic, level)
        except ImportError as exc:
            raise self._unavailable_for_writing(exc) from None

    def compress_many(self, datas: Sequence["bytes | bytearray"], magic: int, level: Optional[int] = None) -> List[bytes]:
        """:meth:`compress` of each, in order (zstd: in one library call, see :func:`.zstd.compress_many`)."""
        if self.codec_id == ZSTD and magic >= 2:
            try:
                from kstore_cli.codecs import zstd as impl

                return impl.compress_many(datas, level)
            except ImportError as exc:
                raise self._unavailable_for_writing(exc) from None
        return [self.compress(d, magic, level) for d in datas]


class _WholeReader:
    """A reader over bytes already in memory (the uncompressed 'codec')."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: "bytes | memoryview") -> None:
        self._data = memoryview(data)
        self._pos = 0

    def read(self, n: int) -> bytes:
        out = bytes(self._data[self._pos : self._pos + n])
        self._pos += len(out)
        return out


class DecompressStream:
    """A codec's decompressed bytes, pulled on demand; codec library errors become CodecError."""

    __slots__ = ("_codec", "_reader")

    def __init__(self, codec: Codec, reader: object) -> None:
        self._codec = codec
        self._reader = reader

    def read(self, n: int) -> bytes:
        """Up to n bytes (possibly fewer before the end); b"" at the end."""
        try:
            return self._reader.read(n)  # type: ignore[attr-defined]
        except ImportError as exc:
            raise self._codec._unavailable(exc) from None
        except (CodecError, RecordTooLargeError):
            raise
        except Exception as exc:  # codec libraries raise their own error types
            raise CodecError(f"{self._codec.name} data could not be decompressed: {exc}") from None

    def read_upto(self, n: int) -> "bytes | bytearray":
        """Up to n bytes (fewer only at the end), pulled CHUNK at a time into one growing buffer: never
        a buffer of n bytes for a short stream, nor the chunks and their join at once."""
        read = self.read
        first = read(min(n, CHUNK))
        if not first:
            return first
        second = read(min(n - len(first), CHUNK)) if len(first) < n else b""
        if not second:
            return first
        out = bytearray(first)
        out += second
        del first, second
        while len(out) < n:
            chunk = read(min(n - len(out), CHUNK))
            if not chunk:
                break
            out += chunk
        return out

    def skip(self, n: int) -> int:
        """Read and drop up to n bytes (all that remain for n < 0); how many there were."""
        got = 0
        while n < 0 or got < n:
            chunk = self.read(CHUNK if n < 0 else min(n - got, CHUNK))
            if not chunk:
                break
            got += len(chunk)
        return got


def _none_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    return bytes(data)


def _none_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    return bytes(data)


def _gzip_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import gzip as impl

    return impl.decompress(data)


def _gzip_stream(data: "bytes | memoryview", magic: int) -> object:
    from kstore_cli.codecs import gzip as impl

    return impl.open_stream(data)


def _gzip_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    from kstore_cli.codecs import gzip as impl

    return impl.compress(data, level)


def _snappy_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import snappy as impl

    return impl.decompress(data, bound=max_record_bytes)


def _snappy_stream(data: "bytes | memoryview", magic: int) -> object:
    from kstore_cli.codecs import snappy as impl

    return impl.open_stream(data, bound=max_record_bytes)


def _snappy_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    from kstore_cli.codecs import snappy as impl

    return impl.compress(data)


def _lz4_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import lz4 as impl

    return impl.decompress(data, verify_header_checksum=magic != 0)


def _lz4_stream(data: "bytes | memoryview", magic: int) -> object:
    from kstore_cli.codecs import lz4 as impl

    return impl.open_stream(data, verify_header_checksum=magic != 0)


def _lz4_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    from kstore_cli.codecs import lz4 as impl

    return impl.compress(data, broken_header_checksum=magic == 0, level=level)


def _zstd_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import zstd as impl

    return impl.decompress(data)


def _zstd_stream(data: "bytes | memoryview", magic: int) -> object:
    from kstore_cli.codecs import zstd as impl

    return impl.open_stream(data)


def _zstd_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    if magic < 2:
        raise CodecError("zstd compression needs message format v2 (magic 2); v0/v1 cannot hold it")
    from kstore_cli.codecs import zstd as impl

    return impl.compress(data, level)


_REGISTRY: Dict[int, Codec] = {
    NONE: Codec(NONE, "none", None, _none_decompress, _none_compress),
    GZIP: Codec(GZIP, "gzip", None, _gzip_decompress, _gzip_compress, _gzip_stream),
    SNAPPY: Codec(SNAPPY, "snappy", "python-snappy", _snappy_decompress, _snappy_compress, _snappy_stream),
    LZ4: Codec(LZ4, "lz4", "lz4", _lz4_decompress, _lz4_compress, _lz4_stream),
    ZSTD: Codec(ZSTD, "zstd", "zstandard", _zstd_decompress, _zstd_compress, _zstd_stream),
}


def _gzip_small(data: "bytes | memoryview", magic: int, limit: int) -> Optional[bytes]:
    from kstore_cli.codecs import gzip as impl

    return impl.decompress(data, limit)


def _lz4_small(data: "bytes | memoryview", magic: int, limit: int) -> Optional[bytes]:
    from kstore_cli.codecs import lz4 as impl

    return impl.decompress(data, verify_header_checksum=magic != 0, limit=limit)


def _zstd_small(data: "bytes | memoryview", magic: int, limit: int) -> Optional[bytes]:
    from kstore_cli.codecs import zstd as impl

    return impl.decompress(data, limit)


def _snappy_small(data: "bytes | memoryview", magic: int, limit: int) -> Optional[bytes]:
    from kstore_cli.codecs import snappy as impl

    return impl.decompress(data, limit, bound=max_record_bytes)


_SMALL = {GZIP: _gzip_small, SNAPPY: _snappy_small, LZ4: _lz4_small, ZSTD: _zstd_small}


def get_codec(codec_id: int) -> Codec:
    """The codec for Kafka's codec id; ids 5-7 are invalid, as in Kafka."""
    try:
        return _REGISTRY[codec_id]
    except KeyError:
        raise CodecError(f"Unknown compression type id: {codec_id}") from None


def codec_name(codec_id: int) -> str:
    """Kafka's name for a codec id (an unknown id raises CodecError)."""
    return get_codec(codec_id).name
