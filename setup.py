"""Build of the optional native record decoder (everything else is in pyproject.toml).

The C extension ``kstore_cli.record._decode_c`` is optional: when it cannot be compiled
(no compiler, no Python headers) the install still succeeds and kstore uses the pure-Python
twin (``kstore --version`` names the decoder in use). Portable flags only: the CPU-specific
CRC-32C instruction is chosen at run time inside the C code.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing (set KSTORE_REQUIRE_NATIVE=1 to make a failure fatal)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any compiler/setup failure means "no extension"
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._skip(exc)

    def _skip(self, exc: Exception) -> None:
        if os.environ.get("KSTORE_REQUIRE_NATIVE") == "1":
            raise exc
        print(f"warning: kstore's native record decoder was not built ({exc}); the pure-Python decoder will be used")


_CFLAGS = ["-O3", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fno-strict-aliasing"]
_CFLAGS += os.environ.get("KSTORE_EXTRA_CFLAGS", "").split()
_LDFLAGS = os.environ.get("KSTORE_EXTRA_LDFLAGS", "").split()
_DEPENDS = ["kstore_cli/record/_wire.h", "kstore_cli/record/_crc.h"]  # every extension includes _wire.h

setup(
    ext_modules=[
        Extension(
            "kstore_cli.record._decode_c",
            sources=[
                "kstore_cli/record/_decode_c.c",
                "kstore_cli/record/_decode_v2.c",
                "kstore_cli/record/_decode_records.c",
                "kstore_cli/record/_decode_build.c",
                "kstore_cli/record/_decode_columns.c",
                "kstore_cli/record/_decode_frame.c",
            ],
            depends=[*_DEPENDS, "kstore_cli/record/_decode_c.h"],
            extra_compile_args=_CFLAGS,
            extra_link_args=_LDFLAGS,
            optional=True,
        ),
        # The record encoder (convert-format's write path; kstore_cli/record/encode.py falls back to Python).
        Extension(
            "kstore_cli.record._encode_c",
            sources=["kstore_cli/record/_encode_c.c", "kstore_cli/record/_encode_convert_c.c"],
            depends=_DEPENDS + ["kstore_cli/record/_encode_c.h"],
            extra_compile_args=_CFLAGS,
            extra_link_args=_LDFLAGS,
            optional=True,
        ),
        # dump-segment's native text formatter (kstore_cli/dump/text_log.py falls back to Python without it).
        Extension(
            "kstore_cli.record._dumptext_c",
            sources=["kstore_cli/record/_dumptext_c.c"],
            depends=_DEPENDS,
            extra_compile_args=_CFLAGS,
            extra_link_args=_LDFLAGS,
            optional=True,
        ),
        # compact's native write path (kstore_cli/record/record_filter.py falls back to Python without it).
        Extension(
            "kstore_cli.record._cleaner_c",
            sources=["kstore_cli/record/_cleaner_c.c", "kstore_cli/record/_cleaner_map_c.c"],
            depends=_DEPENDS + ["kstore_cli/record/_cleaner_c.h"],
            extra_compile_args=_CFLAGS,
            extra_link_args=_LDFLAGS,
            optional=True,
        ),
        # the columnar Avro decoder's reading (kstore_cli/spark/avro_columns.py falls back to numpy without it).
        Extension(
            "kstore_cli.spark._avro_c",
            sources=["kstore_cli/spark/_avro_c.c"],
            extra_compile_args=_CFLAGS,
            extra_link_args=_LDFLAGS,
            optional=True,
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
