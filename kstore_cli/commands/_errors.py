"""How a kstore error becomes its one line on stderr and its exit status: the one way, for cli.main and the
commands that report several errors themselves (recover)."""

from __future__ import annotations

import click

from kstore_cli.errors import KstoreError


def report_error(exc: KstoreError) -> int:
    """Print a one-line error on stderr and return its exit status."""
    click.echo(f"kstore: error: {exc}", err=True)
    return int(exc.exit_status)
