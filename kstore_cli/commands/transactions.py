"""``kstore transactions``: the coordinator's transactional ids and the transactions open in each partition,
hanging ones marked as ``kafka-transactions.sh find-hanging`` marks them (read-only)."""

from __future__ import annotations

import json
import time
from typing import Optional, Tuple

import click

from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, format_time_ms, json_option, now_option, topics_option
from kstore_cli.errors import ExitStatus
from kstore_cli.cluster.transactions import (
    DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
    DEFAULT_TRANSACTION_PARTITIONS,
    TRANSACTION_TOPIC,
    TransactionsReport,
    coordinator_partition_missing,
    load_transactions,
)


def _warnings(report: TransactionsReport, asked: Tuple[str, ...]) -> list:
    out = []
    if not report.loaded_partitions:
        out.append(f"no {TRANSACTION_TOPIC} partition found in the given paths: no coordinator state, so no open "
                   "transaction can be judged hanging")
    elif report.missing_partitions:
        out.append(f"{TRANSACTION_TOPIC} partitions missing from the given paths (of {report.num_partitions}): "
                   f"{', '.join(map(str, report.missing_partitions))}; the transactional ids they hold are not shown")
    for tid in asked:
        n = coordinator_partition_missing(report, tid)
        if n is not None and tid not in report.transactions:
            out.append(f"transactional id {tid}: unknown, it lives in {TRANSACTION_TOPIC}-{n}, which is not in the "
                       "given paths")
    for path, offset, reason in report.skipped:
        out.append(f"{path}: record at offset {offset} not loaded: {reason}" if offset >= 0 else f"{path}: {reason}")
    return out


def _text(report: TransactionsReport, clock: str) -> None:
    click.echo(f"transactional ids ({len(report.transactions)}, from {len(report.loaded_partitions)} of "
               f"{report.num_partitions} {TRANSACTION_TOPIC} partitions):")
    for tid, m in sorted(report.transactions.items()):
        parts = ",".join(f"{t}-{p}" for t, p in m.partitions) or "-"
        click.echo(f"  {tid}  {m.state}  producer {m.producer_id} epoch {m.producer_epoch}  timeout {m.timeout_ms} ms"
                   f"  partitions {parts}  started {format_time_ms(m.start_timestamp)}"
                   f"  updated {format_time_ms(m.last_update_timestamp)}")
    click.echo(f"open transactions ({len(report.open_transactions)} in {report.partitions_checked} partitions; "
               f"now = {clock}, max transaction timeout {report.max_timeout_ms} ms):")
    for t in report.open_transactions:
        click.echo(f"  {t.topic}-{t.partition}  producer {t.producer_id} epoch {t.producer_epoch}  first offset "
                   f"{t.first_offset}  last written {format_time_ms(t.last_timestamp)} ({t.duration_ms // 60000} min)"
                   f"  holds the last stable offset at {t.last_stable_offset}  {t.verdict.upper()}: {t.reason}")


@click.command(name="transactions")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@click.option("--transactional-id", "transactional_ids", multiple=True, help="Only this transactional id (repeatable).")
@topics_option
@click.option("--transaction-partitions", type=int, default=DEFAULT_TRANSACTION_PARTITIONS, show_default=True,
              help=f"Partitions of {TRANSACTION_TOPIC} (the cluster's transaction.state.log.num.partitions).")
@click.option("--max-transaction-timeout", type=click.IntRange(min=0), default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES,
              show_default=True, metavar="MINUTES",
              help="As find-hanging's: open transactions last written longer ago than this are candidates.")
@now_option
@json_option("JSON Lines: one line per transactional id and per open transaction, then a summary.")
@click.pass_context
def command(ctx: click.Context, paths: Tuple[str, ...], transactional_ids: Tuple[str, ...], topics: Optional[str],
            transaction_partitions: int, max_transaction_timeout: int, now: Optional[int], as_json: bool) -> None:
    """Transactional ids from the __transaction_state partitions in PATHS and the transactions still open in
    each data partition, hanging ones marked as kafka-transactions.sh find-hanging defines them.

    The coordinator's state is loaded as the transaction coordinator loads it (latest record per
    transactional id, tombstones delete). Each partition's open transactions come from its producer
    snapshot and the log after it (the producer id, epoch, first offset, last write) with the last stable
    offset they hold back. An open transaction last written more than --max-transaction-timeout minutes
    before --now is hanging when no transactional id has its producer id, or when its transactional id's
    partitions do not include the partition (the coordinator will never write the marker); where the id may
    live in a __transaction_state partition missing from PATHS the verdict is unknown.

    \b
    Exit status: 0 nothing hanging, 1 hanging (or undetermined) transactions or missing coordinator
    partitions, 2 usage, 3 unreadable.

    \b
    Example:
      kstore transactions /var/lib/kafka/data
      kstore transactions --now 2026-11-24T03:00:00Z --json /srv/copies/broker-*/data
    """
    clock = "--now " + format_time_ms(now) if now is not None else "the wall clock " + format_time_ms(int(time.time() * 1000))
    now = int(time.time() * 1000) if now is None else now
    report = load_transactions(paths, now=now, num_partitions=transaction_partitions,
                               max_timeout_ms=max_transaction_timeout * 60_000,
                               transactional_ids=list(transactional_ids) or None, topics=topics)
    warnings = _warnings(report, transactional_ids)
    if as_json:
        for m in sorted(report.transactions.values(), key=lambda m: m.transactional_id):
            click.echo(json.dumps(m.to_dict(), sort_keys=True))
        for t in report.open_transactions:
            click.echo(json.dumps(t.to_dict(), sort_keys=True))
        click.echo(json.dumps({"type": "summary", "now": now, "max_transaction_timeout_ms": report.max_timeout_ms,
                               "transaction_partitions": report.num_partitions,
                               "loaded_partitions": report.loaded_partitions,
                               "missing_partitions": report.missing_partitions, "hanging": len(report.hanging),
                               "undetermined": len(report.undetermined), "warnings": warnings}, sort_keys=True))
    else:
        _text(report, clock)
    for w in warnings:
        click.echo(f"kstore: warning: {w}", err=True)
    if report.hanging or report.undetermined or report.missing_partitions or report.skipped:
        exit_with(ExitStatus.PROBLEMS)
