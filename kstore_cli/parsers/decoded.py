"""What a parser's ``decode_json`` gives for one record (re-exported by :mod:`kstore_cli.parsers`; the
parser modules import it from here, not from their package)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional


class _Raw:
    __slots__ = ()

    def __repr__(self) -> str:
        return "RAW"


#: A key or value the decoder does not decode (``--json`` then shows its bytes, base64).
RAW: Any = _Raw()


class JsonDecoded(NamedTuple):
    """One record as a decoder sees it, for ``--json``."""

    key: Any
    value: Any
    #: Kafka's "skipping" text when the decoder could not decode the record (key/value are then RAW)
    error: Optional[str] = None
