"""``kstore restore``: undo a cut (``rebuild-index --truncate``, ``recover``) from its quarantine dir."""

from __future__ import annotations

import json
import os

import click

from kstore_cli.commands._options import dry_run_option, force_option, json_option
from kstore_cli.operations.restore import restore


@click.command(name="restore")
@click.argument("quarantine_dir", type=click.Path(file_okay=False))
@dry_run_option("Check and report what would be put back; change nothing.")
@force_option
@json_option("One JSON object.")
def command(quarantine_dir: str, dry_run: bool, force: bool, as_json: bool) -> None:
    """Undo a `rebuild-index --truncate`: append the cut tail back to its .log, move the later
    segments and snapshots back, and raise the checkpoints it lowered back to their old values.

    The same for the cut of `recover`, which also rolled an empty segment at the cut: restore removes
    it first (only while it is empty; what else recover did -- indexes rebuilt, the producer snapshot
    and the recovery point at the cut -- stays, valid for the restored log).

    QUARANTINE_DIR is one run's dir, <quarantine root>/<partition>/<UTC time>/ (the one holding
    kstore-quarantine.json). The partition must be exactly as the cut left it: if a broker or
    another tool wrote it since (new data, a moved checkpoint), nothing changes and the command
    exits 1. The manifest is trusted with nothing outside its own dirs: every file it names must be a
    bare name in the partition dir, its data dir or the quarantine dir, the partition must belong to
    the quarantine dir's owner (or root), and every quarantined file must have the size and sha256
    recorded; anything else exits 2 and changes nothing (also with --dry-run). A salvage --in-place
    quarantine dir is refused (exit 2): salvage cannot be undone. Every step is crash-safe; rerun
    after a kill and it finishes. The data dir's .lock is taken first (a running broker makes this
    refuse, unless --force). The quarantine dir keeps its manifest (marked restored) and the tail
    file, now a copy; delete it when done.

    \b
    Exit status: 0 restored (or already restored), 1 the partition changed or is locked, 2 usage
    or a manifest refused, 3 a file could not be read or written.

    \b
    Example:
      kstore restore /var/lib/kafka/kstore-quarantine/orders-0/20261123T213000123456Z
    """
    plan = restore(quarantine_dir, dry_run=dry_run, force=force)
    if as_json:
        out = plan.to_dict()
        out["dry_run"] = dry_run
        click.echo(json.dumps(out, sort_keys=True))
        return
    if plan.already_restored:
        click.echo(f"{plan.qdir}: already restored into {plan.partition}; nothing to do")
        return
    verb = "would" if dry_run else "restored:"
    parts = []
    if plan.unroll:
        rolled = plan.manifest["rolledSegment"]
        parts.append(f"remove the empty segment {rolled} recover rolled" if dry_run
                     else f"empty segment {rolled} recover rolled removed")
    if plan.append_bytes:
        parts.append(f"append {plan.append_bytes} bytes to {os.path.basename(plan.segment)}" if dry_run
                     else f"{plan.append_bytes} bytes appended to {os.path.basename(plan.segment)}")
    if plan.moves:
        parts.append(f"move {len(plan.moves)} files back" if dry_run else f"{len(plan.moves)} files moved back")
    for change in plan.checkpoints:
        name = os.path.basename(change["file"])
        parts.append(f"{name} {change['after']} -> {change['before']}")
    click.echo(f"{plan.partition}: {verb} " + ("; ".join(parts) if parts else "nothing left to put back"))
