"""The codec registry: Kafka's ids and names, and a missing library failing only when met."""

from __future__ import annotations

import builtins
import threading

import pytest

from kstore_cli.codecs import CODEC_NAMES, get_codec
from kstore_cli.codecs import zstd as zstd_codec
from kstore_cli.errors import CodecError, CodecUnavailableError
from kstore_cli.parsers.control import decode_control
from kstore_cli.record.reader import read_batches
from kstore_cli.record.builder import RecordSpec, build_v2_batch


def test_ids_and_names_are_kafkas() -> None:
    assert CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    for codec_id in (5, 6, 7):
        with pytest.raises(CodecError, match=f"Unknown compression type id: {codec_id}"):
            get_codec(codec_id)


@pytest.mark.parametrize("codec_id,module,package", [(2, "snappy", "python-snappy"), (3, "lz4", "lz4"), (4, "zstandard", "zstandard")])
def test_missing_library_fails_only_when_that_codec_is_met(monkeypatch, codec_id, module, package) -> None:
    data = build_v2_batch([RecordSpec(0, 0, b"k", b"v")], codec=codec_id)
    data += build_v2_batch([RecordSpec(1, 0, b"k", b"v")])
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == module or name.startswith(module + "."):
            raise ImportError(f"No module named '{module}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    # zstd keeps its decompressor (per thread) once made: forget one an earlier test (in this process) made.
    monkeypatch.setattr(zstd_codec, "_local", threading.local())
    compressed, plain = list(read_batches(data))  # shallow iteration never needs the codec
    assert plain.records()[0].value == b"v"
    with pytest.raises(CodecUnavailableError) as info:
        compressed.records()
    assert f"pip install {package}" in str(info.value)
    assert info.value.position == 0


def test_kraft_control_record_data_is_decoded() -> None:
    from tests.conftest import GOLDEN

    log = GOLDEN / "inputs" / "__cluster_metadata-0" / "00000000000000000000.log"
    controls = [r.control for b in read_batches(log) if b.is_control for r in b.records()]
    names = [c.type_name for c in controls]
    assert "KRAFT_VERSION" in names
    kraft = controls[names.index("KRAFT_VERSION")]
    assert decode_control(kraft.type_id, kraft.value)["kRaftVersion"] == 1


@pytest.mark.parametrize("codec_id", [0, 1, 2, 3, 4])
def test_compress_many_makes_compresss_bytes(codec_id: int) -> None:
    """compress_many (zstd: one multi_compress_to_buffer call) gives each input's compress() bytes, in order,
    whatever the inputs' types and sizes (one, several, empty)."""
    codec = get_codec(codec_id)
    for datas in ([b"one"], [b"abc" * 5000, bytearray(b"xy" * 3000), b"", b"q", bytes(range(256)) * 64]):
        assert codec.compress_many(datas, 2) == [codec.compress(bytes(d), 2) for d in datas]
    assert get_codec(4).compress_many([b"a" * 100, b"b" * 100], 2, 7) == [get_codec(4).compress(x, 2, 7)
                                                                        for x in (b"a" * 100, b"b" * 100)]


def test_zstd_compress_many_without_the_multi_call(monkeypatch) -> None:
    """A zstandard backend without multi_compress_to_buffer (cffi raises NotImplementedError) gets a call per input."""
    import zstandard

    class NoMulti:
        def __init__(self) -> None:
            self.real = zstandard.ZstdCompressor(level=3)
            self.calls = 0

        def compress(self, data: bytes) -> bytes:
            self.calls += 1
            return self.real.compress(data)

        def multi_compress_to_buffer(self, datas, threads=0):
            raise NotImplementedError("cffi")

    fake = NoMulti()
    monkeypatch.setattr(zstd_codec, "_compressor", lambda level: fake)
    datas = [b"abc" * 100, b"xyz" * 200]
    assert zstd_codec.compress_many(datas) == [zstandard.ZstdCompressor(level=3).compress(d) for d in datas]
    assert fake.calls == 2
