"""``kstore recover``: the recovery a broker does at startup after an unclean shutdown, offline and in parallel."""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import List, Optional

import click

from kstore_cli.commands._console import echo_skipped, is_tty
from kstore_cli.commands._render import size
from kstore_cli.commands._options import ExistingPath, dry_run_option, force_option, json_option, topics_option
from kstore_cli.errors import ExitStatus, KstoreError, UsageError
from kstore_cli.log import fileops
from kstore_cli.operations.loader import RecoverResult, advance_recovery_points, check_what_is_left, recover_partition
from kstore_cli.log.logdir import group_by_data_dir, nothing_found, resolve
from kstore_cli.log.scope import check_quarantine_dir, mutable_targets
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
@click.pass_context
def command(ctx: click.Context, paths, jobs: Optional[int], quarantine_dir: Optional[str], index_interval_bytes: int,
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
    targets = resolve(paths, topics)
    if not targets:
        raise nothing_found(paths, topics)
    if any(t.only is not None for t in targets):
        raise UsageError("recover works on whole partitions: give a partition or data directory, not a .log file")
    targets, skipped = mutable_targets(paths, targets, "recover")
    check_quarantine_dir(quarantine_dir, paths, targets)
    groups = group_by_data_dir(targets)
    partitions: List[str] = sorted({t.partition.path for t in targets
                                    if t.partition.partition >= 0 and not t.partition.name.endswith(
                                        ("-delete", "-future", "-stray"))})
    jobs = jobs or os.cpu_count() or 1
    results: List[RecoverResult] = []
    checkpoint_errors: List[KstoreError] = []
    with fileops.lock_data_dirs({d: [t.partition.path for t in ts] for d, ts in groups.items()},
                                force=force, enabled=not dry_run):
        kwargs = dict(quarantine_root=quarantine_dir, index_interval_bytes=index_interval_bytes, dry_run=dry_run)
        if jobs == 1 or len(partitions) == 1:
            results = [recover_partition(p, **kwargs) for p in partitions]
        else:
            # Workers are forked (explicitly: not spawned nor from a forkserver) by this process, which holds
            # the data dirs' .lock for them: an fcntl lock is not inherited, so each worker is bound to its
            # parent (fileops.bind_to_parent: killed by the kernel when the parent dies, and no file
            # operation once it is gone) and no write happens without the lock held by its living parent.
            # The lock shared by the workers serializes their updates of the data dirs' checkpoints.
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=min(jobs, len(partitions)), mp_context=context,
                                     initializer=fileops.bind_to_parent,
                                     initargs=(os.getpid(), context.Lock())) as pool:
                results = list(pool.map(_recover, [(p, kwargs) for p in partitions]))
        for data_dir in sorted(groups):
            try:
                advance_recovery_points(data_dir, results)
            except KstoreError as exc:
                # Reported after the rows: what the partitions' recovery did (cut, quarantined, rolled) is done
                # and must be seen; the old checkpoint stays (atomic write), so the broker recovers from there.
                checkpoint_errors.append(exc)
    dir_left = check_what_is_left(results)
    echo_skipped(skipped, as_json)
    human = is_tty()
    for r in results:
        if as_json:
            click.echo(json.dumps(r.to_dict(), sort_keys=True))
        else:
            click.echo(f"{r.partition}: {_status(r, dry_run, human)}")
        _findings(r.left, as_json)
    _findings(dir_left, as_json)
    left = sum(len(r.left) for r in results) + len(dir_left)
    if as_json:
        click.echo(json.dumps({"type": "summary", "partitions": len(results), "skipped": len(skipped),
                               "dry_run": dry_run, "jobs": jobs, "cut": sum(1 for r in results if r.cut_at),
                               "problems": sum(1 for r in results if r.problem), "left": left,
                               "bytes_validated": sum(r.bytes_validated for r in results)}, sort_keys=True))
    errors = [r.error for r in results if r.error is not None] + checkpoint_errors
    if errors:
        from kstore_cli.commands._errors import report_error  # the one place errors become lines and exit codes

        statuses = [report_error(e) for e in errors]  # one line each, on stderr
        ctx.exit(max(statuses))
    # A cut made is recovery done (its bytes are quarantined), as rebuild-index --truncate; one still to make
    # (a dry run), a partition left unrecovered or something left that stops the broker is a problem.
    if left or any(r.problem or (dry_run and r.cut_at) for r in results):
        ctx.exit(int(ExitStatus.PROBLEMS))


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


def _findings(issues: List[Issue], as_json: bool) -> None:
    """What is left, as doctor prints its findings."""
    for issue in issues:
        if as_json:
            click.echo(json.dumps({"type": "finding", **issue.to_dict()}, sort_keys=True))
        else:
            for line in issue.text_lines():
                click.echo(line)


def _recover(args) -> RecoverResult:
    path, kwargs = args
    return recover_partition(path, **kwargs)
