"""Record parsers behind ``kstore dump-segment``: DumpLogSegments' "message parsers", byte for byte.

A parser turns one non-control record's key/value bytes into the ``key: ...``/``payload: ...`` texts.
Where Kafka's tool aborts, a parser raises :class:`kstore_cli.errors.RecordParseError` with the message
Kafka's exception carries; where Kafka prints a "skipping" text, the parser returns that text.

``decode_json`` is the same decoding for ``dump-segment --json``: the key and value as JSON values
(objects, numbers, strings: the trees the text form prints, not strings of JSON), :data:`RAW` for a part
the decoder leaves alone, and the "skipping" text as ``error`` where Kafka would skip the record.
Never imports click or rich.
"""

from __future__ import annotations

from typing import Optional, Protocol, Tuple

from kstore_cli.parsers.control import decode_control, render_control
from kstore_cli.parsers.decoded import RAW, JsonDecoded
from kstore_cli.parsers.decoders import decoder_for, json_decoder_for

__all__ = ["MessageParser", "JsonDecoded", "RAW", "make_parser", "render_control", "decode_control"]


class MessageParser(Protocol):
    """What every parser offers; ``skipped`` counts the records ``parse`` answered with a skip text."""

    skipped: int

    def parse(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Tuple[Optional[str], Optional[str]]:
        """(key text or None, payload text or None) for one NON-control record, as DumpLogSegments prints them."""
        ...

    def decode_json(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> JsonDecoded:
        """The same decoding for ``--json``; raises what ``parse`` raises."""
        ...


class DecoderMessageParser:
    """Kafka's default parser: a key decoder and a value decoder; nothing printed for a null key/value."""

    __slots__ = ("_key", "_value", "_key_json", "_value_json")
    skipped = 0  # StringDecoder & co. never skip

    def __init__(self, key_decoder: Optional[str], value_decoder: Optional[str]) -> None:
        self._key = decoder_for(key_decoder)
        self._value = decoder_for(value_decoder)
        self._key_json = json_decoder_for(key_decoder)
        self._value_json = json_decoder_for(value_decoder)

    def parse(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Tuple[Optional[str], Optional[str]]:
        return (None if key is None else self._key(key),
                None if value is None else self._value(value))

    def decode_json(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> JsonDecoded:
        return JsonDecoded(None if key is None else self._key_json(key),
                           None if value is None else self._value_json(value))


def make_parser(*, offsets: bool = False, transaction_log: bool = False, cluster_metadata: bool = False,
                remote_log_metadata: bool = False, share_group_state: bool = False,
                key_decoder: Optional[str] = None, value_decoder: Optional[str] = None) -> MessageParser:
    """Kafka's precedence: offsets > transaction log > cluster metadata > remote log metadata >
    share group state > key/value decoders. Unknown decoder names raise ``UsageError``."""
    # Decoder names are checked even when a decoder flag wins, so a typo never passes silently.
    default = DecoderMessageParser(key_decoder, value_decoder)
    if offsets:
        from kstore_cli.parsers.coordinator import OffsetsMessageParser
        return OffsetsMessageParser()
    if transaction_log:
        from kstore_cli.parsers.txnlog import TransactionLogMessageParser
        return TransactionLogMessageParser()
    if cluster_metadata:
        from kstore_cli.parsers.metadata import ClusterMetadataMessageParser
        return ClusterMetadataMessageParser()
    if remote_log_metadata:
        from kstore_cli.parsers.remote import RemoteLogMetadataMessageParser
        return RemoteLogMetadataMessageParser()
    if share_group_state:
        from kstore_cli.parsers.coordinator import ShareGroupStateMessageParser
        return ShareGroupStateMessageParser()
    return default
