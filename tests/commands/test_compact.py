"""kstore compact: the four Kafka-written cleaner cases pass by pass through the CLI, dry run, JSON,
the lock, and SIGKILL at every file operation of a run followed by a rerun."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.errors import LogDirLockedError, UsageError
from kstore_cli.log import fileops
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.log.checkpoint import format_offset_checkpoint, read_offset_checkpoint
from kstore_cli.log.index import OffsetIndex, TimeIndex
from kstore_cli.log.logdir import Partition
from kstore_cli.log.names import filename_prefix
from kstore_cli.record.reader import read_batches
from kstore_cli.log.swap import resolve_leftovers
from tests.conftest import GOLDEN, ROOT, lock_held, json_lines_summary
from tests.log.partition_factory import tree_state

_register_commands()

CLEANER = GOLDEN / "cleaner"
CASES = sorted(p.name for p in CLEANER.iterdir() if (p / "cleaner-notes.txt").exists())
STAGES = {1: ("0-input", "1-after-pass1"), 2: ("1b-before-pass2", "2-after-pass2"), 3: ("2b-before-pass3", "3-after-pass3")}
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def run(*args: str):
    return CliRunner().invoke(cli, ["compact", *args])


def kstore(*args: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kstore_cli", *args], capture_output=True, text=True, env=env or ENV)


# --------------------------------------------------------------------------- Kafka's own cleaner output


def notes(case: str) -> Dict[int, dict]:
    """cleaner-notes.txt: per pass, the input mtimes and Cleaner.clean()'s arguments and stats."""
    out: Dict[int, dict] = {}
    for line in (CLEANER / case / "cleaner-notes.txt").read_text().splitlines():
        m = re.match(r"pass(\d) input: segment mtimes \[(.*)\]", line)
        if m:
            out.setdefault(int(m[1]), {})["mtimes"] = {
                int(a): int(b) for a, b in (item.split("@") for item in m[2].split(", "))}
            continue
        m = re.match(r"pass(\d): (.*)", line)
        if m:
            fields = m[2].replace("-> ", "").split()
            out.setdefault(int(m[1]), {}).update({k: int(v) for k, v in (f.split("=") for f in fields)})
    return out


def batch_view(path: Path) -> List[tuple]:
    """Every batch's header fields (not crc/size/attributes bits beyond the flags) and its records."""
    out = []
    for b in read_batches(str(path)):
        records = [(r.offset, r.timestamp, r.key, r.value,
                    [] if r.is_legacy else [(h.key, h.value) for h in r.headers]) for r in b.records()]
        header = (b.magic, b.base_offset if b.magic >= 2 else None, b.last_offset, b.count, b.compression,
                  b.timestamp_type, b.max_timestamp, b.producer_id, b.producer_epoch, b.base_sequence,
                  b.partition_leader_epoch, b.is_transactional, b.is_control, b.delete_horizon_ms)
        out.append((header, records, None if b.compression else bytes(b.buffer)))
    return out


def batch_starting_at(log: Path) -> Dict[int, int]:
    """position -> (last offset) of each batch of a .log, to compare index positions across codecs."""
    return {b.position: b.last_offset for b in read_batches(str(log))}


def prepare(tmp: Path, case: str, n: int) -> Tuple[Path, dict]:
    """The stage Kafka's pass n ran on, in a data dir, with the mtimes and checkpoint of the notes."""
    info = notes(case)[n]
    data = tmp / f"pass{n}"
    part = data / f"{case}-0"
    shutil.copytree(CLEANER / case / STAGES[n][0], part)
    for base, ms in info["mtimes"].items():
        for f in part.glob(f"{filename_prefix(base)}.*"):
            os.utime(f, ns=(ms * 1_000_000, ms * 1_000_000))
    if n > 1:
        (data / "cleaner-offset-checkpoint").write_text(
            format_offset_checkpoint({(case, 0): info["firstDirtyOffset"]}))
    topics = data.parent / f"{case}-topics.ini"
    # The harness's topic config (fixtures/kafka-golden/README.md, "Cleaner cases").
    extra = "segment.bytes = 200\n" if case == "clean-legacy-v1" else ""
    topics.write_text(f"[{case}]\ncleanup.policy = compact\nindex.interval.bytes = 64\n{extra}")
    # Its Cleaner: 64 KiB I/O buffers (log.cleaner.io.buffer.size / threads / 2), 1 MiB max.
    server = data.parent / "server.properties"
    server.write_text("log.cleaner.io.buffer.size = 131072\nmessage.max.bytes = 1048576\n")
    return part, info


def compare_stage(ours: Path, theirs: Path) -> None:
    active = max(Partition(str(theirs)).segments, key=lambda s: s.base_offset).base_offset
    names_ours = {p.name for p in ours.iterdir()}
    names_theirs = {p.name for p in theirs.iterdir()}
    # The empty active segment's index files come from the harness reopening the log, not the cleaner.
    reopen = {f"{filename_prefix(active)}.index", f"{filename_prefix(active)}.timeindex"}
    assert names_theirs - names_ours <= reopen, names_theirs ^ names_ours
    assert names_ours - names_theirs == set(), names_ours - names_theirs
    for name in sorted(names_ours & names_theirs):
        a, b = ours / name, theirs / name
        if name.endswith(".log"):
            got, want = batch_view(a), batch_view(b)
            assert [(x[0], x[1]) for x in got] == [(y[0], y[1]) for y in want], name
            for x, y in zip(got, want):
                if y[2] is not None:
                    assert x[2] == y[2], f"{name}: uncompressed batch ending at {y[0][2]} differs in bytes"
            if all(y[2] is not None for y in want):
                assert a.read_bytes() == b.read_bytes(), name
        elif name.endswith((".index", ".timeindex")) and not all(
                y[2] is not None for y in batch_view(theirs / (name.split(".")[0] + ".log"))):
            # Recompressed batches have other sizes: entries must name the same batches.
            log = name.split(".")[0] + ".log"
            if name.endswith(".index"):
                pos_a, pos_b = batch_starting_at(ours / log), batch_starting_at(theirs / log)
                got = [(o, pos_a[p]) for o, p in OffsetIndex(str(a))]
                want = [(o, pos_b[p]) for o, p in OffsetIndex(str(b))]
            else:
                got, want = list(TimeIndex(str(a))), list(TimeIndex(str(b)))
            assert got == want, name
        else:
            assert a.read_bytes() == b.read_bytes(), f"{name}: not byte-identical"


@pytest.mark.parametrize("case", CASES)
def test_golden_cleaner_cases_pass_by_pass(tmp_path: Path, case: str) -> None:
    for n in (1, 2, 3):
        part, info = prepare(tmp_path, case, n)
        result = run("--now", str(info["now"]), "--force-clean", "--delete-retention-ms", "1000",
                     "--min-compaction-lag-ms", "0", "--max-index-bytes", "1048576",
                     "--dedupe-buffer-bytes", str(1 << 20),
                     "--topic-config", str(part.parent.parent / f"{case}-topics.ini"), "--config", str(part.parent.parent / "server.properties"), "--json", str(part))
        assert result.exit_code == 0, result.output
        row = json_lines_summary(result.output)["partitions"][0]
        assert row["cleaned"], row
        # Cleaner.clean()'s arguments, return value and CleanerStats, as Kafka reported them.
        assert row["first_dirty_offset"] == info["firstDirtyOffset"]
        assert row["first_uncleanable_offset"] == info["firstUncleanableOffset"]
        assert row["end_offset"] == info["endOffset"]
        stats = row["stats"]
        for key in ("bytesRead", "mapBytesRead", "mapMessagesRead", "messagesRead", "invalidMessagesRead",
                    "messagesWritten"):
            ours = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), key)  # --json keys are snake_case
            assert stats[ours] == info[key], (n, key, stats[ours], info[key])
        if case != "clean-codecs":  # recompressed batches differ in size only
            assert stats["bytes_written"] == info["bytesWritten"]
        compare_stage(part, CLEANER / case / STAGES[n][1])
        assert read_offset_checkpoint(str(part.parent / "cleaner-offset-checkpoint")) == {(case, 0): info["endOffset"]}
        # The cleaned segment keeps the mtime of the last segment of its group.
        group_last = max(b for b in info["mtimes"] if b < info["endOffset"])
        cleaned = [s for s in Partition(str(part)).segments if s.base_offset < info["endOffset"]][-1]
        assert os.stat(cleaned.log).st_mtime_ns // 1_000_000 == info["mtimes"][group_last]


# --------------------------------------------------------------------------- a generated partition


T = 1_700_000_000_000


def write_partition(data: Path, *, topic: str = "changelog") -> Path:
    """Three segments of overwrites, tombstones and a gzip batch, and an empty active segment."""
    part = data / f"{topic}-0"
    part.mkdir(parents=True)
    offset = 0
    segments = []
    for s in range(3):
        base = offset
        out = b""
        for b in range(3):
            recs = []
            for i in range(3):
                key = f"k{(offset * 7) % 5}".encode()
                value = None if offset % 6 == 5 else f"v{offset}".encode()
                recs.append(RecordSpec(offset, T + offset * 10, key, value))
                offset += 1
            out += build_v2_batch(recs, codec=1 if (s, b) == (1, 1) else 0, partition_leader_epoch=0)
        (part / f"{filename_prefix(base)}.log").write_bytes(out)
        segments.append(base)
    (part / f"{filename_prefix(offset)}.log").write_bytes(b"")
    for i, base in enumerate(segments):
        os.utime(part / f"{filename_prefix(base)}.log", ns=((T + i) * 1_000_000,) * 2)
    return part


CLOCK = ["--now", str(T + 10_000), "--delete-retention-ms", "1000"]
#: The generated topics have no cleanup.policy source: Kafka's default (delete) applies, so a
#: partition named on the command line needs --policy compact.
NOW = [*CLOCK, "--policy", "compact"]


def test_dry_run_changes_nothing_and_reports_what_a_run_removes(tmp_path: Path) -> None:
    part = write_partition(tmp_path / "data")
    before = tree_state(tmp_path)
    dry = run(*NOW, "--dry-run", "--json", str(part))
    assert dry.exit_code == 0, dry.output
    assert tree_state(tmp_path) == before
    real = run(*NOW, "--json", str(part))
    assert real.exit_code == 0, real.output
    d, r = json_lines_summary(dry.output), json_lines_summary(real.output)
    assert d["dry_run"] and not r["dry_run"]
    for key in ("records_removed", "bytes_before", "bytes_after"):
        assert d[key] == r[key] and r[key] > 0
    assert d["partitions"][0]["stats"] == r["partitions"][0]["stats"]
    assert r["bytes_after"] == sum(os.path.getsize(s.log) for s in Partition(str(part)).segments)
    assert r["bytes_before"] - r["bytes_after"] > 0


def test_json_and_text_output_and_policy_of_a_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_partition(data, topic="orders")
    write_partition(data, topic="__consumer_offsets")
    result = run(*CLOCK, "--json", str(data))
    assert result.exit_code == 0, result.output
    out = json_lines_summary(result.output)
    rows = {Path(r["partition"]).name: r for r in out["partitions"]}
    assert rows["orders-0"]["skipped"].startswith("cleanup.policy=delete")
    assert rows["__consumer_offsets-0"]["cleaned"] and rows["__consumer_offsets-0"]["policy"] == "compact"
    assert out["partitions_cleaned"] == 1
    text = run(*CLOCK, str(data))
    assert text.exit_code == 0
    assert "orders-0: skipped" in text.output
    assert "__consumer_offsets-0: not cleaned" in text.output  # already clean: nothing dirty
    topics = tmp_path / "topics.ini"
    topics.write_text("[orders]\ncleanup.policy = compact,delete\nretention.ms = -1\n")
    again = run(*CLOCK, "--topic-config", str(topics), "--json", str(data))
    rows = {Path(r["partition"]).name: r for r in json_lines_summary(again.output)["partitions"]}
    assert rows["orders-0"]["cleaned"]


def test_not_eligible_below_the_dirty_ratio_unless_forced(tmp_path: Path) -> None:
    part = write_partition(tmp_path / "data")
    result = run(*NOW, "--min-cleanable-dirty-ratio", "1.0", "--json", str(part))
    row = json_lines_summary(result.output)["partitions"][0]
    assert not row["cleaned"] and "min.cleanable.dirty.ratio" in row["reason"]
    assert not (tmp_path / "data" / "cleaner-offset-checkpoint").exists()
    forced = run(*NOW, "--min-cleanable-dirty-ratio", "1.0", "--force-clean", "--json", str(part))
    assert json_lines_summary(forced.output)["partitions"][0]["cleaned"]


def test_lock_held_by_another_process_makes_it_refuse(tmp_path: Path) -> None:
    data = tmp_path / "data"
    part = write_partition(data)
    with lock_held(data):
        before = tree_state(data)
        assert isinstance(run(*NOW, str(part)).exception, LogDirLockedError)
        refused = kstore("compact", *NOW, str(part))
        assert refused.returncode != 0
        assert "locked by a running process" in refused.stderr and "Traceback" not in refused.stderr
        assert tree_state(data) == before
        dry = run(*NOW, "--dry-run", "--json", str(part))
        assert "a real run would refuse" in " ".join(json_lines_summary(dry.output)["partitions"][0]["notes"])


def test_a_file_path_and_a_tiny_dedupe_buffer_are_usage_errors(tmp_path: Path) -> None:
    part = write_partition(tmp_path / "data")
    assert isinstance(run(str(part / "00000000000000000000.log")).exception, UsageError)
    assert isinstance(run("--dedupe-buffer-bytes", "24", "--force-clean", str(part)).exception, UsageError)
    proc = kstore("compact", "--dedupe-buffer-bytes", "24", "--force-clean", str(part))
    assert proc.returncode == 2 and proc.stderr.startswith("kstore: error:") and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- SIGKILL at every operation


def records(part: Path) -> List[tuple]:
    return [(r.offset, r.key, r.value) for s in Partition(str(part)).segments for b in read_batches(s.log)
            for r in b.records()]


def _count_operations(part: Path) -> int:
    fileops.arm_crash(None)
    try:
        assert run(*NOW, str(part)).exit_code == 0
        return fileops.operation_count()
    finally:
        fileops.arm_crash(None)


def test_sigkill_at_every_file_operation_then_rerun_converges(tmp_path: Path) -> None:
    template = tmp_path / "template"
    write_partition(template)
    original = records(template / "changelog-0")
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    total = _count_operations(reference / "changelog-0")
    cleaned = records(reference / "changelog-0")
    expected = tree_state(reference)
    assert cleaned != original and total >= 15  # creates, fsyncs, renames, unlinks, utimes, the checkpoint

    results: Dict[int, int] = {}
    running: List[subprocess.Popen] = []
    for n in range(1, total + 1):
        d = tmp_path / f"crash-{n}"
        shutil.copytree(template, d)
        running.append(subprocess.Popen([sys.executable, "-m", "kstore_cli", "compact", *NOW, str(d / "changelog-0")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        env=dict(ENV, KSTORE_CRASH_AT=str(n))))
        if len(running) >= 6 or n == total:
            for proc in running:
                proc.wait(timeout=120)
                results[int(Path(proc.args[-1]).parent.name.rsplit("-", 1)[1])] = proc.returncode
            running = []
    assert all(rc == -9 for rc in results.values()), results
    for n in range(1, total + 1):
        d = tmp_path / f"crash-{n}"
        part = d / "changelog-0"
        # What a broker loading the directory would see: the old segments or the new, never a mix.
        probe = tmp_path / f"probe-{n}"
        shutil.copytree(d, probe)
        resolve_leftovers(str(probe / "changelog-0"))
        seen = records(probe / "changelog-0")
        assert seen in (original, cleaned), f"crash at operation {n}: a mix of old and new segments"
        rerun = run(*NOW, str(part))
        assert rerun.exit_code == 0, (n, rerun.output)
        assert tree_state(d) == expected, f"crash at operation {n} did not converge"
        leftovers = [p.name for p in part.iterdir() if p.name.endswith((".cleaned", ".swap", ".deleted"))]
        assert not leftovers, (n, leftovers)


# --------------------------------------------------------------------------- the pass intent


class _Stop(BaseException):
    """Stands for a SIGKILL in-process: nothing catches it, so no cleanup runs."""


def _intent_case(tmp_path: Path, *extra: str) -> Tuple[Path, List[str]]:
    from tests.safety_data import DAY, T0, make_data_dir

    data = tmp_path / "data"
    make_data_dir(data, keys=7)
    topics = tmp_path / "topics.ini"
    topics.write_text("[orders]\ncleanup.policy = compact\n")
    return data, ["--now", str(T0 + 10 * DAY), "--force-clean", "--json", "--topic-config", str(topics), *extra,
                  str(data / "orders-0")]


def _stopped_after_last_swap(data: Path, argv: List[str]) -> None:
    """Run compact and stop it (as a SIGKILL would) just before cleaner-offset-checkpoint is written."""
    probe = data.parent / "probe"
    shutil.copytree(data, probe / "data")
    fileops.arm_crash(None)
    assert run(*argv[:-1], str(probe / "data" / "orders-0")).exit_code == 0
    n = next(i for i, (kind, path) in enumerate(fileops.journal, 1)
             if kind == "write" and "cleaner-offset-checkpoint" in path)

    def stop(_n: int, _kind: str, _path: str) -> None:
        raise _Stop()

    fileops.arm_crash(n, stop)
    try:
        with pytest.raises(_Stop):
            CliRunner().invoke(cli, ["compact", *argv], catch_exceptions=False)
    finally:
        fileops.arm_crash(None)
    assert (data / "orders-0" / "kstore-compact-intent.json").exists()


def test_an_intent_the_directory_no_longer_fits_is_dropped_for_a_normal_pass(tmp_path: Path) -> None:
    data, argv = _intent_case(tmp_path)
    _stopped_after_last_swap(data, argv)
    checkpoint = data / "cleaner-offset-checkpoint"
    entries = read_offset_checkpoint(str(checkpoint))
    entries[("orders", 0)] = 36  # a broker's cleaner moved it since
    checkpoint.write_text(format_offset_checkpoint(entries))
    result = run(*argv)
    assert result.exit_code == 0, result.output
    row = json_lines_summary(result.output)["partitions"][0]
    assert any("is stale" in note for note in row["notes"]), row["notes"]
    assert row["first_dirty_offset"] == 36 and row["cleaned"]
    assert not (data / "orders-0" / "kstore-compact-intent.json").exists()


def test_an_intent_after_the_last_swap_only_advances_the_checkpoint(tmp_path: Path) -> None:
    data, argv = _intent_case(tmp_path, "--segment-bytes", "1000")
    reference = tmp_path / "reference"
    shutil.copytree(data, reference / "data")
    assert run(*argv[:-1], str(reference / "data" / "orders-0")).exit_code == 0
    _stopped_after_last_swap(data, argv)
    assert read_offset_checkpoint(str(data / "cleaner-offset-checkpoint"))[("orders", 0)] == 15
    assert resolve_leftovers(str(data / "orders-0")).outcome is None  # a broker ignores the intent
    dry = run("--dry-run", *argv)
    assert "an interrupted pass would be finished first" in dry.output
    result = run(*argv)
    row = json_lines_summary(result.output)["partitions"][0]
    assert result.exit_code == 0 and not row["cleaned"] and row["end_offset"] == 57
    assert any("finished the pass interrupted after its swap" in note for note in row["notes"]), row["notes"]
    assert tree_state(data) == tree_state(reference / "data")


def test_an_unreadable_intent_is_removed(tmp_path: Path) -> None:
    data, argv = _intent_case(tmp_path)
    (data / "orders-0" / "kstore-compact-intent.json").write_text("{not json")
    result = run(*argv)
    assert result.exit_code == 0, result.output
    row = json_lines_summary(result.output)["partitions"][0]
    assert row["cleaned"] and any("unreadable" in note for note in row["notes"])
    assert not (data / "orders-0" / "kstore-compact-intent.json").exists()


# --------------------------------------------------------------------------- no destructive default (issue 16)


def test_a_partition_whose_policy_has_no_compact_is_refused_unless_policy_compact(tmp_path: Path) -> None:
    """`compact PARTITION_DIR` used to compact a delete-policy topic (Kafka's default) without a
    word: every older record per key gone. It refuses now, naming where the policy came from and
    the option, and changes nothing (a dry run refuses too: it would show a pass that must not run)."""
    part = write_partition(tmp_path / "data")
    topics = tmp_path / "topics.ini"
    topics.write_text("[change*]\ncleanup.policy = delete\n")
    server = tmp_path / "server.properties"
    server.write_text("log.cleanup.policy=delete\n")
    before = tree_state(tmp_path)
    for extra, source in (([], "Kafka default"), (["--dry-run"], "Kafka default"),
                          (["--topic-config", str(topics)], f"{topics} [change*]"),
                          (["--config", str(server)], f"{server}: log.cleanup.policy")):
        proc = kstore("compact", *CLOCK, *extra, str(part))
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"kstore: error: {part}: "), proc.stderr
        assert f"cleanup.policy=delete ({source})" in lines[0] and "--policy compact" in lines[0]
        assert tree_state(tmp_path) == before, extra
    forced = run(*CLOCK, "--policy", "compact", "--topic-config", str(topics), str(part))
    assert forced.exit_code == 0, forced.output
    assert "cleaned [" in forced.output and "cleanup.policy=compact (--policy)" in forced.output
    assert tree_state(tmp_path) != before


def test_text_output_names_where_each_setting_came_from(tmp_path: Path) -> None:
    part = write_partition(tmp_path / "data")
    topics = tmp_path / "topics.ini"
    topics.write_text("[changelog]\ncleanup.policy = compact\nmin.cleanable.dirty.ratio = 0.1\n")
    server = tmp_path / "server.properties"
    server.write_text("log.cleaner.delete.retention.ms=5000\nlog.cleaner.dedupe.buffer.size=1000000\n")
    result = run("--now", str(T + 10_000), "--segment-bytes", "100000", "--topic-config", str(topics),
                 "--config", str(server), str(part))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"{part}: cleaned [")
    settings = lines[1]
    assert settings.startswith("  settings: ")
    for piece in (f"cleanup.policy=compact ({topics} [changelog])",
                  f"min.cleanable.dirty.ratio=0.1 ({topics} [changelog])",
                  f"delete.retention.ms=5000 ({server}: log.cleaner.delete.retention.ms)",
                  "segment.bytes=100000 (--segment-bytes)",
                  "min.compaction.lag.ms=0 (Kafka default)",
                  f"log.cleaner.dedupe.buffer.size=1000000 ({server}: log.cleaner.dedupe.buffer.size)"):
        assert piece in settings, (piece, settings)
    quiet_json = json_lines_summary(run("--now", str(T + 10_000), "--policy", "compact", "--json", str(part)).output)
    assert quiet_json["partitions"][0]["settings"]["cleanup.policy"] == {"value": "compact", "source": "--policy"}


def test_a_batch_whose_crc_fails_is_refused_not_laundered(tmp_path: Path) -> None:
    """Kafka's Cleaner does not check CRCs: it would rewrite a damaged batch with a fresh, valid one. kstore
    refuses the partition instead (one line naming file and byte, exit 1) and changes nothing, dry run or not."""
    from tests.conftest import CORPUS, ROOT

    part = tmp_path / "data" / "transactional-0"
    shutil.copytree(CORPUS / "logs" / "transactional-0", part)
    for p in part.iterdir():
        p.chmod(0o644)
    log = part / "00000000000000000000.log"
    data = bytearray(log.read_bytes())
    data[200:203] = b"\xff\xff\xff"  # inside the first batch's compressed records
    log.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in part.iterdir()}
    for extra in ([], ["--dry-run"]):
        out = subprocess.run([sys.executable, "-m", "kstore_cli", "compact", "--policy", "compact", "--force-clean",
                              *extra, str(part)], capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 1, out.stdout + out.stderr
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and f"{log} at byte 0: Record is corrupt" in lines[0] and "not cleaned" in lines[0]
        assert {p.name: p.read_bytes() for p in part.iterdir() if p.name != ".lock"} == before


# --------------------------------------------------------------------------- LogConfig's ConfigDef (issue 29)


def test_a_cleanup_policy_kafka_rejects_is_refused_not_compacted(tmp_path: Path) -> None:
    """cleanup.policy=Compact used to be lowercased and the topic compacted; Kafka's LogConfig rejects it
    (ValidList.in is case-sensitive)."""
    part = write_partition(tmp_path / "data")
    topics = tmp_path / "topics.ini"
    topics.write_text("[changelog]\ncleanup.policy = Compact\n")
    before = tree_state(tmp_path)
    proc = kstore("compact", *CLOCK, "--topic-config", str(topics), str(tmp_path / "data"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (f"kstore: error: Invalid value Compact for configuration cleanup.policy: String must be "
                           f"one of: compact, delete ({topics} [changelog])\n")
    assert tree_state(tmp_path) == before and part.is_dir()


def test_an_invalid_flag_is_a_usage_error_with_kafkas_message(tmp_path: Path) -> None:
    write_partition(tmp_path / "data")
    before = tree_state(tmp_path)
    proc = kstore("compact", "--policy", "compact", "--max-compaction-lag-ms", "0", *CLOCK,
                  str(tmp_path / "data" / "changelog-0"))
    assert proc.returncode == 2
    assert proc.stderr == ("kstore: error: Invalid value 0 for configuration max.compaction.lag.ms: Value must be "
                           "at least 1 (--max-compaction-lag-ms)\n")
    assert tree_state(tmp_path) == before


def test_a_cleaner_setting_kafka_rejects_is_a_usage_error_with_kafkas_message(tmp_path: Path) -> None:
    """log.cleaner.io.buffer.size=-1 used to be taken (Python's int(), then a 1-byte buffer); KafkaConfig's
    ConfigDef rejects it (CleanerConfig: atLeast(0))."""
    write_partition(tmp_path / "data")
    server = tmp_path / "server.properties"
    server.write_text("log.cleaner.io.buffer.size = -1\n")
    before = tree_state(tmp_path)
    proc = kstore("compact", "--policy", "compact", *CLOCK, "--config", str(server),
                  str(tmp_path / "data" / "changelog-0"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == ("kstore: error: Invalid value -1 for configuration log.cleaner.io.buffer.size: Value must "
                           f"be at least 0 ({server}: log.cleaner.io.buffer.size)\n")
    assert tree_state(tmp_path) == before
