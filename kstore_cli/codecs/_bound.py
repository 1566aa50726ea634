"""The error for decompressed data over kstore's bound (the bound itself, settable, is
:data:`kstore_cli.codecs.max_record_bytes`); here so the codec modules need not import their package."""

from __future__ import annotations

from kstore_cli.errors import RecordTooLargeError

#: The environment variable that sets :data:`max_record_bytes` (bytes; a K, M or G suffix is allowed).
ENV_MAX_RECORD_BYTES = "KSTORE_MAX_RECORD_BYTES"


def too_large(what: str, size: "int | str", bound: int) -> RecordTooLargeError:
    """The error for decompressed data over the bound (the caller adds file and position)."""
    return RecordTooLargeError(
        f"{what} is {size} bytes decompressed, over kstore's bound of {bound} bytes on what it holds in "
        f"memory at once; set {ENV_MAX_RECORD_BYTES} higher (e.g. {ENV_MAX_RECORD_BYTES}=2G) to read it"
    )
