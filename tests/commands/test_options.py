"""The options every command spells the same way: sizes with units, times as epoch ms or ISO-8601."""

from __future__ import annotations

import datetime as dt

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kstore_cli.cli import _register_commands, cli
from kstore_cli.commands._options import format_time_ms, parse_size, parse_time_ms
from tests.conftest import CORPUS

_register_commands()


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("0", 0), ("64k", 65536), ("64K", 65536), ("512MiB", 512 << 20), ("512mb", 512 << 20),
    ("10G", 10 << 30), ("1 GiB", 1 << 30), ("2T", 2 << 40), ("7b", 7), ("-1", -1),
])
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "ten", "10X", "-5", "-1G", "1.5G", "10 G B", "9999999P"])
def test_not_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("text, expected", [
    ("1700000005000", 1700000005000), ("-1", -1), ("0", 0),
    ("2023-11-14T22:13:25Z", 1700000005000), ("2023-11-14T22:13:25.000+00:00", 1700000005000),
    ("2023-11-14T23:13:25.5+01:00", 1700000005500), ("2023-11-14T22:13:25", 1700000005000),
    ("2023-11-14", 1699920000000),
])
def test_times(text: str, expected: int) -> None:
    assert parse_time_ms(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "2023-13-01", "12:00", "1e12"])
def test_not_times(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time_ms(text)


@given(st.integers(min_value=0, max_value=253402300799999))
def test_printed_times_read_back(ms: int) -> None:
    # What kstore prints (UTC, ms) is what it accepts: an operator can paste a time from a table.
    printed = format_time_ms(ms)
    assert printed.endswith("Z")
    assert parse_time_ms(printed.replace(" ", "T")) == ms


def test_find_takes_an_iso_time_as_it_takes_epoch_ms() -> None:
    part = str(CORPUS / "logs" / "v2-none-0")
    iso = dt.datetime.fromtimestamp(1700000005, tz=dt.timezone.utc).isoformat()
    by_ms = CliRunner().invoke(cli, ["find", part, "--timestamp", "1700000005000"])
    by_iso = CliRunner().invoke(cli, ["find", part, "--timestamp", iso])
    assert by_ms.exit_code == 0 and by_iso.output == by_ms.output


def test_a_bad_time_or_size_is_a_one_line_usage_error() -> None:
    part = str(CORPUS / "logs" / "v2-none-0")
    result = CliRunner().invoke(cli, ["find", part, "--timestamp", "yesterday"])
    assert result.exit_code == 2
    result = CliRunner().invoke(cli, ["convert-format", part, "--to-magic", "2", "--dry-run", "--batch-bytes", "lots"])
    assert result.exit_code == 2


def test_topics_filters_the_partitions_of_a_data_dir() -> None:
    import json

    logs = str(CORPUS / "logs")
    every = CliRunner().invoke(cli, ["inspect", "--json", logs])
    some = CliRunner().invoke(cli, ["inspect", "--json", "--topics", "v2-z*,legacy-v0", logs])
    assert every.exit_code == 0 and some.exit_code == 0, some.output
    topics = {json.loads(line)["topic"] for line in some.output.splitlines() if '"partition"' in line
              and json.loads(line)["type"] == "partition"}
    assert topics == {"v2-zstd", "legacy-v0"}
    assert len(every.output.splitlines()) > len(some.output.splitlines())
    none = CliRunner().invoke(cli, ["convert-format", "--to-magic", "2", "--dry-run", "--topics", "nope*", logs])
    assert none.exception.exit_status == 2 and "matching --topics 'nope*'" in str(none.exception)
