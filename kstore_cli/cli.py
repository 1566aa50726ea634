"""The ``kstore`` command: the root group, and the one place errors become exit codes.

Exit codes (also in the README):

    0  success, nothing wrong found
    1  problems found in the data (corruption, index mismatches, failed checks)
    2  usage error
    3  a file could not be opened or read
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

import click

from kstore_cli import __version__
from kstore_cli.errors import ExitStatus, KstoreError

TRACEBACK_ENV = "KSTORE_TRACEBACK"


def _version_text() -> str:
    from kstore_cli.segment import decode

    return f"kstore {__version__} (record decoder: {decode.BACKEND})"


class KstoreGroup(click.Group):
    """Lists commands in the order they were added (the order an operator meets them)."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        return list(self.commands)


@click.group(
    cls=KstoreGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(message=_version_text(), version=__version__, prog_name="kstore")
@click.option("--traceback", is_flag=True, help=f"Show Python tracebacks for errors (or set {TRACEBACK_ENV}=1).")
@click.pass_context
def cli(ctx: click.Context, traceback: bool) -> None:
    """Inspect, verify, repair, compact, expire, convert and export Kafka's on-disk logs,
    with no broker running.

    \b
    Example:
      kstore dump-segment --deep-iteration --print-data-log 00000000000000000000.log
    """
    ctx.ensure_object(dict)
    if traceback:
        os.environ[TRACEBACK_ENV] = "1"


def _register_commands() -> None:
    from kstore_cli.commands import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)


def report_error(exc: KstoreError) -> int:
    """Print a one-line error on stderr and return its exit status."""
    click.echo(f"kstore: error: {exc}", err=True)
    return int(exc.exit_status)


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point of the ``kstore`` script."""
    _register_commands()
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        from kstore_cli.codecs import check_env_bound

        check_env_bound()  # a KSTORE_MAX_RECORD_BYTES that is not a size is a usage error, not ignored
        # Not cli.main(): Click's own handler would turn a closed pipe into exit 1.
        with cli.make_context("kstore", args) as ctx:
            rv = cli.invoke(ctx)
        sys.stdout.flush()
    except KstoreError as exc:
        if os.environ.get(TRACEBACK_ENV):
            raise
        sys.exit(report_error(exc))
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(ExitStatus.PROBLEMS)
    except click.ClickException as exc:
        exc.show()
        sys.exit(ExitStatus.USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except BrokenPipeError:
        # A pager or `head` closed the pipe: stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(ExitStatus.OK)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - last line of defence: never a traceback
        if os.environ.get(TRACEBACK_ENV):
            raise
        click.echo(
            f"kstore: internal error: {type(exc).__name__}: {exc} "
            f"(rerun with --traceback and report it)",
            err=True,
        )
        sys.exit(ExitStatus.PROBLEMS)
    sys.exit(rv if isinstance(rv, int) else ExitStatus.OK)


if __name__ == "__main__":  # pragma: no cover
    main()
