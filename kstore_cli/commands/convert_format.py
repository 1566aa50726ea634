"""``kstore convert-format``: rewrite partitions into another message format and/or codec."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from typing import Optional

import click

from kstore_cli.commands._options import (
    ExistingPath,
    SIZE,
    SizeType,
    dry_run_option,
    force_option,
    jobs_option,
    json_option,
    topics_option,
)

from kstore_cli.commands._render import echo_skipped
from kstore_cli.commands._render import human_bytes
from kstore_cli.commands._render import new_table, print_rich, size
from kstore_cli.commands._render import is_tty as _is_tty
from kstore_cli.commands._emit import exit_with, with_progress
from kstore_cli.codecs import CODEC_IDS
from kstore_cli.errors import ExitStatus
from kstore_cli.log import scope
from kstore_cli.operations.convert import (
    LOSS_DESCRIPTIONS,
    ConvertOptions,
    ConvertRun,
    ConvertStats,
    check_destination,
    check_output_dir,
    convert_targets,
    output_guard,
)
from kstore_cli.log.index import DEFAULT_INDEX_INTERVAL_BYTES
from kstore_cli.operations.runner import select


def _summary_line(stats: ConvertStats, human: bool = False) -> str:
    ratio = "n/a" if stats.ratio is None else f"{stats.ratio:.3f}"
    line = (f"{stats.segments_in} -> {stats.segments_out} segments, {stats.batches_in} -> {stats.batches_out} batches "
            f"({stats.unchanged_batches} unchanged), {stats.records_in} -> {stats.records_out} records, "
            f"{size(stats.bytes_in, human)} -> {size(stats.bytes_out, human)} (ratio {ratio})")
    losses = {k: v for k, v in stats.losses.items() if v}
    line += "; losses: " + (", ".join(f"{v} {k}" for k, v in sorted(losses.items())) if losses else "none")
    return line


@click.command(name="convert-format")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--to-magic", type=click.Choice(["0", "1", "2"]), required=True,
              help="Target message format: 2 (record batches), 1 (v1 messages, timestamps) or 0.")
@click.option("--compression", type=click.Choice(sorted(CODEC_IDS, key=CODEC_IDS.get)),
              help="Target codec [default: keep each batch's codec]. zstd needs --to-magic 2.")
@click.option("--compression-level", type=int, help="Codec level (gzip 1..9, lz4 1..17, zstd up to 22).")
@click.option("--output-dir", type=click.Path(file_okay=False),
              help="Write the converted partitions here (as a data dir: <DIR>/<partition>/), leaving the input alone.")
@click.option("--in-place", is_flag=True, help="Replace the input's segments (crash-safe swap, lock-checked).")
@dry_run_option("Convert in memory and report; write nothing.")
@click.option("--strict", is_flag=True, help="Refuse any conversion that would lose information (exit 1).")
@click.option("--batch-bytes", type=SizeType(min=1),
              help="Regroup records into batches of up to N bytes [legacy -> v2 groups at 16384 anyway].")
@click.option("--segment-bytes", type=SizeType(min=1),
              help="Roll segments at N bytes [default: keep the input's segment boundaries].")
@click.option("--index-interval-bytes", type=SIZE, default=DEFAULT_INDEX_INTERVAL_BYTES,
              show_default=True, help="The topic's index.interval.bytes, for the new indexes.")
@jobs_option("Threads doing codec work, this one included [default: min(2, CPUs)]; 1: no other thread.")
@force_option
@topics_option
@json_option("One JSON object per partition, then a summary object.")
@click.pass_context
def command(ctx: click.Context, paths, topics: Optional[str], to_magic: str, compression: Optional[str], compression_level: Optional[int],
            output_dir: Optional[str], in_place: bool, dry_run: bool, strict: bool, batch_bytes: Optional[int],
            segment_bytes: Optional[int], index_interval_bytes: int, jobs: Optional[int], force: bool,
            as_json: bool) -> None:
    """Rewrite partitions into another message format (magic) and/or compression codec.

    PATH is a .log file, a partition directory or a data directory. Offsets and timestamps are
    kept; so are keys, values and, for --to-magic 2, headers, producer ids/epochs/sequences,
    transactional flags and control batches. Batches already in the target form are copied byte
    for byte. v0/v1 -> v2 follows Kafka's LogValidator (consecutive legacy entries grouped into
    v2 batches of up to --batch-bytes, 16 KiB by default). v2 -> v1/v0 follows RecordsUtil.downConvert:
    control batches, headers and producer fields are dropped and v0 has no timestamps; every loss
    is counted in the summary, and --strict refuses a lossy conversion. Indexes are written by
    Kafka's rules; leader-epoch checkpoint and producer snapshots are kept (emptied for v0/v1).

    With --in-place the new segments are swapped in with Kafka's own protocol (.cleaned, .swap,
    .deleted), so a crash at any point leaves a directory a broker -- or a rerun of this
    command -- resolves; the data dir's .lock is taken first. With --output-dir the input is
    only read. One of the two is required unless --dry-run.

    \b
    Exit status: 0 done, 1 refused by --strict (or problems), 2 usage, 3 unreadable.

    \b
    Example:
      kstore convert-format --to-magic 2 --compression zstd --output-dir /srv/converted /var/lib/kafka/data
      kstore convert-format --to-magic 2 --in-place /var/lib/kafka/data/orders-0
      kstore convert-format --to-magic 1 --compression gzip --strict --dry-run /var/lib/kafka/data/orders-0
    """
    check_destination(in_place, output_dir, dry_run)
    opts = ConvertOptions(
        int(to_magic), None if compression is None else CODEC_IDS[compression], compression_level,
        batch_bytes=batch_bytes, strict=strict, segment_bytes=segment_bytes,
        index_interval_bytes=index_interval_bytes, jobs=jobs,
    )
    selection = select(paths, topics, "convert-format", in_place=in_place)
    targets = selection.targets
    guard = contextlib.nullcontext()
    if output_dir:
        check_output_dir(output_dir, paths, targets)
        guard = output_guard(output_dir, paths, targets, force=force, dry_run=dry_run)
    tty = _is_tty() and not as_json
    with guard:
        run = with_progress(tty, "converting", lambda: sum(os.path.getsize(s.log) for t in targets for s in t.segments),
                            functools.partial(convert_targets, paths, targets, opts,
                                              output_dir=None if in_place else output_dir, dry_run=dry_run, force=force,
                                              on_result=(lambda r: click.echo(json.dumps(r.to_dict(), sort_keys=True)))
                                              if as_json else None))
    echo_skipped(selection.skipped, as_json)
    if as_json:
        click.echo(json.dumps(run.to_dict(), sort_keys=True))
    else:
        _report(run, tty)
    if scope.unhandled(selection.skipped):
        exit_with(ExitStatus.PROBLEMS)


def _report(run: ConvertRun, tty: bool) -> None:
    """Text output: a table on a terminal, else a line per partition; then the total, and losses on stderr."""
    total, dry_run = run.total, run.dry_run
    if tty:
        table = new_table("convert-format" + (" (dry run)" if dry_run else ""),
                          ("partition", "status", "segments", "batches", "records", "in", "out", "losses"))
        for r in run.results:
            s = r.stats
            losses = ", ".join(f"{v} {k}" for k, v in sorted(s.losses.items()) if v) or "-"
            table.add_row(r.partition.name, r.status, f"{s.segments_in}->{s.segments_out}",
                          f"{s.batches_in}->{s.batches_out}", f"{s.records_in}->{s.records_out}",
                          human_bytes(s.bytes_in), human_bytes(s.bytes_out), losses)
        print_rich(table, "total: " + _summary_line(total, human=True))
    else:
        for r in run.results:
            where = "" if r.destination in (None, r.partition.path) else f" -> {r.destination}"
            click.echo(f"{r.partition.path}{where}: {r.status}: {_summary_line(r.stats)}")
        click.echo(f"total ({len(run.results)} partition(s)){' (dry run)' if dry_run else ''}: {_summary_line(total)}")
    if total.lossy:
        click.echo("lost: " + "; ".join(f"{v} {LOSS_DESCRIPTIONS[k]}" for k, v in sorted(total.losses.items()) if v),
                   err=True)
