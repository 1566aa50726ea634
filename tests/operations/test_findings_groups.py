"""operations.findings_groups: doctor's findings grouped per data dir, severity, check, topic and advice, with
partition and offset ranges, real problems first."""

from __future__ import annotations

import os

from kstore_cli.operations.findings_groups import format_ranges, group_issues, int_ranges
from kstore_cli.operations.startup import ERROR, NOTE, WARNING, Issue

D = os.path.join(os.sep, "data")


def missing(topic: str, p: int, severity: str = ERROR, node: int = 1) -> Issue:
    """An assigned-partition-missing finding as startup writes it: no partition dir, its topic partition given."""
    return Issue(severity, "assigned-partition-missing", f"the metadata assigns {topic}-{p} (replicas [{node}]) to "
                 f"node {node}", kafka="creates it empty", repair=f"put it back in a data dir of node {node}",
                 data_dir=D, topic_partition=(topic, p), gist=f"the metadata assigns these partitions to node {node}")


def in_partition(topic: str, p: int, check: str, segment: "int | None" = None, severity: str = ERROR,
                 message: str = "no .timeindex") -> Issue:
    part = os.path.join(D, f"{topic}-{p}")
    file = os.path.join(part, f"{segment:020d}.timeindex") if segment is not None else None
    return Issue(severity, check, message, kafka="ignore", repair=f"kstore rebuild-index {part}", data_dir=D,
                 partition=part, file=file)


def test_ranges():
    assert int_ranges([5, 0, 1, 2, 2]) == [(0, 2), (5, 5)]
    assert format_ranges([p for p in range(50) if p not in (28, 29)]) == "0-27,30-49"
    assert format_ranges([7]) == "7" and format_ranges([]) == ""
    assert format_ranges(range(0, 40, 2), limit=3) == "0,2,4,…"


def test_one_check_on_a_topics_partitions_is_one_group_with_ranges():
    issues = [missing("__consumer_offsets", p) for p in range(50) if p not in (28, 29)]
    [group] = group_issues(reversed(issues))
    assert group.count == 48 and group.partition_ids == [p for p in range(50) if p not in (28, 29)]
    assert group.where == f"{D}: __consumer_offsets 0-27,30-49 (48 partitions)"
    assert group.message == "the metadata assigns these partitions to node 1"  # messages differ: the gist
    assert group.text_lines() == [
        f"{D}: __consumer_offsets 0-27,30-49 (48 partitions): error: assigned-partition-missing: "
        "the metadata assigns these partitions to node 1",
        "    kafka: creates it empty", "    run:   put it back in a data dir of node 1"]
    d = group.to_dict()
    assert d["partition_ranges"] == "0-27,30-49" and d["findings"] == 48 and d["topic"] == "__consumer_offsets"


def test_a_single_finding_is_its_own_group_and_reads_as_before():
    issue = in_partition("orders", 3, "missing-timeindex", segment=100)
    [group] = group_issues([issue])
    assert group.count == 1 and group.text_lines() == issue.text_lines()
    assert group.repair == f"kstore rebuild-index {os.path.join(D, 'orders-3')}"


def test_several_topics_and_checks_and_severities_are_apart():
    issues = ([missing("orders", p) for p in range(3)] + [missing("payments", p) for p in range(2)]
              + [missing("orders", 9, WARNING)] + [in_partition("orders", 0, "index-position")]
              + [in_partition("orders", 1, "index-position")])
    groups = group_issues(issues)
    got = [(g.severity, g.check, g.topic, format_ranges(g.partition_ids)) for g in groups]
    assert sorted(got) == sorted([
        (ERROR, "assigned-partition-missing", "orders", "0-2"), (ERROR, "assigned-partition-missing", "payments", "0-1"),
        (WARNING, "assigned-partition-missing", "orders", "9"), (ERROR, "index-position", "orders", "0-1")])
    # the run: line names the group's partition dirs as one bash brace expansion
    [index] = [g for g in groups if g.check == "index-position"]
    assert index.repair == f"kstore rebuild-index {os.path.join(D, 'orders-{0..1}')}"


def test_real_problems_first_errors_then_warnings_then_notes_fewest_first():
    issues = ([missing("orders", p, NOTE) for p in range(2)] + [missing("orders", p + 10, WARNING) for p in range(4)]
              + [missing("big", p) for p in range(100)] + [in_partition("orders", 5, "log-corrupt-batch")]
              + [Issue(ERROR, "checkpoint-malformed", "bad line", kafka="fail", repair="move it", data_dir=D,
                       file=os.path.join(D, "replication-offset-checkpoint"), position=4)])
    order = [(g.severity, g.count, g.check) for g in group_issues(issues)]
    assert order == [(ERROR, 1, "checkpoint-malformed"), (ERROR, 1, "log-corrupt-batch"),
                     (ERROR, 100, "assigned-partition-missing"), (WARNING, 4, "assigned-partition-missing"),
                     (NOTE, 2, "assigned-partition-missing")]


def test_findings_on_several_segments_name_their_offsets():
    issues = [in_partition("orders", 0, "missing-timeindex", segment=s) for s in (0, 174, 175, 176, 497)]
    issues += [in_partition("orders", 1, "missing-timeindex", segment=0)]
    [group] = group_issues(issues)
    assert group.where == f"{D}: orders 0-1 at segments 0,174-176,497 (2 partitions, 6 findings)"
    assert group.message == "no .timeindex"
    # offsets the findings carry themselves
    at = [Issue(WARNING, "snapshot-corrupt", f"bad snapshot {o}", kafka="delete", repair="none needed", data_dir=D,
                partition=os.path.join(D, "orders-0"), offset=o) for o in (10, 20)]
    [group] = group_issues(at)
    assert group.where == f"{D}: orders 0 at offsets 10,20 (1 partition, 2 findings)"
    assert group.message == "bad snapshot 10 (first of 2; --verbose lists each)"


def test_different_advice_or_no_topic_partition_is_not_grouped():
    a = in_partition("orders", 0, "log-corrupt-batch")
    b = in_partition("orders", 1, "log-corrupt-batch")
    b.kafka = "truncate and delete 3 later segments"
    strays = [Issue(ERROR, "stray-directory", "cannot parse", kafka="fail", repair="move it", data_dir=D,
                    partition=os.path.join(D, name)) for name in ("lost+found", "orders-0.abc-delete")]
    groups = group_issues([a, b] + strays)
    assert len(groups) == 4 and all(g.count == 1 for g in groups)
    assert strays[1].topic_partition is None  # a -delete dir is no partition dir of the topic
