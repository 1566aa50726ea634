"""The options every command spells the same way: one decorator each, one help text, one parser.

Times are taken as epoch milliseconds or ISO-8601 (``2026-11-24T03:00:00Z``; a time without a zone is
UTC, as everything kstore prints is); sizes as bytes or with a unit (``10G``, ``512MiB``, ``64k``:
binary multiples, as Kafka's own sizes are powers of two, and ``10GB`` means the same as ``10GiB``).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from typing import Any, Callable, Optional

import click

from kstore_cli.errors import FileUnreadableError
from kstore_cli.java import MAX_INT64

F = Callable[..., Any]
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

_SIZE = re.compile(r"^\s*(\d+)\s*(?:([kmgtp])(?:i?b)?|b)?\s*$", re.IGNORECASE)
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(text: str) -> int:
    """'512MiB' -> 536870912; '10G' -> 10737418240; '4096' -> 4096; '-1' -> -1 (Kafka's "unlimited").
    ValueError when it is not a size."""
    if text.strip() == "-1":
        return -1
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size (bytes, or a number with K, M, G, T or P, e.g. 512MiB or 10G)")
    value = int(match.group(1)) * _UNITS.get((match.group(2) or "").lower(), 1)
    if value > MAX_INT64:
        raise ValueError(f"{text!r} is larger than a Java long")
    return value


def parse_time_ms(text: str) -> int:
    """Epoch ms ('1732417200000', '-1') or ISO-8601 ('2024-11-24T03:00:00Z', '2024-11-24') -> epoch ms."""
    stripped = text.strip()
    if re.fullmatch(r"-?\d+", stripped):
        return int(stripped)
    iso = stripped[:-1] + "+00:00" if stripped[-1:] in ("Z", "z") else stripped
    try:
        when = _dt.datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time "
                         "(e.g. 2024-11-24T03:00:00Z)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return (when - _EPOCH) // _dt.timedelta(milliseconds=1)


def format_time_ms(ms: Optional[int]) -> str:
    """Epoch ms -> '2024-11-24 03:00:00.000Z' (UTC, millisecond precision); '-' for None or negative."""
    if ms is None or ms < 0:
        return "-"
    when = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


class SizeType(click.ParamType):
    """A size in bytes, or with a binary unit suffix (K, M, G, T, P; KiB/KB alike)."""

    name = "size"

    def __init__(self, min: int = 0) -> None:  # noqa: A002 - click's own spelling (IntRange(min=...))
        self.min = min

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> int:
        if isinstance(value, int):
            size = value
        else:
            try:
                size = parse_size(str(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if size < self.min:
            self.fail(f"{value} is below the minimum of {self.min}", param, ctx)
        return size


class TimeType(click.ParamType):
    """A point in time: epoch milliseconds or ISO-8601 (UTC when no zone is given)."""

    name = "time"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time_ms(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()
TIME = TimeType()


def force_option(f: F) -> F:
    """--force: act although a running process (a broker) holds the data dir's .lock."""
    return click.option("--force", is_flag=True,
                        help="Proceed even when the data dir's .lock is held by a running process.")(f)


def dry_run_option(help: str) -> Callable[[F], F]:  # noqa: A002 - click's own parameter name
    """--dry-run with what this command reports instead of changing anything."""
    return click.option("--dry-run", is_flag=True, help=help)


def jobs_option(help: str) -> Callable[[F], F]:  # noqa: A002
    """--jobs/-j N (at least 1; None when not given: the command's own default); `help` says what runs at once."""
    return click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help=help)


def json_option(help: str) -> Callable[[F], F]:  # noqa: A002
    """--json: JSON Lines on stdout (each line an object with a `type`); `help` says which lines."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def now_option(f: F) -> F:
    """--now: the clock the command judges ages by (retention, delete horizons, transaction timeouts)."""
    return click.option("--now", "now", type=TIME, metavar="TIME",
                        help="The current time, epoch ms or ISO-8601 [default: the clock].")(f)


def topics_option(f: F) -> F:
    """--topics: only the partitions of topics matching these globs."""
    return click.option("--topics", metavar="GLOBS",
                        help="Only partitions of topics matching these globs (comma-separated, e.g. 'orders*,payments').")(f)


def cluster_metadata_option(f: F) -> F:
    """--no-cluster-metadata: leave out the topic configs of the KRaft metadata log in the data dirs."""
    return click.option("--no-cluster-metadata", is_flag=True,
                        help="Ignore the topic and broker configs of the cluster metadata log found in the data dirs "
                             "(__cluster_metadata-0; by default they apply, as on the broker).")(f)


def kafka_defaults_option(f: F) -> F:
    """--kafka-defaults: let Kafka's built-in retention defaults (retention.ms 7 days) delete segments."""
    return click.option("--kafka-defaults", is_flag=True,
                        help="Apply Kafka's built-in defaults of retention.ms (7 days) and retention.bytes where no "
                             "flag, file or metadata log sets them; without it a setting that is only Kafka's "
                             "default deletes nothing (a standby copy is not a broker).")(f)


class KafkaVersionType(click.ParamType):
    """A Kafka release ('2.8', '3.9.1', '4.0')."""

    name = "version"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        from kstore_cli.log.kafka_version import KafkaVersion

        if isinstance(value, KafkaVersion):
            return value
        try:
            return KafkaVersion.parse(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def kafka_version_option(f: F) -> F:
    """--kafka-version: judge by the rules of this Kafka release instead of the one that wrote each data dir."""
    return click.option("--kafka-version", type=KafkaVersionType(), metavar="VERSION", default=None,
                        help="Judge by the rules of this Kafka release (e.g. 3.9, 4.0) instead of the release "
                             "each data dir's files show wrote it.")(f)


class ExistingPath(click.Path):
    """click.Path(exists=True) whose missing path is what every other command says of one: the file
    cannot be opened (exit 3, ``kstore: error: PATH: no such file or directory``), not a usage error."""

    def __init__(self, allow_uri: bool = False, **kwargs: Any) -> None:
        super().__init__(exists=False, **kwargs)
        #: A remote URI (s3://...) is taken as it is (its reader says when it is missing).
        self.allow_uri = allow_uri

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if self.allow_uri and isinstance(value, str) and "://" in value:
            return value
        if isinstance(value, str) and not os.path.lexists(value):
            raise FileUnreadableError("no such file or directory", path=value)
        return super().convert(value, param, ctx)


#: --key-format/--value-format (kstore_cli.cluster.wire_format.FORMATS).
RECORD_FORMATS = ("auto", "avro", "json-schema", "protobuf", "json", "string", "binary")


def schemas_source_options(f: F) -> F:
    """--schemas-topic and --schemas-from: where the Schema Registry's store topic is read from."""
    f = click.option("--schemas-from", type=ExistingPath(), default=None, metavar="PATH",
                     help="The Schema Registry's store topic: its partition dir, or a data dir holding it.")(f)
    return click.option("--schemas-topic", default="_schemas", show_default=True, metavar="TOPIC",
                        help="The registry's store topic (its kafkastore.topic); partition 0 is read.")(f)


def record_format_options(f: F) -> F:
    """--key-format/--value-format (with --json): keys and values as JSON values, Confluent's wire format decoded
    with the schemas of the registry's store topic (--schemas-from, else the input's data dir)."""
    f = schemas_source_options(f)
    f = click.option("--value-format", type=click.Choice(RECORD_FORMATS), default=None,
                     help="With --json: values as avro, json-schema, protobuf (Confluent's wire format), json, string, "
                          "binary (base64) or auto (the magic byte and the schema id's type choose; else JSON text, UTF-8, base64).")(f)
    return click.option("--key-format", type=click.Choice(RECORD_FORMATS), default=None,
                        help="With --json: keys decoded as --value-format says for values.")(f)
