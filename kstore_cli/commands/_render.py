"""One way to render a result (docs/cli.md): a rich table on a terminal, TSV in a pipe, JSON Lines.

On a terminal: human units (sizes in KiB/MiB/GiB, durations like ``896 d``, times as ISO UTC
``2026-11-28T13:00:00Z``), tables that fold long names to the terminal's width; styles only when
NO_COLOR is unset. In a pipe: raw numbers, no escape at all, a header line. Never a trailing space.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import sys
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import click


def is_tty() -> bool:
    """True when stdout is a terminal (tables and progress bars); False in pipes and cron."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$")
_DURATIONS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def styled() -> bool:
    """True when escapes may be written: stdout is a terminal and NO_COLOR is unset or empty."""
    return is_tty() and not os.environ.get("NO_COLOR")


def human_duration(ms: Optional[int]) -> str:
    """77414400000 -> '896 d'; 5400000 -> '1.5 h'; 250 -> '250 ms'; '-' for None."""
    if ms is None:
        return "-"
    for unit, size in _DURATIONS:
        if abs(ms) >= size:
            value = ms / size
            return f"{value:.0f} {unit}" if value == int(value) or abs(value) >= 10 else f"{value:.1f} {unit}"
    return f"{ms} ms"


def iso_time(ms: Optional[int]) -> str:
    """Epoch ms -> '2026-11-28T13:00:00Z' (UTC; milliseconds only when there are some); '-' for None or < 0."""
    if ms is None or ms < 0:
        return "-"
    when = _dt.datetime.fromtimestamp(ms // 1000, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{when}.{ms % 1000:03d}Z" if ms % 1000 else f"{when}Z"


class Column(NamedTuple):
    """A table column: its header and the unit of its numbers ('' none, 'bytes', 'ms' a duration, 'time')."""

    name: str
    unit: str = ""


def cell(value: Any, unit: str = "", human: bool = False) -> str:
    """A value as a table shows it: human units on a terminal, the raw number in a pipe; '-' for None."""
    if value is None:
        return "-"
    if human and isinstance(value, int) and not isinstance(value, bool):
        if unit == "bytes":
            return human_bytes(value)
        if unit == "ms":
            return human_duration(value)
        if unit == "time":
            return iso_time(value)
    return str(value)


def size(n: int, human: bool) -> str:
    """Bytes as a sentence says them: '1.5 MiB' on a terminal, '1572864 bytes' in a pipe."""
    return human_bytes(n) if human else f"{n} bytes"


class _NoTrailingSpace:
    """A file for rich that drops every line's trailing spaces (rich pads cells and titles to the table's width)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.pending = ""

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return is_tty()

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self.stream.write(_TRAILING.sub(r"\1", line) + "\n")
        return len(text)

    def flush(self) -> None:
        kept = _TRAILING.sub(r"\1", self.pending)
        if kept and kept == self.pending:
            self.stream.write(kept)
            self.pending = ""
        self.stream.flush()


def console(stderr: bool = False) -> Any:
    """The rich Console every command prints through: no escape at all when NO_COLOR is set or not on a
    terminal (bold and italic included), no trailing space, the terminal's width (COLUMNS; 80 when unknown)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(file=_NoTrailingSpace(stream), force_terminal=is_tty(), color_system="auto" if styled() else None,
                   highlight=False, soft_wrap=False)


def new_table(title: Optional[str], columns: Iterable[Any], **kwargs: Any) -> Any:
    """A rich table whose cells fold (a 249-character topic name included) to fit the terminal; with more than
    six columns, no vertical rules (each cell keeps a few characters at 80 columns)."""
    from rich import box
    from rich.table import Table

    columns = list(columns)
    if len(columns) > 6:
        kwargs.setdefault("box", box.SIMPLE_HEAD)
    table = Table(title=title, title_justify="left", **kwargs)
    for col in columns:
        table.add_column(col.name if isinstance(col, Column) else col, overflow="fold")
    return table


def print_rich(*renderables: Any) -> None:
    """Print rich renderables (tables, markup strings) through :func:`console`."""
    out = console()
    for renderable in renderables:
        out.print(renderable)
    out.file.flush()


def print_lines(*lines: str) -> None:
    """Plain text lines (no markup) through :func:`console`: folded to the terminal's width as tables are."""
    out = console()
    for line in lines:
        out.print(line, markup=False)
    out.file.flush()


def print_table(title: Optional[str], columns: Sequence[Column], rows: List[Sequence[Any]],
                tty: Optional[bool] = None) -> None:
    """A result as a table: rich with human units on a terminal; in a pipe TSV with a header line and raw values."""
    if is_tty() if tty is None else tty:
        from rich.markup import escape

        table = new_table(title, columns)
        for row in rows:
            table.add_row(*(escape(cell(v, c.unit, human=True)) for v, c in zip(row, columns)))
        print_rich(table)
        return
    click.echo("\t".join(c.name for c in columns))
    for row in rows:
        click.echo("\t".join(cell(v, c.unit) for v, c in zip(row, columns)))


def echo_skipped(skipped: List[Tuple[str, str]], as_json: bool) -> None:
    """A line per (partition, reason) a mutating command's walk left alone (scope.mutable_targets): never
    silent; JSON ``{"type": "skipped", ...}``."""
    from kstore_cli.log.scope import skipped_dict

    for path, reason in skipped:
        click.echo(json.dumps(skipped_dict(path, reason), sort_keys=True) if as_json else f"{path}: skipped: {reason}")


def byte_progress(show: bool, label: str, total: Callable[[], int]) -> "tuple[Optional[object], Optional[Callable[[int], None]]]":
    """A transient progress bar over `total()` bytes when `show` (a terminal), else (None, None):
    (the bar, to ``stop()`` when done; the callback the core advances it with). `total` is called
    only when the bar is shown (summing sizes is I/O)."""
    if not show:
        return None, None
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn(label), BarColumn(), DownloadColumn(binary_units=True), TimeRemainingColumn(),
                   console=console(), transient=True)
    bar.start()
    task = bar.add_task(label, total=total())
    return bar, lambda n: bar.update(task, advance=n)
