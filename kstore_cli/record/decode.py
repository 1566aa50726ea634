"""The hot path's public face: the record decoder, native when built, else pure Python.

The backend is chosen once, at import (python-zstandard's habit), and named by :data:`BACKEND`
(``kstore --version`` prints it):

* ``"native"``: the C extension :mod:`kstore_cli.record._decode_c`, built by ``pip install``
  when a C compiler is there;
* ``"python"``: the pure-Python twin :mod:`kstore_cli.record._decode_py`.

``KSTORE_DECODER=python`` forces the pure-Python twin (CI runs the suite both ways);
``KSTORE_DECODER=native`` insists on the extension and fails at import when it is missing.
Both twins return equal values and raise the same error classes with Kafka's messages.

What each function returns is documented on the pure twin (the reference):
:func:`decode_v2_records`, :func:`decode_legacy_message`, :func:`read_varint`,
:func:`read_varlong`, :func:`size_of_varint`, :func:`crc32c`, :func:`scan_batches`, :func:`frame_batches`,
:func:`build_v2_records`, :func:`build_legacy_records`, :func:`decode_v2_columns` (columnar mode),
:func:`decode_v2_run` (columnar mode over many plain batches), :func:`pack_validity`.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from kstore_cli.record import _decode_py
from kstore_cli.record._decode_common import (  # noqa: F401 - re-exported
    SCAN_END,
    SCAN_MORE,
    SCAN_OTHER,
    BatchHead,
    LegacyEntry,
    Underflow,
    V2Record,
)
from kstore_cli.record.wire import LEGACY_ENTRY_HEADER, LOG_OVERHEAD, RECORD_OVERHEAD_V0  # noqa: F401 - re-exported

#: The environment variable that picks the decoder: "native", "python" or unset (native if built).
ENV_VAR = "KSTORE_DECODER"


def choose_twin(pure: ModuleType, native_name: str, what: str) -> "tuple[ModuleType, str]":
    """The twin of a hot path that KSTORE_DECODER picks: (module, "native" | "python"). `native_name` is
    the C extension's module under kstore_cli.record, `what` names it in the error when it must be there."""
    policy = os.environ.get(ENV_VAR, "").strip().lower()
    if policy == "python":
        return pure, "python"
    if policy not in ("", "native"):
        raise ImportError(f"{ENV_VAR}={policy!r} is not a decoder; use 'native' or 'python'")
    try:
        native = importlib.import_module(f"kstore_cli.record.{native_name}")
    except ImportError as exc:
        if policy == "native":
            raise ImportError(
                f"{ENV_VAR}=native but {what} (kstore_cli.record.{native_name}) is not built "
                f"({exc}); reinstall kstore with a C compiler available (pip install .)"
            ) from exc
        return pure, "python"
    return native, "native"


def _load():
    return choose_twin(_decode_py, "_decode_c", "the native record decoder")


_impl, BACKEND = _load()

read_varint = _impl.read_varint
read_varlong = _impl.read_varlong
size_of_varint = _impl.size_of_varint
decode_v2_records = _impl.decode_v2_records
decode_legacy_message = _impl.decode_legacy_message
crc32c = _impl.crc32c
scan_batches = _impl.scan_batches
frame_batches = _impl.frame_batches
build_v2_records = _impl.build_v2_records
build_legacy_records = _impl.build_legacy_records
v2_batch_records = _impl.v2_batch_records
v2_batch_iter = _impl.v2_batch_iter
register_classes = _impl.register_classes
#: batch.Record's base: the C type holding a record's fields (native), or None (pure Python).
RecordBase = _impl.RecordBase
#: batch.Header's base: the C type holding a header's key and value (native), or None (pure Python).
HeaderBase = _impl.HeaderBase
decode_v2_columns = _impl.decode_v2_columns
decode_v2_run = _impl.decode_v2_run
pack_validity = _impl.pack_validity

__all__ = [
    "BACKEND",
    "decode_v2_records",
    "decode_legacy_message",
    "read_varint",
    "read_varlong",
    "size_of_varint",
    "crc32c",
    "scan_batches",
    "frame_batches",
    "build_v2_records",
    "build_legacy_records",
    "v2_batch_records",
    "v2_batch_iter",
    "register_classes",
    "RecordBase",
    "HeaderBase",
    "decode_v2_columns",
    "decode_v2_run",
    "pack_validity",
    "LEGACY_ENTRY_HEADER",
    "LOG_OVERHEAD",
    "RECORD_OVERHEAD_V0",
    "SCAN_END",
    "SCAN_MORE",
    "SCAN_OTHER",
]
