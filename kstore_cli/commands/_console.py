"""What the commands share about the terminal: whether stdout is one, human sizes, per-partition problems."""

from __future__ import annotations

import json
import sys
from typing import Callable, List, Optional, Tuple

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

    bar = Progress(TextColumn(label), BarColumn(), DownloadColumn(), TimeRemainingColumn(), transient=True)
    bar.start()
    task = bar.add_task(label, total=total())
    return bar, lambda n: bar.update(task, advance=n)
