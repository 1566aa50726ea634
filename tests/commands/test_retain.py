"""kstore retain through Click's runner, plus real processes for the lock, concurrent runs and
SIGKILL injected at every file operation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.errors import LogDirLockedError
from kstore_cli.log import fileops
from kstore_cli.log.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint
from kstore_cli.log.logdir import Partition
from kstore_cli.log.names import filename_prefix
from tests.conftest import CORPUS, ROOT, lock_held, json_lines_summary
from tests.log.partition_factory import DAY, T0, SegSpec, make_partition, tree_state
from tests.safety_data import PAUSED_RUN

_register_commands()

NOW = T0 + 30 * DAY
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def run(*args: str):
    return CliRunner().invoke(cli, ["retain", *args])


def kstore(*args: str, env: Optional[dict] = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kstore_cli", *args], capture_output=True, text=True,
                          env=env or ENV, **kw)


def two_partitions(data_dir: Path) -> None:
    """orders-0: two of four segments expire at NOW with 15 days' retention; clicks-0: everything
    expires (a roll); a leftover .deleted file from an earlier run; a log-start-offset checkpoint."""
    make_partition(data_dir, [SegSpec(ts=T0 + i * 8 * DAY, epoch=i) for i in range(4)], topic="orders",
                   log_start_offset=0)
    make_partition(data_dir, [SegSpec(ts=T0 + i * DAY, epoch=1) for i in range(3)], topic="clicks",
                   log_start_offset=0)
    (data_dir / "orders-0" / "00000000000000000099.log.deleted").write_bytes(b"old")


POLICY = ["--now", str(NOW), "--retention-ms", str(15 * DAY)]


# --------------------------------------------------------------------------- output and exit codes


def test_dry_run_lists_exactly_what_a_run_deletes_and_changes_nothing(tmp_path: Path) -> None:
    two_partitions(tmp_path / "data")
    before = tree_state(tmp_path)
    sizes = {str(p): p.stat().st_size for p in (tmp_path / "data").rglob("*") if p.is_file()}
    dry = run("--dry-run", "--json", *POLICY, str(tmp_path / "data"))
    assert dry.exit_code == 0, dry.output
    assert tree_state(tmp_path) == before and not (tmp_path / "data" / ".lock").exists()
    summary = json_lines_summary(dry.output)
    assert summary["dry_run"] is True
    planned = {f for part in summary["partitions"] for d in part["deleted"] for f in d["files"]}
    planned |= {f for part in summary["partitions"] for f in part["leftovers_removed"]}
    assert summary["bytes_freed"] == sum(sizes[f] for f in planned)
    text = run("--dry-run", *POLICY, str(tmp_path / "data"))
    for f in planned:
        assert os.path.basename(f) in text.output
    assert "would delete" in text.output and tree_state(tmp_path) == before

    real = run("--json", *POLICY, str(tmp_path / "data"))
    assert real.exit_code == 0, real.output
    after = {str(p) for p in (tmp_path / "data").rglob("*") if p.is_file()}
    assert planned and planned.isdisjoint(after)
    assert set(sizes) - after == planned
    assert json_lines_summary(real.output)["bytes_freed"] == summary["bytes_freed"]


def test_summary_quiet_and_nothing_to_do(tmp_path: Path) -> None:
    two_partitions(tmp_path / "data")
    quiet = run("--quiet", *POLICY, str(tmp_path / "data"))
    assert quiet.exit_code == 0 and quiet.output == ""
    again = run(*POLICY, str(tmp_path / "data"))
    assert again.exit_code == 0
    assert "nothing to delete" in again.output
    state = tree_state(tmp_path)
    assert run("--quiet", *POLICY, str(tmp_path / "data")).output == ""
    assert tree_state(tmp_path) == state


def test_topics_selects_the_partitions_of_a_data_dir(tmp_path: Path) -> None:
    """--topics: only clicks-0's segments go; orders-0 is not even planned; a glob matching nothing is a usage
    error (exit 2, one line)."""
    two_partitions(tmp_path / "data")
    orders = {p.name for p in (tmp_path / "data" / "orders-0").iterdir()}
    result = run("--json", "--topics", "click*", *POLICY, str(tmp_path / "data"))
    assert result.exit_code == 0, result.output
    summary = json_lines_summary(result.output)
    assert [os.path.basename(p["partition"]) for p in summary["partitions"]] == ["clicks-0"]
    assert summary["segments_deleted"] == 3
    assert {p.name for p in (tmp_path / "data" / "orders-0").iterdir()} == orders
    none = kstore("retain", "--topics", "nothing*", *POLICY, str(tmp_path / "data"))
    assert none.returncode == 2 and none.stderr.startswith("kstore: error:") and "matching --topics" in none.stderr


def test_checkpoints_and_verify_index_after_a_data_dir_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    two_partitions(data)
    result = run("--json", *POLICY, str(data))
    summary = json_lines_summary(result.output)
    by_topic = {p["topic"]: p for p in summary["partitions"]}
    assert by_topic["orders"]["segments_deleted"] == 2 and by_topic["clicks"]["rolled_segment"] is not None
    lso = read_offset_checkpoint(str(data / "log-start-offset-checkpoint"))
    for topic in ("orders", "clicks"):
        first = Partition(str(data / f"{topic}-0")).segments[0].base_offset
        assert lso[(topic, 0)] == first == by_topic[topic]["new_log_start_offset"]
        epochs = read_leader_epoch_checkpoint(str(data / f"{topic}-0" / "leader-epoch-checkpoint"))
        assert epochs[0][1] == first
    verify = CliRunner().invoke(cli, ["verify-index", str(data)])
    assert verify.exit_code == 0, verify.output
    assert not list(data.rglob("*.deleted"))


def test_kafka_corpus_data_dir_with_config_files(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs", tmp_path / "logs")
    before = tree_state(tmp_path / "logs")
    server = tmp_path / "server.properties"
    server.write_text("log.retention.hours=1\nlog.retention.minutes=5\n")
    topics = tmp_path / "topics.ini"
    topics.write_text("[v2-*]\nretention.ms = -1\n[legacy-v0]\ncleanup.policy = compact\n")
    result = run("--json", "--now", str(T0 + 365 * DAY), "--config", str(server), "--topic-config", str(topics),
                 str(tmp_path / "logs"))
    assert result.exit_code == 0, result.output
    parts = {p["topic"]: p for p in json_lines_summary(result.output)["partitions"]}
    assert parts["time-roll"]["config"]["retention.ms"] == {"value": 300000, "source": f"{server}: log.retention.minutes"}
    assert parts["time-roll"]["segments_deleted"] > 0
    after = tree_state(tmp_path / "logs")
    for topic in ("v2-none", "v2-zstd", "legacy-v0", "__consumer_offsets", "__transaction_state"):
        assert parts[topic]["segments_deleted"] == 0, topic
        assert {k: v for k, v in after.items() if k.startswith(topic + "-0/")} == \
               {k: v for k, v in before.items() if k.startswith(topic + "-0/")}
    verify = CliRunner().invoke(cli, ["verify-index", str(tmp_path / "logs")])
    assert verify.exit_code == 0, verify.output


def test_a_log_file_path_is_a_usage_error(tmp_path: Path) -> None:
    two_partitions(tmp_path / "data")
    result = run(str(tmp_path / "data" / "orders-0" / "00000000000000000000.log"))
    assert result.exit_code != 0 and result.exception.exit_status == 2


def test_a_partition_it_cannot_handle_exits_1_with_a_one_line_reason(tmp_path: Path) -> None:
    two_partitions(tmp_path / "data")
    (tmp_path / "data" / "orders-0" / "00000000000000000000.log.swap").write_bytes(b"")
    proc = kstore("retain", "--quiet", *POLICY, str(tmp_path / "data"))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "orders-0" in lines[0] and ".swap" in lines[0]
    assert proc.stdout == ""
    # The other partition was still handled.
    assert len(Partition(str(tmp_path / "data" / "clicks-0")).segments) == 1


# --------------------------------------------------------------------------- locking


def test_lock_held_by_another_process_makes_it_refuse_unless_forced(tmp_path: Path) -> None:
    data = tmp_path / "data"
    two_partitions(data)
    with lock_held(data):
        before = tree_state(data)
        in_process = run(*POLICY, str(data))
        assert isinstance(in_process.exception, LogDirLockedError)
        refused = kstore("retain", *POLICY, str(data))
        assert refused.returncode != 0
        assert "locked by a running process" in refused.stderr and "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        assert tree_state(data) == before
        forced = kstore("retain", "--force", *POLICY, str(data))
        assert forced.returncode == 0, forced.stderr
        assert tree_state(data) != before


def test_two_concurrent_runs_never_both_act(tmp_path: Path) -> None:
    data = tmp_path / "data"
    two_partitions(data)
    reference = tmp_path / "reference"
    shutil.copytree(data, reference)
    assert run(*POLICY, str(reference)).exit_code == 0
    paused, go = tmp_path / "paused", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, str(paused), str(go), "retain", "--json", *POLICY,
                              str(data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.time() + 30
        while not paused.exists():
            assert first.poll() is None and time.time() < deadline
            time.sleep(0.01)
        # The first run has planned and is about to change its first file, holding the lock.
        second = kstore("retain", "--json", *POLICY, str(data))
        assert second.returncode != 0 and "locked" in second.stderr and second.stdout == ""
        go.touch()
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        assert json_lines_summary(out)["segments_deleted"] == 5
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert tree_state(data) == tree_state(reference)


def test_simultaneous_runs_delete_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    two_partitions(data)
    reference = tmp_path / "reference"
    shutil.copytree(data, reference)
    run(*POLICY, str(reference))
    procs = [subprocess.Popen([sys.executable, "-m", "kstore_cli", "retain", "--json", *POLICY, str(data)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(2)]
    outcomes = [p.communicate(timeout=60) + (p.returncode,) for p in procs]
    acted = [json_lines_summary(out)["segments_deleted"] for out, _err, rc in outcomes if rc == 0]
    refused = [err for _out, err, rc in outcomes if rc != 0]
    assert all("locked" in err for err in refused)
    assert sorted(acted)[-1:] == [5] and sum(acted) == 5  # one acted; the other was refused or found nothing
    assert tree_state(data) == tree_state(reference)


# --------------------------------------------------------------------------- crash safety


def _count_operations(data: Path) -> int:
    fileops.arm_crash(None)
    try:
        assert run(*POLICY, str(data)).exit_code == 0
        return fileops.operation_count()
    finally:
        fileops.arm_crash(None)


def _check_crashed_state(data: Path, original: Dict[str, bytes]) -> None:
    """No surviving segment damaged; every checkpointed log start offset at or below the first
    live segment (never ahead of the files)."""
    lso_path = data / "log-start-offset-checkpoint"
    lso = read_offset_checkpoint(str(lso_path)) if lso_path.exists() else {}
    for topic in ("orders", "clicks"):
        part = Partition(str(data / f"{topic}-0"))
        for seg in part.segments:
            for path in (seg.log, seg.index, seg.timeindex):
                if path is None:
                    continue
                rel = os.path.relpath(path, data)
                if rel in original:
                    assert Path(path).read_bytes() == original[rel], f"{rel} damaged"
                else:
                    assert os.path.getsize(path) == 0, f"{rel}: only the rolled segment is new"
        assert part.segments, topic
        assert lso.get((topic, 0), 0) <= part.segments[0].base_offset, f"{topic}: checkpoint ahead of the files"
        read_leader_epoch_checkpoint(str(part.path) + "/leader-epoch-checkpoint")


def test_sigkill_at_every_file_operation_then_rerun_converges(tmp_path: Path) -> None:
    template = tmp_path / "template"
    two_partitions(template)
    original = {str(p.relative_to(template)): p.read_bytes() for p in template.rglob("*") if p.is_file()}
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    total = _count_operations(reference)
    expected = tree_state(reference)
    assert total > 40  # renames, deletes, the roll, both checkpoints: every one of them is a crash point

    dirs: List[Path] = []
    running: List[subprocess.Popen] = []
    results: Dict[int, int] = {}
    for n in range(1, total + 1):
        d = tmp_path / f"crash-{n}"
        shutil.copytree(template, d)
        dirs.append(d)
        env = dict(ENV, KSTORE_CRASH_AT=str(n))
        running.append(subprocess.Popen([sys.executable, "-m", "kstore_cli", "retain", *POLICY, str(d)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env))
        if len(running) >= 6 or n == total:
            for proc in running:
                proc.wait(timeout=120)
                results[int(proc.args[-1].rsplit("-", 1)[1])] = proc.returncode
            running = []
    assert all(rc == -9 for rc in results.values()), results  # killed at each step, none finished
    for n, d in enumerate(dirs, start=1):
        _check_crashed_state(d, original)
        rerun = run(*POLICY, str(d))
        assert rerun.exit_code == 0, (n, rerun.output)
        assert tree_state(d) == expected, f"crash at operation {n} did not converge"
    # One operation past the end: the run completes on its own.
    d = tmp_path / "past-the-end"
    shutil.copytree(template, d)
    proc = kstore("retain", *POLICY, str(d), env=dict(ENV, KSTORE_CRASH_AT=str(total + 1)))
    assert proc.returncode == 0, proc.stderr
    assert tree_state(d) == expected


def test_expected_final_state_of_the_crash_scenario(tmp_path: Path) -> None:
    """The state the crash test converges to is the right one (not just a stable one)."""
    data = tmp_path / "data"
    two_partitions(data)
    assert run(*POLICY, str(data)).exit_code == 0
    orders = Partition(str(data / "orders-0"))
    clicks = Partition(str(data / "clicks-0"))
    assert [s.base_offset for s in orders.segments] == [24, 36]
    assert [s.base_offset for s in clicks.segments] == [36]
    assert sorted(os.listdir(data / "orders-0")) == sorted(
        [filename_prefix(o) + s for o in (24, 36) for s in (".log", ".index", ".timeindex", ".snapshot")]
        + [filename_prefix(48) + ".snapshot", "leader-epoch-checkpoint"])
    assert read_offset_checkpoint(str(data / "log-start-offset-checkpoint")) == {("orders", 0): 24, ("clicks", 0): 36}
    assert read_leader_epoch_checkpoint(str(data / "clicks-0" / "leader-epoch-checkpoint")) == [(1, 36)]
    assert read_leader_epoch_checkpoint(str(data / "orders-0" / "leader-epoch-checkpoint")) == [(2, 24), (3, 36)]


@pytest.mark.parametrize("delay", [0, 3_600_000])
def test_crash_mid_run_with_a_delete_delay_still_converges(tmp_path: Path, delay: int) -> None:
    template = tmp_path / "template"
    two_partitions(template)
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    assert run(*POLICY, "--delete-delay-ms", str(delay), str(reference)).exit_code == 0
    d = tmp_path / "crashed"
    shutil.copytree(template, d)
    proc = kstore("retain", *POLICY, "--delete-delay-ms", str(delay), str(d), env=dict(ENV, KSTORE_CRASH_AT="20"))
    assert proc.returncode == -9
    assert run(*POLICY, "--delete-delay-ms", str(delay), str(d)).exit_code == 0
    assert tree_state(d) == tree_state(reference)


def test_terminal_gets_a_table_and_dry_run_notes_a_running_broker(tmp_path: Path, monkeypatch) -> None:
    from kstore_cli.commands import retain

    data = tmp_path / "data"
    two_partitions(data)
    monkeypatch.setattr(retain, "_is_tty", lambda: True)
    monkeypatch.setenv("COLUMNS", "400")  # no folding inside the table's cells
    with lock_held(data):
        result = run("--dry-run", "--delete-delay-ms", "1000", *POLICY, str(data))
    assert result.exit_code == 0, result.output
    assert "kstore retain (dry run" in result.output and "orders-0" in result.output
    assert "a real run would refuse" in result.output
    summary = json_lines_summary(run("--dry-run", "--json", "--delete-delay-ms", "1000", *POLICY, str(data)).output)
    # Nothing is freed now: the renamed files and the young leftover wait for the delay.
    assert summary["bytes_freed"] == 0
    orders = next(p for p in summary["partitions"] if p["topic"] == "orders")
    assert [os.path.basename(f) for f in orders["leftovers_kept"]] == ["00000000000000000099.log.deleted"]
    assert summary["bytes_deferred"] == sum(d["bytes"] for p in summary["partitions"] for d in p["deleted"]) > 0


# --------------------------------------------------------------------------- no destructive default (issue 16)


def test_no_policy_source_is_refused_naming_the_options(tmp_path: Path) -> None:
    """retain with no flag, no --config and no --topic-config used to apply Kafka's 7-day default:
    a cron line that lost its options wiped a standby copy. It refuses now and changes nothing."""
    two_partitions(tmp_path / "data")
    before = tree_state(tmp_path)
    for extra in ([], ["--now", str(NOW)], ["--now", str(NOW), "--log-start-offset", "3"], ["--dry-run"],
                  ["--quiet", "--delete-delay-ms", "10"]):
        proc = kstore("retain", *extra, str(tmp_path / "data"))
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("kstore: error: no retention policy given"), proc.stderr
        for option in ("--retention-ms", "--retention-bytes", "--config", "--topic-config"):
            assert option in lines[0]
        assert tree_state(tmp_path) == before, extra
    # Any one source is enough; what it does not set is Kafka's default, which deletes nothing (issue 29), and
    # the text says so.
    server = tmp_path / "server.properties"
    server.write_text("log.segment.bytes=1048576\n")
    result = run("--dry-run", "--now", str(NOW), "--config", str(server), str(tmp_path / "data"))
    assert result.exit_code == 0, result.output
    assert "retention.ms=604800000 (Kafka default, not applied without --kafka-defaults)" in result.output


def test_text_output_names_where_each_setting_came_from(tmp_path: Path) -> None:
    two_partitions(tmp_path / "data")
    topics = tmp_path / "topics.ini"
    topics.write_text("[ord*]\nretention.bytes = 123456789\n")
    result = run("--dry-run", "--now", str(NOW), "--retention-hours", "360", "--topic-config", str(topics),
                 str(tmp_path / "data"))
    assert result.exit_code == 0, result.output
    text = result.output.splitlines()
    orders = text.index(next(line for line in text if line.startswith(str(tmp_path / "data" / "orders-0") + ":")))
    assert text[orders + 1] == (f"  settings: cleanup.policy=delete (Kafka default), retention.ms=1296000000 "
                                f"(--retention-hours), retention.bytes=123456789 ({topics} [ord*])")
    clicks = text.index(next(line for line in text if line.startswith(str(tmp_path / "data" / "clicks-0") + ":")))
    assert "retention.bytes=-1 (Kafka default)" in text[clicks + 1]


# --------------------------------------------------------------------------- Kafka's defaults delete nothing (issue 29)


def test_retention_bytes_alone_deletes_nothing_by_time(tmp_path: Path) -> None:
    """--retention-bytes used to bring Kafka's 7-day retention.ms along: at NOW every clicks-0 segment and
    three of orders-0 were deleted by time, though the operator set only a size."""
    two_partitions(tmp_path / "data")
    result = run("--dry-run", "--json", "--now", str(NOW), "--retention-bytes", "10G", str(tmp_path / "data"))
    assert result.exit_code == 0, result.output
    rows = json_lines_summary(result.stdout)["partitions"]
    assert [r["segments_deleted"] for r in rows] == [0, 0]
    for row in rows:
        assert row["config"]["retention.ms"]["source"] == "Kafka default, not applied without --kafka-defaults"
        assert row["config"]["retention.bytes"] == {"value": 10 * 1024 ** 3, "source": "--retention-bytes"}
    # A size that selects segments: only the size rule deletes.
    orders = sum(p.stat().st_size for p in (tmp_path / "data" / "orders-0").glob("*.log"))
    sized = run("--dry-run", "--json", "--now", str(NOW), "--retention-bytes", str(orders // 2), str(tmp_path / "data"))
    deleted = [d for r in json_lines_summary(sized.stdout)["partitions"] for d in r["deleted"]]
    assert deleted and {d["rule"] for d in deleted} == {"retention.bytes"}
    # --kafka-defaults: the operator asks for Kafka's 7 days as well.
    both = run("--dry-run", "--json", "--now", str(NOW), "--retention-bytes", "10G", "--kafka-defaults",
               str(tmp_path / "data"))
    assert [r["segments_deleted"] for r in json_lines_summary(both.stdout)["partitions"]] == [3, 3]


def test_kafka_defaults_alone_is_a_policy_source(tmp_path: Path) -> None:
    two_partitions(tmp_path / "data")
    result = run("--dry-run", "--json", "--now", str(NOW), "--kafka-defaults", str(tmp_path / "data"))
    assert result.exit_code == 0, result.output
    rows = json_lines_summary(result.stdout)["partitions"]
    assert [r["segments_deleted"] for r in rows] == [3, 3]
    assert {d["rule"] for r in rows for d in r["deleted"]} == {"retention.ms"}
