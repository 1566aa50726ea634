"""``kstore repair``: write what doctor finds missing or wrong and Kafka needs (partition.metadata,
meta.properties fields, leader-epoch-checkpoint, stray dirs moved aside)."""

from __future__ import annotations

from typing import Optional

import click

from kstore_cli.commands._emit import emit, finish
from kstore_cli.commands._options import ExistingPath, dry_run_option, force_option, json_option, topics_option
from kstore_cli.operations.repair import RepairPlan, repair


@click.command(name="repair")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@dry_run_option("Say each change; write nothing.")
@force_option
@topics_option
@json_option("JSON Lines: one object per change (type change) and per finding not repaired, then a summary.")
def command(paths, dry_run: bool, force: bool, topics: Optional[str], as_json: bool) -> None:
    """Write what doctor finds missing or wrong and Kafka needs, as Kafka writes it.

    PATH is a data dir, a folder of several brokers' data dirs or a partition dir, as for doctor;
    repair runs doctor's checks and answers these: partition.metadata missing or unreadable (the
    topic ID from the KRaft metadata log among the PATHs, else from the other copies of the topic:
    give them too), meta.properties missing or without node id, cluster id or a known version (the
    fields the other data dirs of the same node agree on; never a directory.id), a malformed
    leader-epoch-checkpoint (rebuilt from the batches' leader epochs as Kafka's recovery fills it),
    directories a broker cannot parse (a `-delete`/`-stray`/`-future` name without its unique id is
    renamed as Kafka names them; any other is moved out of the data dir into kstore-quarantine beside
    it) and a partition whose topic ID the cluster metadata gives to no such topic (renamed `-stray`,
    as a KRaft broker does at startup). Every replaced file is first copied into
    <data dir>/../kstore-quarantine/<dir>/<time>-<tag>-repair/ with a manifest; one line per change.
    The data dirs' .lock is taken first (--force overrides); every write is crash-safe and keeps the
    owner and mode; a rerun after a kill finishes. A finding of another check is doctor's: the
    summary counts them.

    \b
    Exit status: 0 nothing to do or every change made, 1 a finding repair cannot fix here (said on
    stderr) or the data dir is locked, 2 usage, 3 a file could not be read or written.

    \b
    Example:
      kstore repair --dry-run /var/lib/kafka/data
      kstore repair /var/lib/kafka/data-1 /var/lib/kafka/data-2
    """
    plan = repair(list(paths), topics=topics, dry_run=dry_run, force=force)
    emit(as_json, lambda: [*(c.to_dict() for c in plan.changes), *(u.to_dict() for u in plan.unrepaired),
                           plan.summary()], lambda: _render_text(plan))
    finish(plan)


def _render_text(plan: RepairPlan) -> None:
    """One line per change, then the totals."""
    for change in plan.changes:
        verb = "would " if plan.dry_run else ""
        saved = f" (old file kept in {change.quarantine_dir})" if change.quarantine_dir else ""
        click.echo(f"{change.path}: {change.check}: {verb}{change.message}{saved}")
    made = "to make" if plan.dry_run else "made"
    line = f"repair: {len(plan.changes)} change(s) {made}, {len(plan.unrepaired)} finding(s) not repairable"
    if plan.others:
        line += f"; {len(plan.others)} finding(s) of other checks (`kstore doctor` explains them)"
    click.echo(line)
