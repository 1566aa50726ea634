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
from typing import List, NoReturn, Optional, Tuple

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


#: The twins --version names: (label, the package and name of the native extension).
_TWINS = (("record decoder", "record", "_decode_c"), ("record encoder", "record", "_encode_c"),
          ("cleaner", "record", "_cleaner_c"), ("Avro column reader", "spark", "_avro_c"))


def _twin_backend(package: str, native_name: str) -> str:
    """The twin decode.choose_twin picks for `native_name`, found without importing the record core
    (~100 ms: `kstore --version` must start as fast as click): KSTORE_DECODER, then the native
    extension when one is built for this interpreter."""
    policy = os.environ.get("KSTORE_DECODER", "").strip().lower()
    if policy == "python":
        return "python"
    if policy not in ("", "native"):
        return f"none, KSTORE_DECODER={policy!r} is not a decoder"
    import importlib.machinery

    import kstore_cli

    package_dir = os.path.join(os.path.dirname(os.path.abspath(kstore_cli.__file__)), package)
    # PathFinder with an explicit path: looks for the file without importing the package.
    spec = importlib.machinery.PathFinder.find_spec(f"kstore_cli.{package}.{native_name}", [package_dir])
    if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return "native"
    return "none, KSTORE_DECODER=native but it is not built" if policy == "native" else "python"


def _version_text() -> str:
    twins = "; ".join(f"{label}: {_twin_backend(package, name)}" for label, package, name in _TWINS)
    return f"kstore {__version__} ({twins})"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_version_text())
        ctx.exit()


class KstoreGroup(click.Group):
    """The root group, lazy: commands come from the registry table (kstore_cli/commands/__init__.py),
    listed with their one-line help without importing them; a command's module is imported when it
    is resolved (run, its --help, completion inside it). Commands added with add_command (tests)
    come first."""

    def list_commands(self, ctx: click.Context) -> List[str]:
        from kstore_cli import commands as registry

        return list(self.commands) + [name for name in registry.names() if name not in self.commands]

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        from kstore_cli import commands as registry

        command = self.commands.get(cmd_name)
        return command if command is not None else registry.load(cmd_name)

    def _short_helps(self, ctx: click.Context, names: List[str]) -> List[Tuple[str, str]]:
        """(name, one-line help) of each visible command: from the table, or from the command itself."""
        from kstore_cli import commands as registry

        rows = []
        for name in names:
            line = registry.entry(name) if name not in self.commands else None
            if line is not None:
                rows.append((name, line.short_help))
            else:
                command = self.get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(1000)))
        return rows

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from click.utils import make_default_short_help

        rows = self._short_helps(ctx, self.list_commands(ctx))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, make_default_short_help(text, limit)) for name, text in rows])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        names = [name for name in self.list_commands(ctx) if name.startswith(incomplete)]
        items = [CompletionItem(name, help=text) for name, text in self._short_helps(ctx, names)]
        return items + click.Command.shell_complete(self, ctx, incomplete)


@click.group(
    cls=KstoreGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the record decoder in use, and exit.")
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
    """Kept for callers from before the lazy registry: the group finds every command itself."""


#: The shell-completion variable: `_KSTORE_COMPLETE=bash_source kstore` prints the bash script.
COMPLETE_ENV = "_KSTORE_COMPLETE"


def usage_error_line(exc: click.ClickException) -> str:
    """A click error as kstore's one line: `kstore: error: [COMMAND: ]<what> (see 'kstore COMMAND --help')`.

    One line, not click's Usage/Try/Error block nor a second "Try" line: every kstore error is one
    line on stderr, so `2>&1 | tail -1`, cron mail and log collectors get it whole and `^kstore: error:`
    finds them all; the pointer to the help fits on the same line."""
    # The message verbatim (some repeat Kafka's own, e.g. dump-segment's 'Missing required argument
    # "[files]"'), on one line, without the final full stop the pointer to --help would follow.
    what = " ".join(exc.format_message().split()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if not isinstance(exc, click.UsageError) or ctx is None:
        return f"kstore: error: {what}"
    path = ctx.command_path
    command = path.split(" ", 1)[1] if " " in path else ""
    prefix = f"{command}: " if command else ""
    return f"kstore: error: {prefix}{what} (see '{path} --help')"


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


def _exit_with_error(exc: KstoreError) -> NoReturn:
    """Exit with the error's one line on stderr and its exit status."""
    # Imported on an error only: `kstore --version` imports no command module.
    from kstore_cli.commands._emit import report_error

    sys.exit(report_error(exc))


def _exit_with_os_error(exc: OSError) -> NoReturn:
    """An OSError no command turned into a KstoreError: a failed write of the command's own output (stdout on
    a full disk, /dev/full, a broken device), which the caller must know is incomplete, else an internal error."""
    if exc.filename is not None or exc.errno not in _OUTPUT_ERRNOS:
        if traceback_wanted():
            _print_traceback()
        _internal_error(exc)
    _silence_stdout()
    _exit_with_error(OutputError(f"could not write: {_reason(exc)}; the output is incomplete", path="standard output"))


def _internal_error(exc: BaseException) -> NoReturn:
    click.echo(
        f"kstore: internal error: {type(exc).__name__}: {exc} "
        f"(rerun with --traceback and report it)",
        err=True,
    )
    sys.exit(ExitStatus.PROBLEMS)


#: click >= 8.2 raises this for a command run with no arguments that prints its help instead.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point of the ``kstore`` script.

    With --traceback/KSTORE_TRACEBACK the traceback is printed before the one-line message; the exit
    status stays the documented one (2 usage, 3 unreadable, 1 data problems or an internal error).
    """
    global _traceback_flag
    _traceback_flag = False
    args = sys.argv[1:] if argv is None else list(argv)
    instruction = os.environ.get(COMPLETE_ENV)
    if instruction:
        from click.shell_completion import shell_complete

        sys.exit(shell_complete(cli, {}, "kstore", COMPLETE_ENV, instruction))
    try:
        if os.environ.get("KSTORE_MAX_RECORD_BYTES") is not None:  # imports the codecs only when set
            from kstore_cli.codecs import check_env_bound

            check_env_bound()  # a KSTORE_MAX_RECORD_BYTES that is not a size is a usage error, not ignored
        # Not cli.main(): Click's own handler would turn a closed pipe into exit 1.
        with cli.make_context("kstore", args) as ctx:
            rv = cli.invoke(ctx)
        sys.stdout.flush()
    except KstoreError as exc:
        if traceback_wanted():
            _print_traceback()
        _exit_with_error(exc)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(ExitStatus.PROBLEMS)
    except _NO_ARGS_IS_HELP as exc:
        exc.show()  # the help itself, asked for by giving no arguments: not an error line
        sys.exit(ExitStatus.USAGE)
    except click.ClickException as exc:
        # One format for every error: click's "Usage: ... Try ... Error: ..." block becomes one line.
        click.echo(usage_error_line(exc), err=True)
        if isinstance(exc, click.UsageError):
            sys.exit(ExitStatus.USAGE)
        sys.exit(ExitStatus.UNREADABLE if isinstance(exc, click.FileError) else exc.exit_code)
    except BrokenPipeError:
        # A pager or `head` closed the pipe: stop quietly, as Unix tools do.
        _silence_stdout()
        sys.exit(ExitStatus.OK)
    except OSError as exc:
        _exit_with_os_error(exc)
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
