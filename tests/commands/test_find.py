"""kstore find: the same record as a full scan, through the indexes, reading a few intervals."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.log.logdir import LookupStats, Partition, find_offset, find_timestamp
from kstore_cli.record.reader import read_batches
from kstore_cli.operations.recovery import apply_plan, plan_partition
from tests.conftest import CORPUS, load_manifest

_register_commands()
MANIFEST = load_manifest()


def full_scan(partition: Partition):
    out = []
    for segment in partition.segments:
        for batch in read_batches(segment.log):
            for record in batch.records():
                out.append((record.offset, record.timestamp, batch.size))
    return out


def first_at_offset(records, target):
    return next((r for r in records if r[0] >= target), None)


def first_at_time(records, ts):
    return next((r for r in records if r[1] >= ts), None)


def check_partition(partition: Partition, interval: int, seed: int, n: int = 40, indexed: bool = True,
                    time_bound: bool = True) -> None:
    records = full_scan(partition)
    max_batch = max(r[2] for r in records)
    rnd = random.Random(seed)
    lo, hi = records[0][0], records[-1][0]
    stamps = [r[1] for r in records if r[1] >= 0]
    for _ in range(n):
        target = rnd.randint(lo - 1, hi + 1)
        stats = LookupStats()
        got = next(find_offset(partition, target, stats), None)
        want = first_at_offset(records, target)
        assert (got[2].offset if got else None) == (want[0] if want else None), target
        if indexed and got:
            assert stats.used_index
            assert stats.log_bytes <= interval + 2 * max_batch, (target, stats.to_dict())
        if not stamps:
            continue
        ts = rnd.randint(min(stamps) - 5, max(stamps) + 5)
        stats = LookupStats()
        got = next(find_timestamp(partition, ts, stats), None)
        want = first_at_time(records, ts)
        assert (got[2].offset if got else None) == (want[0] if want else None), ts
        if indexed and got and time_bound:
            assert stats.log_bytes <= 2 * interval + 3 * max_batch, (ts, stats.to_dict())


@pytest.mark.parametrize("key", sorted(k for k in MANIFEST["partitions"] if k.startswith("logs/")))
def test_corpus_lookups_match_a_full_scan(key: str) -> None:
    interval = MANIFEST["partitions"][key]["topicConfig"].get("index.interval.bytes", 4096)
    # Legacy segments: v0 has no timestamps, so the time index cannot narrow the scan (Kafka's too).
    legacy = MANIFEST["partitions"][key].get("recordVersion") != 2 or "phases" in MANIFEST["partitions"][key]
    check_partition(Partition(str(CORPUS / key)), interval, seed=sum(map(ord, key)), time_bound=not legacy)


def make_partition(directory: Path, *, seed: int = 7, records: int = 3000, segment_bytes: int = 16384) -> None:
    """A multi-segment v2 partition with random batch sizes and jittered (non-monotonic) timestamps."""
    rnd = random.Random(seed)
    directory.mkdir(parents=True)
    offset, ts = 0, 1_700_000_000_000
    base, buf = 0, bytearray()
    while offset < records:
        n = rnd.randint(1, 12)
        specs = []
        for i in range(n):
            ts += rnd.randint(0, 40)
            specs.append(RecordSpec(offset + i, ts - rnd.randint(0, 200), b"k%d" % (offset + i),
                                    bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 120)))))
        batch = build_v2_batch(specs, codec=rnd.choice([0, 0, 1, 3]))
        if buf and len(buf) + len(batch) > segment_bytes:
            (directory / f"{base:020d}.log").write_bytes(bytes(buf))
            base, buf = offset, bytearray()
        buf += batch
        offset += n
    (directory / f"{base:020d}.log").write_bytes(bytes(buf))


def test_generated_multi_segment_partition(tmp_path: Path) -> None:
    part_dir = tmp_path / "data" / "gen-0"
    make_partition(part_dir)
    plan = plan_partition(Partition(str(part_dir)), index_interval_bytes=512)
    apply_plan(plan)
    partition = Partition(str(part_dir))
    assert len(partition.segments) > 5
    check_partition(partition, 512, seed=1, n=150)


def test_without_index_files_it_scans_and_says_so(tmp_path: Path) -> None:
    shutil.copytree(CORPUS / "logs" / "v2-gzip-0", tmp_path / "v2-gzip-0")
    for p in tmp_path.glob("v2-gzip-0/*index"):
        p.unlink()
    partition = Partition(str(tmp_path / "v2-gzip-0"))
    check_partition(partition, 100, seed=3, indexed=False)
    result = CliRunner().invoke(cli, ["find", str(tmp_path / "v2-gzip-0"), "--offset", "200"])
    assert result.exit_code == 0, result.output
    assert "scanned them instead" in result.output


def test_cli_text_and_json() -> None:
    part = str(CORPUS / "logs" / "v2-none-0")
    result = CliRunner().invoke(cli, ["find", part, "--offset", "300", "--count", "3"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("baseOffset: 300 ")
    assert [line.split()[2] for line in lines if line.startswith("| offset:")] == ["300", "301", "302"]
    assert "read" in lines[-1] and "bytes" in lines[-1]
    result = CliRunner().invoke(cli, ["find", part, "--timestamp", "1700000005000", "--json"])
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert rows[0]["type"] == "record" and rows[0]["timestamp"] >= 1700000005000
    assert rows[-1]["type"] == "lookup" and rows[-1]["used_index"] and rows[-1]["bytes_read"] < 8192


def test_usage_and_not_found() -> None:
    part = str(CORPUS / "logs" / "v2-none-0")
    assert CliRunner().invoke(cli, ["find", part]).exception.exit_status == 2
    result = CliRunner().invoke(cli, ["find", part, "--offset", "10000000"])
    assert result.exit_code == 1 and "nothing at or after offset 10000000" in result.output


def test_a_stale_untrimmed_time_index_does_not_hide_a_segment(tmp_path: Path) -> None:
    # An unclean shutdown leaves a segment's time index preallocated (zero tail) and behind its .log:
    # the broker rebuilds it on load, so the segment's largest timestamp is its batches' maximum. A
    # lookup that trusted the stale entries would skip the segment and answer from the next one.
    part_dir = tmp_path / "data" / "gen-0"
    make_partition(part_dir, seed=11)
    apply_plan(plan_partition(Partition(str(part_dir)), index_interval_bytes=512))
    partition = Partition(str(part_dir))
    first = partition.segments[0]
    records = full_scan(partition)
    seg_end = partition.segments[1].base_offset
    in_first = [r for r in records if r[0] < seg_end]
    entry_size = 12
    data = Path(first.timeindex).read_bytes()
    kept = data[:entry_size]  # one early entry, then the preallocated zeros an unclean shutdown leaves
    Path(first.timeindex).write_bytes(kept + bytes(10 * 1024 * 1024 // entry_size * entry_size - len(kept)))
    stale_ts = int.from_bytes(kept[:8], "big", signed=True)
    target = max(r[1] for r in in_first)
    assert stale_ts < target
    want = first_at_time(records, target)
    assert want[0] < seg_end
    got = next(find_timestamp(Partition(str(part_dir)), target, LookupStats()), None)
    assert got is not None and got[2].offset == want[0]
