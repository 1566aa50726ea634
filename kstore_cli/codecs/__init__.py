"""Compression codecs, in a registry keyed by Kafka's codec id (attribute bits 0-2).

Each codec's library is imported only when the codec is first used, so a
missing library fails with an actionable message only when data compressed
with that codec is met.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

from kstore_cli.errors import CodecError, CodecUnavailableError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

#: Kafka's codec names (CompressionType.name), as printed by kafka-dump-log.
CODEC_NAMES: Dict[int, str] = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS: Dict[str, int] = {name: codec_id for codec_id, name in CODEC_NAMES.items()}


class Codec:
    """One compression codec: its id, name, and how to decompress and compress."""

    __slots__ = ("codec_id", "name", "package", "_decompress", "_compress")

    def __init__(
        self,
        codec_id: int,
        name: str,
        package: Optional[str],
        decompress: Callable[[bytes, int], bytes],
        compress: Optional[Callable[[bytes, int, Optional[int]], bytes]] = None,
    ) -> None:
        self.codec_id = codec_id
        self.name = name
        self.package = package
        self._decompress = decompress
        self._compress = compress

    def decompress(self, data: "bytes | memoryview", magic: int) -> bytes:
        """Decompress a whole v2 records section or legacy wrapper value."""
        try:
            return self._decompress(data, magic)
        except ImportError as exc:
            raise CodecUnavailableError(
                f"records are compressed with {self.name}, but the Python package "
                f"'{self.package}' is not installed ({exc}); install it with: "
                f"pip install {self.package}"
            ) from None
        except (CodecError, CodecUnavailableError):
            raise
        except Exception as exc:  # codec libraries raise their own error types
            raise CodecError(f"{self.name} data could not be decompressed: {exc}") from None

    def compress(self, data: "bytes | memoryview", magic: int, level: Optional[int] = None) -> bytes:
        """Compress bytes the way Kafka's writer frames them for this codec."""
        if self._compress is None:
            raise CodecError(f"compression with {self.name} is not supported")
        try:
            return self._compress(data, magic, level)
        except ImportError as exc:
            raise CodecUnavailableError(
                f"writing {self.name} needs the Python package '{self.package}' "
                f"({exc}); install it with: pip install {self.package}"
            ) from None


def _none_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    return bytes(data)


def _none_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    return bytes(data)


def _gzip_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import gzip as impl

    return impl.decompress(data)


def _gzip_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    from kstore_cli.codecs import gzip as impl

    return impl.compress(data, level)


def _snappy_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import snappy as impl

    return impl.decompress(data)


def _snappy_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    from kstore_cli.codecs import snappy as impl

    return impl.compress(data)


def _lz4_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import lz4 as impl

    return impl.decompress(data, verify_header_checksum=magic != 0)


def _lz4_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    from kstore_cli.codecs import lz4 as impl

    return impl.compress(data, broken_header_checksum=magic == 0, level=level)


def _zstd_decompress(data: "bytes | memoryview", magic: int) -> bytes:
    from kstore_cli.codecs import zstd as impl

    return impl.decompress(data)


def _zstd_compress(data: "bytes | memoryview", magic: int, level: Optional[int]) -> bytes:
    if magic < 2:
        raise CodecError("zstd compression needs message format v2 (magic 2); v0/v1 cannot hold it")
    from kstore_cli.codecs import zstd as impl

    return impl.compress(data, level)


_REGISTRY: Dict[int, Codec] = {
    NONE: Codec(NONE, "none", None, _none_decompress, _none_compress),
    GZIP: Codec(GZIP, "gzip", None, _gzip_decompress, _gzip_compress),
    SNAPPY: Codec(SNAPPY, "snappy", "python-snappy", _snappy_decompress, _snappy_compress),
    LZ4: Codec(LZ4, "lz4", "lz4", _lz4_decompress, _lz4_compress),
    ZSTD: Codec(ZSTD, "zstd", "zstandard", _zstd_decompress, _zstd_compress),
}


def get_codec(codec_id: int) -> Codec:
    """The codec for Kafka's codec id; ids 5-7 are invalid, as in Kafka."""
    try:
        return _REGISTRY[codec_id]
    except KeyError:
        raise CodecError(f"Unknown compression type id: {codec_id}") from None


def codec_name(codec_id: int) -> str:
    """Kafka's name for a codec id (an unknown id raises CodecError)."""
    return get_codec(codec_id).name
