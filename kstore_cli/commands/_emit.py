"""The one way out of a command: its rows emitted (JSON Lines or the command's own rendering), then the
problems and errors on stderr, then its exit status; and how a kstore error becomes its one line on stderr and
its exit status (:func:`report_error`, for cli.main too)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Callable, Iterable, Optional, TypeVar

import click

from kstore_cli.commands._render import byte_progress
from kstore_cli.errors import KstoreError

if TYPE_CHECKING:
    from kstore_cli.operations.runner import Outcome

R = TypeVar("R")


def emit(as_json: bool, rows: Callable[[], Iterable[dict]], render: Optional[Callable[[], None]]) -> None:
    """With --json each of `rows()` as a JSON line (sorted keys), else `render()` (None: nothing, --quiet)."""
    if as_json:
        for row in rows():
            click.echo(json.dumps(row, sort_keys=True))
    elif render is not None:
        render()


def finish(outcome: "Outcome") -> None:
    """After the rows: a "kstore: <partition>: <problem>" line per problem and one line per error (the one
    mapping of errors to lines and exit codes, :func:`report_error`), on stderr; then exit with the outcome's
    status (nothing when it is 0)."""
    for partition, problem in outcome.problem_lines():
        click.echo(f"kstore: {partition}: {problem}", err=True)
    for error in outcome.errors:
        report_error(error)
    status = outcome.exit_status
    if status:
        click.get_current_context().exit(status)


def exit_with(status: int) -> None:
    """Exit with `status` (nothing when it is 0): a command's one exit path when it has no outcome."""
    if status:
        click.get_current_context().exit(int(status))


def with_progress(show: bool, label: str, total: Callable[[], int], call: Callable[..., R]) -> R:
    """`call(progress=...)` with a transient byte progress bar over `total()` when `show` (a terminal)."""
    bar, advance = byte_progress(show, label, total)
    try:
        return call(progress=advance)
    finally:
        if bar is not None:
            bar.stop()


def report_error(exc: KstoreError) -> int:
    """Print a one-line error on stderr and return its exit status."""
    click.echo(f"kstore: error: {exc}", err=True)
    return int(exc.exit_status)
