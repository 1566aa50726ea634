"""``kstore recover``: the recovery a broker does at startup after an unclean shutdown, offline and in parallel."""

from __future__ import annotations

from typing import Iterator, List, Optional

import click

from kstore_cli.commands._render import echo_skipped, is_tty
from kstore_cli.commands._emit import emit, finish
from kstore_cli.commands._render import size
from kstore_cli.commands._options import ExistingPath, dry_run_option, force_option, json_option, topics_option
from kstore_cli.operations.loader import RecoverRequest, RecoverResult, RecoverRun, recover
from kstore_cli.operations.startup import Issue


@click.command(name="recover")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Partitions recovered at once, each in its own process [default: the number of CPUs].")
@click.option("--quarantine-dir", type=click.Path(file_okay=False),
              help="Where a cut tail and dropped segments go [default: <data dir>/../kstore-quarantine].")
@click.option("--index-interval-bytes", type=click.IntRange(min=0), default=4096, show_default=True,
              help="index.interval.bytes for the rebuilt indexes.")
@dry_run_option("Validate every segment and report what recovery would cut and rewrite; change nothing.")
@force_option
@topics_option
@json_option("JSON Lines: one line per partition, then a summary.")
def command(paths, jobs: Optional[int], quarantine_dir: Optional[str], index_interval_bytes: int,
            dry_run: bool, force: bool, topics: Optional[str], as_json: bool) -> None:
    """Do the recovery a broker would do at startup after an unclean shutdown, offline and in parallel.

    Per partition, as Kafka's LogLoader: every batch validated, the indexes rebuilt as Kafka's recovery
    writes them, the log cut at the first invalid batch with every later segment dropped (the cut bytes
    and files go to the quarantine dir; `kstore restore` undoes it), the leader-epoch checkpoint and the
    data dir's checkpoints brought down to the log end, the producer state written as a snapshot at the
    log end, a new empty active segment rolled there, and the recovery point advanced to it. The broker's
    next startup then has nothing to recover but that empty segment. Partitions run in --jobs processes.

    PATH is a partition directory or a data directory. The data dirs' .lock is taken first (a running
    broker makes this refuse, unless --force). Crash-safe: a rerun after a kill finishes the work.

    Index files without their .log are deleted, as Kafka's loader deletes them. Then doctor's startup
    checks run on the partitions: what would still stop the broker and recovery does not repair (a
    malformed leader-epoch-checkpoint, a partition without .log files whose checkpoints name data, ...),
    Kafka's own recovery does not either, is listed as left, with what Kafka does and what to run.

    \b
    Exit status: 0 recovered (a cut made and quarantined included), 1 a partition could not be
    recovered, something that stops the broker is left, or with --dry-run a log would be cut, 2 usage,
    3 a file could not be read or written (a full disk, a permission: one line on stderr per partition,
    or per data dir whose recovery-point checkpoint could not be written, after the rows of what was done).

    \b
    Example:
      kstore recover --jobs 8 /var/lib/kafka/data
      kstore recover --dry-run /var/lib/kafka/data/orders-0
    """
    run = recover(RecoverRequest(paths, topics=topics, jobs=jobs, quarantine_dir=quarantine_dir,
                                 index_interval_bytes=index_interval_bytes, dry_run=dry_run, force=force))
    echo_skipped(run.skipped, as_json)
    emit(as_json, lambda: _json_rows(run), lambda: _render_text(run))

    finish(run)


def _json_rows(run: RecoverRun) -> Iterator[dict]:
    """A line per partition, each followed by what it left, then the data dirs' findings and the summary."""
    for r in run.results:
        yield r.to_dict()
        yield from ({"type": "finding", **issue.to_dict()} for issue in r.left)
    yield from ({"type": "finding", **issue.to_dict()} for issue in run.dir_left)
    yield run.summary()


def _render_text(run: RecoverRun) -> None:
    """A line per partition, each followed by what it left (as doctor prints its findings), then the data dirs'."""
    human = is_tty()
    for r in run.results:
        click.echo(f"{r.partition}: {_status(r, run.dry_run, human)}")
        _findings(r.left)
    _findings(run.dir_left)


def _status(r: RecoverResult, dry_run: bool, human: bool = False) -> str:
    """A partition's line of text: what recovery did (or would do), and what it left; `human`: sizes in
    binary units (a terminal)."""
    if r.error is not None:
        return "NOT RECOVERED: a file could not be read or written (the error is on stderr)"
    if r.problem:
        return f"NOT RECOVERED: {r.problem}"
    if not r.segments:
        done = "no .log files: nothing to recover"
    else:
        done = (f"{'would recover' if dry_run else 'recovered'} {r.segments} segment(s), {size(r.bytes_validated, human)}; "
                f"log end offset {r.log_end_offset}; {len(r.indexes_written)} index file(s) "
                f"{'to rewrite' if dry_run else 'rewritten'}" + (f"; CUT at {r.cut_at}" if r.cut_at else "")
                + (f" (quarantined in {r.quarantine_dir})" if r.quarantine_dir else "")
                + (f"; rolled an empty segment at {r.rolled}" if r.rolled is not None else ""))
    if r.orphans_deleted:
        done += f"; {len(r.orphans_deleted)} index file(s) without their .log {'to delete' if dry_run else 'deleted'}"
    return done + (f"; LEFT: {len(r.left)} finding(s) that stop the broker" if r.left else "")


def _findings(issues: List[Issue]) -> None:
    for issue in issues:
        for line in issue.text_lines():
            click.echo(line)
