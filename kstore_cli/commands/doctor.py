"""``kstore doctor``: why would my broker not start on these data dirs, and what do I run (read-only)."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

import click

from kstore_cli.commands._render import byte_progress
from kstore_cli.commands._render import is_tty as _is_tty
from kstore_cli.commands._render import console, new_table
from kstore_cli.commands._emit import exit_with
from kstore_cli.commands._options import ExistingPath, jobs_option, json_option, kafka_version_option, topics_option
from kstore_cli.errors import ExitStatus, UsageError
from kstore_cli.log.locks import is_locked
from kstore_cli.log.logdir import nothing_found
from kstore_cli.operations.findings_groups import IssueGroup, group_issues, severity_rank
from kstore_cli.operations.layout_findings import layout_issues
from kstore_cli.operations.partition_checks import check_partitions
from kstore_cli.operations.runner import usable_cores
from kstore_cli.operations.upgrade import upgrade_issues
from kstore_cli.operations.startup import (
    ERROR,
    NOTE,
    WARNING,
    Issue,
    clean_shutdown_marker,
    data_dir_key,
    run_lines,
    survey,
)

@click.command(name="doctor")
@click.argument("paths", nargs=-1, required=True, type=ExistingPath())
@json_option("JSON Lines: one object per broker, data dir, finding and partition, then a summary; each has a `type`.")
@topics_option
@kafka_version_option
@click.option("--verbose", "-v", is_flag=True,
              help="List every finding under its partition; by default repeated findings of one check on a "
                   "topic's partitions are one line with their partition ranges.")
@click.option("--quick", is_flag=True,
              help="Only what Kafka's loader checks after a clean shutdown: no CRC scan, no index-against-log check.")
@jobs_option("Partitions checked at once, each in its own process [default: the usable cores].")
@click.pass_context
def command(ctx: click.Context, paths, as_json: bool, topics: Optional[str], kafka_version, verbose: bool,
            quick: bool, jobs: Optional[int]) -> None:
    """Why would my broker not start on these data dirs, and what do I run (read-only).

    PATH is a data dir, a folder holding several brokers' data dirs (searched two levels down),
    a partition dir or a .log file. Checks what a broker checks or trips over at startup:
    meta.properties (node and cluster id agree across one broker's dirs), a live process
    holding .lock, every checkpoint's format and whether its offsets lie inside the log,
    directories Kafka cannot parse (they stop the broker), partition.metadata and topic IDs,
    partitions without logs, leftover .swap/.cleaned/.deleted files, a CRC scan of every batch,
    index health (as verify-index) and producer snapshots. Each finding says what Kafka does
    with it at startup and which command repairs it. Each data dir is judged by the rules of the
    broker its files show (ZooKeeper or KRaft mode, which Kafka releases: one "judged as" line per
    data dir), or of --kafka-version. See docs/runbook.md.
    With --kafka-version, also what a broker of that release would refuse or
    change (upgrade readiness: ZooKeeper mode, metadata.version, removed topic
    configs, v0/v1 data; docs/upgrade.md).

    Findings are listed per data dir after its partitions, real problems first (errors, warnings,
    notes; the rarest first): the same check on many partitions of a topic is one line
    (`orders 0-27,30-49 (48 partitions)`); --verbose lists each under its partition.

    --quick: only a clean startup's checks (no CRC scan; docs/cli.md). --jobs: the same output.

    \b
    Exit status: 0 healthy (notes allowed), 1 errors or warnings found, 3 unreadable.

    \b
    Example:
      kstore doctor /var/lib/kafka/data
      kstore doctor --verbose /var/lib/kafka/data
      kstore doctor --json /backups/brokers | jq 'select(.type=="finding")'
      kstore doctor --quick --jobs 8 /var/lib/kafka/data
    """
    tty = _is_tty() and not as_json
    jobs = jobs or usable_cores()
    found = survey(paths, replicas=True, topics=topics, kafka_version=kafka_version, lazy=True, jobs=jobs, sizes=tty)
    if not found.data_dirs:
        raise UsageError("no data directories or partitions found in " + ", ".join(paths))
    if topics and not found.targets:
        raise nothing_found(paths, topics)
    out = _Output(as_json, tty, verbose)
    for broker in found.brokers:
        out.broker(broker)
    counts: Dict[str, int] = {ERROR: 0, WARNING: 0, NOTE: 0}
    bar, advance = byte_progress(tty, "checking", lambda: found.log_bytes)
    if bar is not None:
        out.console = bar.console  # lines printed above the transient bar
    try:
        # The partitions' checks start (in --jobs processes) while the data dirs' own findings are worked out.
        checked_dirs = check_partitions(found, jobs=jobs, quick=quick, progress=advance)
        by_dir = _layout_by_dir(found, kafka_version)
        healthy = _check_partitions(checked_dirs, found, by_dir, counts, out)
    finally:
        if bar is not None:
            bar.stop()
    _outside_every_dir(by_dir, counts, out)
    out.summary(found, healthy, counts)
    if counts[ERROR] or counts[WARNING]:
        exit_with(ExitStatus.PROBLEMS)


def _outside_every_dir(by_dir: Dict[str, List[Issue]], counts: Dict[str, int], out: "_Output") -> None:
    """Findings left outside every data dir checked (none expected), listed and counted."""
    for rest in by_dir.values():
        for issue in rest:
            counts[issue.severity] += 1
            out.finding(issue)


def _layout_by_dir(found, kafka_version) -> Dict[str, List[Issue]]:
    """The data dirs' findings, keyed by the data dir, or by the checked partition a finding is about (a topic
    ID: listed, and counted, with that partition); with --kafka-version also what a broker of that release
    would refuse or change (docs/upgrade.md)."""
    by_dir: Dict[str, List[Issue]] = {}
    issues = layout_issues(found) + (upgrade_issues(found, kafka_version) if kafka_version else [])
    about = {issue.partition for issue in issues if issue.partition}  # the few partitions findings name
    checked = {p.path for p, only in (found.targets if about else ()) if only is None and p.path in about}
    for issue in issues:
        key = issue.partition if issue.partition in checked else issue.data_dir or ""
        by_dir.setdefault(key, []).append(issue)
    return by_dir


def _check_partitions(checked_dirs, found, by_dir: Dict[str, List[Issue]], counts: Dict[str, int],
                      out: "_Output") -> int:
    """Each data dir's own findings, then each of its partitions' (CRC scan, indexes, startup checks) as
    they come; returns how many partitions are healthy."""
    healthy = 0
    for info, checks in checked_dirs:
        out.data_dir(info, found.judge(info))
        for issue in sorted(by_dir.pop(info.path, []), key=lambda i: severity_rank(i.severity)):
            counts[issue.severity] += 1
            out.finding(issue, under=info.path)
        for check in checks:
            issues = check.issues
            if check.only is None:
                issues += by_dir.pop(check.partition.path, [])
            issues.sort(key=lambda i: severity_rank(i.severity))
            for issue in issues:
                counts[issue.severity] += 1
            healthy += not any(i.severity != NOTE for i in issues)
            out.partition(check.partition, check.only, check.segments, issues)
        out.end_data_dir(info.path)
    return healthy


class _Output:
    """A table per data dir on a terminal (a row per partition, then a row per group of findings), plain
    lines in a pipe, JSON Lines with --json (every finding, then the data dir's groups). --verbose lists
    each finding under its partition instead of the groups."""

    def __init__(self, as_json: bool, tty: bool, verbose: bool = False) -> None:
        self.as_json = as_json
        self.verbose = verbose
        self.console = None
        self.table = None
        #: The current data dir's findings, grouped when it ends.
        self.pending: List[Issue] = []
        self.groups = 0
        if tty:
            self.console = console()

    def _echo(self, text: str, style: str = "") -> None:
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text(text, style=style))
        else:
            click.echo(text)

    def broker(self, broker) -> None:
        if self.as_json:
            click.echo(json.dumps({"type": "broker", **broker.to_dict()}, sort_keys=True))
            return
        if broker.node_id is None:
            return  # its data dir line says there is no readable meta.properties
        cluster = f", cluster {', '.join(broker.cluster_ids)}" if broker.cluster_ids else ""
        dirs = ", ".join(d.path for d in broker.data_dirs)
        self._echo(f"broker node {broker.node_id}{cluster}: {len(broker.data_dirs)} data dir(s): {dirs}", "bold")

    def data_dir(self, info, judged) -> None:
        locked = is_locked(info.path)
        if self.as_json:
            click.echo(json.dumps({
                "type": "datadir", "data_dir": info.path, "node_id": info.node_id, "cluster_id": info.cluster_id,
                "directory_id": info.directory_id, "meta_properties": info.meta is not None,
                "clean_shutdown_marker": clean_shutdown_marker(info.path), "locked": locked,
                "partitions": len(info.partition_dirs), "whole_data_dir": info.whole, "judged_as": judged.to_dict(),
            }, sort_keys=True))
            return
        if info.meta is not None:
            ident = f"node {info.node_id}, cluster {info.cluster_id}"
        elif info.meta_error is not None:
            ident = "meta.properties unreadable"
        else:
            ident = "no meta.properties (a KRaft broker would refuse it unformatted)"
        marker = "clean shutdown marker" if clean_shutdown_marker(info.path) else "no clean shutdown marker (recovery runs)"
        title = (f"data dir {info.path}: {ident}; {len(info.partition_dirs)} partition(s); {marker}"
                 + ("; LOCKED by a live process" if locked else ""))
        if self.console is None:
            self._echo(title)
            self._echo("  " + judged.text())
            return
        self.table = new_table(title + "\n" + judged.text(), ("partition / file", "segments", "status / finding"),
                               title_style="bold")
        self.table.columns[1].justify = "right"

    def end_data_dir(self, under: Optional[str] = None) -> None:
        """The data dir's findings grouped (after its partitions), then its table on a terminal."""
        groups = group_issues(self.pending)
        self.pending = []
        self.groups += len(groups)
        for group in groups:
            if self.as_json:
                click.echo(json.dumps({"type": "finding_group", **group.to_dict()}, sort_keys=True))
            elif not self.verbose:
                self._show(group, under)
        if self.table is not None:
            self.console.print(self.table)
            self.table = None

    def finding(self, issue: Issue, under: Optional[str] = None) -> None:
        """A finding: kept for its data dir's groups; listed now with --json and --verbose."""
        self.pending.append(issue)
        if self.as_json:
            click.echo(json.dumps({"type": "finding", **issue.to_dict()}, sort_keys=True))
        elif self.verbose:
            self._show(issue, under)

    def _show(self, item: "Issue | IssueGroup", under: Optional[str]) -> None:
        """A finding or a group of them: a table row on a terminal, else its lines."""
        if self.table is None:
            for line in item.text_lines():
                self._echo(line)
            return
        from rich.markup import escape

        style = {ERROR: "red", WARNING: "yellow", NOTE: "cyan"}[item.severity]
        where = item.where
        if isinstance(item, IssueGroup) and item.count > 1:
            where = "  " + item.subject if under and item.data_dir == under else where
        elif under and where.startswith(under + os.sep):
            where = "  " + where[len(under) + 1:]
        self.table.add_row(escape(where), "", f"[{style}]{item.severity}[/] {escape(item.check)}: "
                           f"{escape(item.message)}\n[dim]kafka:[/] {escape(item.kafka)}\n"
                           + "\n".join(f"[dim]{line[:4]}[/]{escape(line[4:])}" for line in run_lines(item.repair)))

    def partition(self, partition, only, segments: int, issues: List[Issue]) -> None:
        errors = sum(1 for i in issues if i.severity == ERROR)
        warnings = sum(1 for i in issues if i.severity == WARNING)
        notes = len(issues) - errors - warnings
        if self.as_json:
            for issue in issues:
                self.finding(issue)
            click.echo(json.dumps({
                "type": "partition", "partition": partition.path, "data_dir": data_dir_key(partition),
                "segment": only, "segments": segments, "errors": errors, "warnings": warnings, "notes": notes,
                "healthy": errors == 0 and warnings == 0,
            }, sort_keys=True))
            return
        status = "healthy" if not errors and not warnings else ", ".join(
            t for t in (f"{errors} error(s)" if errors else "", f"{warnings} warning(s)" if warnings else "") if t)
        if notes:
            status += f", {notes} note(s)"
        what = partition.path if only is None else os.path.join(partition.path, f"{only:020d}.log")
        if self.table is not None:
            from rich.markup import escape

            colour = "green" if status.startswith("healthy") else ("red" if errors else "yellow")
            self.table.add_row(escape(os.path.relpath(what, os.path.dirname(partition.path))),
                               str(segments), f"[{colour}]{status}[/]")
        else:
            self._echo(f"{what}: {segments} segment(s), {status}")
        for issue in issues:
            self.finding(issue, under=os.path.dirname(partition.path))

    def summary(self, found, healthy: int, counts: Dict[str, int]) -> None:
        self.end_data_dir()
        partitions = len(found.targets)
        if self.as_json:
            click.echo(json.dumps({
                "type": "summary", "brokers": len(found.brokers), "data_dirs": len(found.data_dirs),
                "partitions": partitions, "healthy_partitions": healthy, "errors": counts[ERROR],
                "warnings": counts[WARNING], "notes": counts[NOTE], "groups": self.groups,
                "healthy": counts[ERROR] == 0 and counts[WARNING] == 0,
            }, sort_keys=True))
            return
        verdict = ("no errors or warnings" if not counts[ERROR] and not counts[WARNING]
                   else f"{counts[ERROR]} error(s), {counts[WARNING]} warning(s)")
        grouped = f" in {self.groups} group(s)" if self.groups else ""
        self._echo(f"{partitions} partition(s) in {len(found.data_dirs)} data dir(s) of {len(found.brokers)} "
                   f"broker(s): {healthy} healthy; {verdict}"
                   + (f", {counts[NOTE]} note(s)" if counts[NOTE] else "") + grouped, "bold")
