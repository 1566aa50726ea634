"""The ``kstore`` command: the root group, and the one place errors become exit codes.

Exit codes (also in the README):

    0  success, nothing wrong found
    1  problems found in the data (corruption, index mismatches, failed checks)
    2  usage error
    3  a file could not be opened, read or written (also the command's own output: stdout on
       a full disk); a closed pipe (``| head``) is not an error: kstore stops quietly, exit 0
"""

from __future__ import annotations

import errno
import os
import sys
import traceback as _traceback
from typing import List, Optional

import click

from kstore_cli import __version__
from kstore_cli.errors import ExitStatus, KstoreError, OutputError

TRACEBACK_ENV = "KSTORE_TRACEBACK"

#: --traceback given on this invocation (reset by main(), so one in-process run never leaks into the next)
_traceback_flag = False


def traceback_wanted() -> bool:
    """--traceback was given, or KSTORE_TRACEBACK is set to anything but "" or "0"."""
    return _traceback_flag or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")


def _print_traceback() -> None:
    """The traceback of the exception being handled, on stderr (before the usual one-line message)."""
    sys.stdout.flush()
    _traceback.print_exc(file=sys.stderr)
    sys.stderr.flush()


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
    global _traceback_flag
    ctx.ensure_object(dict)
    if traceback:
        _traceback_flag = True


def _register_commands() -> None:
    from kstore_cli.commands import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)


def report_error(exc: KstoreError) -> int:
    """Print a one-line error on stderr and return its exit status."""
    click.echo(f"kstore: error: {exc}", err=True)
    return int(exc.exit_status)


#: errnos of a failed write to an output stream (an OSError without a file name: not one of the
#: core's own file operations, which raise KstoreErrors naming their file).
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF, errno.EINVAL,
                            errno.EPERM, errno.EACCES, errno.EROFS, errno.ECONNRESET})


def _reason(exc: OSError) -> str:
    return "no space left on device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of what is still buffered does
    not fail again (a second message, exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _internal_error(exc: BaseException) -> None:
    click.echo(
        f"kstore: internal error: {type(exc).__name__}: {exc} "
        f"(rerun with --traceback and report it)",
        err=True,
    )
    sys.exit(ExitStatus.PROBLEMS)


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point of the ``kstore`` script.

    With --traceback/KSTORE_TRACEBACK the traceback is printed before the one-line message; the exit
    status stays the documented one (2 usage, 3 unreadable, 1 data problems or an internal error).
    """
    global _traceback_flag
    _traceback_flag = False
    _register_commands()
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # Not cli.main(): Click's own handler would turn a closed pipe into exit 1.
        with cli.make_context("kstore", args) as ctx:
            rv = cli.invoke(ctx)
        sys.stdout.flush()
    except KstoreError as exc:
        if traceback_wanted():
            _print_traceback()
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
        _silence_stdout()
        sys.exit(ExitStatus.OK)
    except OSError as exc:
        if exc.filename is not None or exc.errno not in _OUTPUT_ERRNOS:
            if traceback_wanted():
                _print_traceback()
            _internal_error(exc)
        # Writing the command's output failed (stdout on a full disk, /dev/full, a broken device):
        # the output is incomplete, which the caller must know.
        _silence_stdout()
        sys.exit(report_error(OutputError(f"could not write: {_reason(exc)}; the output is incomplete",
                                          path="standard output")))
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - last line of defence: never an unasked-for traceback
        if traceback_wanted():
            _print_traceback()
        _internal_error(exc)
    sys.exit(rv if isinstance(rv, int) else ExitStatus.OK)


if __name__ == "__main__":  # pragma: no cover
    main()
