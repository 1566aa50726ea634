"""``kstore doctor``'s grouped findings (issue 33, "Noise"): on a partial data dir the same check on many
partitions of a topic is one line with partition ranges and a count, the real problems come first, and
``--verbose`` (and ``--json``'s finding lines) still list every finding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from kstore_cli.cli import cli
from tests.commands.test_doctor import LOGS, _cluster_log, make_data_dir

MISSING = "assigned-partition-missing"


def _run(*args: str):
    result = CliRunner().invoke(cli, ["doctor", *args], catch_exceptions=False)
    return result.exit_code, result.output


def partial_data_dir(root: Path) -> Path:
    """A KRaft data dir whose metadata log assigns 50 __consumer_offsets and 67 orders partitions to node 1 (their
    only in-sync replica), of which only __consumer_offsets-28 and -29 are here (115 missing, as the issue saw);
    and two real problems: a malformed replication-offset-checkpoint and __consumer_offsets-28's malformed
    partition.metadata."""
    from kstore_cli.log.logdir import Partition
    from kstore_cli.operations.rebuild import rebuild_partition
    from tests.make_metadata_cluster import uid

    d1 = uid(201)
    data = make_data_dir(root, partitions=(), directory_id=d1)
    parts = [(t, p, [1], [1], [d1]) for t, n in (("__consumer_offsets", 50), ("orders", 67)) for p in range(n)]
    ids = _cluster_log(data, [(1, [d1])], parts, topics=(("__consumer_offsets", 1), ("orders", 2)))
    rebuild_partition(Partition(str(data / "__cluster_metadata-0")))  # its indexes, as the controller has them
    for p in (28, 29):
        shutil.copytree(LOGS / "v2-none-0", data / f"__consumer_offsets-{p}")
        (data / f"__consumer_offsets-{p}" / "partition.metadata").write_text(
            f"version: 0\ntopic_id: {ids['__consumer_offsets']}")
    (data / "__consumer_offsets-28" / "partition.metadata").write_text("version: 0\ntopic_id: not-a-uuid")
    (data / "replication-offset-checkpoint").write_text("0\n1\nv2-none 0 notanumber\n")
    return data


def test_a_partial_data_dir_prints_a_handful_of_lines_real_problems_first(tmp_path):
    data = partial_data_dir(tmp_path)
    code, text = _run(str(data))
    assert code == 1
    lines = text.splitlines()
    # broker, data dir and its "judged as" line, 3 partitions, 2 real problems and 2 groups (3 lines each), the
    # summary: 19, not 391
    assert len(lines) == 19, text
    assert lines[2].lstrip().startswith("judged as a KRaft broker, Kafka 3.9 or newer, from: "), text
    heads = [line for line in lines if ": error: " in line]
    assert [h.split(": error: ")[1].split(":")[0] for h in heads] == [
        "checkpoint-malformed", "partition-metadata-malformed", MISSING, MISSING]
    assert heads[0].startswith(f"{data / 'replication-offset-checkpoint'} at byte 4: error: ")
    assert heads[1].startswith(f"{data / '__consumer_offsets-28' / 'partition.metadata'}")
    assert heads[2].startswith(f"{data}: __consumer_offsets 0-27,30-49 (48 partitions): error: {MISSING}: ")
    assert heads[3].startswith(f"{data}: orders 0-66 (67 partitions): error: {MISSING}: ")
    assert "assigns these partitions (topic ID " in heads[2] and "their only in-sync replica" in heads[2]
    # kafka: and run: once per group
    assert text.count("    kafka: ") == 4 and text.count("    run:   ") == 4
    assert lines[-1].endswith("117 error(s), 0 warning(s) in 4 group(s)")


def test_verbose_lists_every_finding_under_its_partition(tmp_path):
    data = partial_data_dir(tmp_path)
    code, text = _run("--verbose", str(data))
    assert code == 1
    heads = [line for line in text.splitlines() if f": error: {MISSING}: " in line]
    assert len(heads) == 115 and text.count("    kafka: ") == 117
    named = {h.split(" assigns ")[1].split(" ")[0] for h in heads}
    assert named == {f"__consumer_offsets-{p}" for p in range(50) if p not in (28, 29)} | {
        f"orders-{p}" for p in range(67)}
    assert "(48 partitions)" not in text
    assert text.splitlines()[-1].endswith("117 error(s), 0 warning(s) in 4 group(s)")


def test_json_keeps_every_finding_line_and_adds_group_lines(tmp_path):
    data = partial_data_dir(tmp_path)
    code, out = _run("--json", str(data))
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    findings = [r for r in records if r["type"] == "finding"]
    assert len(findings) == 117 and sum(f["check"] == MISSING for f in findings) == 115
    f = next(f for f in findings if f["check"] == MISSING and f["topic"] == "orders" and f["partition_id"] == 5)
    assert f["partition"] is None and "orders-5" in f["message"]
    groups = [r for r in records if r["type"] == "finding_group"]
    assert [(g["check"], g["topic"], g["findings"]) for g in groups] == [
        ("checkpoint-malformed", None, 1), ("partition-metadata-malformed", "__consumer_offsets", 1),
        (MISSING, "__consumer_offsets", 48), (MISSING, "orders", 67)]
    offsets = groups[2]
    assert offsets["partition_ranges"] == "0-27,30-49" and offsets["partition_ids"] == [
        p for p in range(50) if p not in (28, 29)]
    assert offsets["severity"] == "error" and offsets["data_dir"] == str(data) and offsets["offsets"] == []
    # the groups close their data dir's lines; the summary stays last and counts both
    assert records.index(groups[0]) > max(i for i, r in enumerate(records) if r["type"] == "partition")
    assert records[-1]["type"] == "summary" and records[-1]["errors"] == 117 and records[-1]["groups"] == 4


def test_terminal_table_has_a_row_per_group(tmp_path, monkeypatch):
    from kstore_cli.commands import doctor as doctor_command

    monkeypatch.setattr(doctor_command, "_is_tty", lambda: True)
    monkeypatch.setattr(doctor_command, "byte_progress", lambda *a, **k: (None, None))
    monkeypatch.setenv("COLUMNS", "250")
    data = partial_data_dir(tmp_path)
    code, text = _run(str(data))
    assert code == 1
    assert text.count("kafka:") == 4
    assert "│   __consumer_offsets 0-27,30-49 (48 partitions)" in text and "│   orders 0-66 (67 partitions)" in text
    assert text.index("checkpoint-malformed") < text.index("partition-metadata-malformed") < text.index(MISSING)


def test_segment_findings_of_one_partition_group_with_their_offsets(tmp_path):
    """A check on several segments of a partition is one line naming the segments (base offsets); the run: line
    names the partition dir once."""
    data = make_data_dir(tmp_path, partitions=("v2-none-0", "transactional-0"))
    for part in ("v2-none-0", "transactional-0"):
        for timeindex in (data / part).glob("*.timeindex"):
            timeindex.unlink()
    code, text = _run(str(data))
    assert code == 1
    heads = [line for line in text.splitlines() if "missing-timeindex" in line]
    assert heads == [line for line in heads if "(1 partition, " in line] and len(heads) == 2, text
    assert f"{data}: v2-none 0 at segments 0,174,327,497 (1 partition, 4 findings): error: missing-timeindex" in text
    assert f"    run:   kstore rebuild-index {data / 'v2-none-0'}\n" in text
    code, text = _run("--verbose", str(data))
    assert text.count("missing-timeindex: ") == 4 + len(list((LOGS / "transactional-0").glob("*.timeindex")))


def test_verify_index_groups_the_same_way(tmp_path):
    """verify-index's text: the data dir's 115 missing partitions as two lines, a partition's per-segment findings
    as one; --verbose and --json one line per finding."""
    data = partial_data_dir(tmp_path / "partial")
    result = CliRunner().invoke(cli, ["verify-index", str(data)], catch_exceptions=False)
    assert result.exit_code == 1
    heads = [line for line in result.output.splitlines() if f": {MISSING}: " in line]
    assert [h.split(": error:")[0] for h in heads] == [f"{data}: __consumer_offsets 0-27,30-49 (48 partitions)",
                                                       f"{data}: orders 0-66 (67 partitions)"]
    result = CliRunner().invoke(cli, ["verify-index", "--verbose", str(data)], catch_exceptions=False)
    assert result.output.count(f": {MISSING}: ") == 115
    result = CliRunner().invoke(cli, ["verify-index", "--json", str(data)], catch_exceptions=False)
    assert sum(json.loads(line).get("check") == MISSING for line in result.output.splitlines()) == 115

    data = make_data_dir(tmp_path / "segments", partitions=("v2-none-0",))
    for timeindex in (data / "v2-none-0").glob("*.timeindex"):
        timeindex.unlink()
    result = CliRunner().invoke(cli, ["verify-index", str(data)], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.output.count("missing-timeindex") == 1, result.output
    assert f"{data}: v2-none 0 at segments 0,174,327,497 (1 partition, 4 findings): error: missing-timeindex: " \
        in result.output
    result = CliRunner().invoke(cli, ["verify-index", "--verbose", str(data)], catch_exceptions=False)
    assert result.output.count("missing-timeindex") == 4
