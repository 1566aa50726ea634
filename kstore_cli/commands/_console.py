"""What the commands share about the terminal: whether stdout is one, human sizes, per-partition problems."""

from __future__ import annotations

import json
from typing import Callable, List, Optional, Tuple

import click

from kstore_cli.commands._render import console, human_bytes, is_tty  # noqa: F401 - the commands' names



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
