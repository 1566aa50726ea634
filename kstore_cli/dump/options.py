"""DumpLogSegmentsOptions: what to dump and how, from kafka-dump-log's flags (the decoders of internal
topics' records among them), and the state every dump shares (its streams, options and exit status)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, TextIO

from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.parsers import make_parser
from kstore_cli.record.batch import MAX_INT32  # Integer.MAX_VALUE: --max-bytes' default, the value that keeps the trailing-bytes message

#: The default of --max-message-size (5 MiB).
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

#: kafka.serializer.* decoder classes Kafka still accepts, with the notice it prints for each.
DEPRECATED_DECODERS = {
    "kafka.serializer.StringDecoder": "org.apache.kafka.tools.api.StringDecoder",
    "kafka.serializer.LongDecoder": "org.apache.kafka.tools.api.LongDecoder",
    "kafka.serializer.IntegerDecoder": "org.apache.kafka.tools.api.IntegerDecoder",
    "kafka.serializer.DefaultDecoder": "org.apache.kafka.tools.api.DefaultDecoder",
}


def deprecated_decoder_notice(class_name: Optional[str]) -> Optional[str]:
    """The line Kafka prints to stdout when given a deprecated kafka.serializer.* decoder class."""
    if class_name in DEPRECATED_DECODERS:
        return f"{class_name} is deprecated. Please use {DEPRECATED_DECODERS[class_name]} instead"
    return None


class DumpOptions:
    """What to dump and how (DumpLogSegmentsOptions).

    `parser` renders keys and values when `print_data` is set (None: Kafka's default,
    UTF-8 strings); `decoder_notices` are the deprecation lines Kafka prints for each
    ``.log``/``.checkpoint`` file; `json_decoder` names the decoder given on the command line
    (``--json`` then writes what it decodes as JSON values instead of base64).
    """

    __slots__ = (
        "deep_iteration",
        "print_data",
        "skip_record_metadata",
        "verify_index_only",
        "index_sanity_check",
        "max_message_size",
        "max_bytes",
        "parser",
        "json_lines",
        "decoder_notices",
        "json_decoder",
    )

    def __init__(
        self,
        *,
        deep_iteration: bool = False,
        print_data: bool = False,
        skip_record_metadata: bool = False,
        verify_index_only: bool = False,
        index_sanity_check: bool = False,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_bytes: int = MAX_INT32,
        parser: Any = None,
        json_lines: bool = False,
        decoder_notices: Sequence[str] = (),
        json_decoder: Optional[str] = None,
    ) -> None:
        if max_message_size < 0:
            raise UsageError(f"--max-message-size must not be negative (got {max_message_size})")
        if max_bytes < 0:
            raise UsageError(f"--max-bytes must not be negative (got {max_bytes})")
        self.print_data = print_data
        self.deep_iteration = deep_iteration or print_data
        self.skip_record_metadata = skip_record_metadata
        self.verify_index_only = verify_index_only
        self.index_sanity_check = index_sanity_check
        self.max_message_size = max_message_size
        self.max_bytes = max_bytes
        self.parser = parser if parser is not None or not print_data else make_parser()
        self.json_lines = json_lines
        self.decoder_notices = tuple(decoder_notices)
        #: with --json: the name of the decoder the user gave (keys/values then come out decoded), or None
        self.json_decoder = json_decoder

    @classmethod
    def from_command_line(cls, *, message_decoders: Dict[str, bool], key_decoder_class: Optional[str] = None,
                          key_decoder: Optional[str] = None, value_decoder_class: Optional[str] = None,
                          value_decoder: Optional[str] = None, print_data_log: bool = False,
                          json_lines: bool = False, **rest: Any) -> "DumpOptions":
        """DumpLogSegmentsOptions from kafka-dump-log's flags: `message_decoders` maps each of
        :data:`MESSAGE_DECODERS` to its flag; any decoder implies --print-data-log; a class and a friendly
        decoder for the same side is a usage error; Kafka's deprecation lines for the decoder classes
        (value first, then key, as Kafka builds them) go with text output; `rest` are the plain options."""
        key_name = _one_decoder(key_decoder_class, key_decoder, "key")
        value_name = _one_decoder(value_decoder_class, value_decoder, "value")
        unknown = set(message_decoders) - set(MESSAGE_DECODERS)
        if unknown:
            raise ValueError(f"unknown message decoders: {sorted(unknown)}")
        given = [name for name in MESSAGE_DECODERS if message_decoders.get(name)]
        flags = {name.replace("-", "_"): bool(message_decoders.get(name)) for name in MESSAGE_DECODERS}
        parser = make_parser(**flags, key_decoder=key_name, value_decoder=value_name)
        json_decoder = given[0] if given else None
        if json_decoder is None and (key_name is not None or value_name is not None):
            json_decoder = f"key={key_name or 'string'},value={value_name or 'string'}"
        notices = []
        if not given and not json_lines:
            notices = [n for n in map(deprecated_decoder_notice, (value_decoder_class, key_decoder_class)) if n]
        print_data = print_data_log or bool(given) or key_name is not None or value_name is not None
        return cls(print_data=print_data, parser=parser, json_lines=json_lines, decoder_notices=notices,
                   json_decoder=json_decoder, **rest)


#: kafka-dump-log's record decoders of internal topics, in its options' order (--offsets-decoder, ...).
MESSAGE_DECODERS = ("offsets", "transaction-log", "cluster-metadata", "remote-log-metadata", "share-group-state")


def _one_decoder(class_name: Optional[str], friendly: Optional[str], which: str) -> Optional[str]:
    if class_name is not None and friendly is not None:
        raise UsageError(f"give either --{which}-decoder-class or --{which}-decoder, not both")
    return friendly if friendly is not None else class_name


class Dumper:
    def __init__(self, out: TextIO, err: TextIO, options: DumpOptions) -> None:
        self.out = out
        self.err = err
        self.o = options
        self.status = ExitStatus.OK

    def problem(self, status: ExitStatus = ExitStatus.PROBLEMS) -> None:
        if status > self.status:
            self.status = status

    def run(self, files: Sequence[str]) -> int:
        raise NotImplementedError
