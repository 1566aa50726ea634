"""The crash matrix: every mutating command, killed (a real SIGKILL) at every one of its file
operations, then rerun.

For each scenario the command first runs uninterrupted on a copy of a realistic data dir
(tests/safety_data.py), which gives the number of file operations N (every write, fsync, rename,
unlink, truncate, mkdir and checkpoint write goes through kstore_cli.log.fileops) and the
reference final state. Then for every n in 1..N, on a fresh copy:

1. a forked child arms ``fileops.arm_crash(n)`` and runs the CLI in-process; it must die of
   SIGKILL just before its n-th operation;
2. the directory it left must be one Kafka's log loader accepts: after LogLoader's leftover rules
   (``swap.resolve_leftovers``: .cleaned rolled back, a .swap set completed) every segment reads,
   segments do not overlap, every record is there exactly once (the records are the original ones
   with some left out -- for retention and truncation one contiguous run of them -- and include every
   record the policy keeps), and no offset checkpoint
   (recovery point, high watermark, log start offset, cleaner offset) or leader epoch is past the
   log end;
3. the command is rerun normally and must exit as the reference run did and leave exactly the
   reference state (file names and bytes; quarantine dirs, named by time, are compared by content),
   with no .cleaned/.swap/.deleted/.kstore-tmp anywhere.

Plus one run armed at N + 1, which must complete on its own.

Kafka's own LogLoader (tests/oracle.py) is the last judge: a sample of each scenario's crash states
(right after evenly spread renames/unlinks; ``KSTORE_CRASH_ORACLE=all`` for every one), the states of
real processes SIGKILLed at random wall-clock times (test_sigkill_at_random_wall_clock_times;
``KSTORE_KILL_SEED``), and each uninterrupted end state (which every rerun equals byte for byte) are
kept and loaded at the end of the module in one JVM, clean and unclean: no exception, no truncation
(but of the input's own damage), and Kafka's log end and records equal to what kstore reads there.
bench/random_kill.py does the random kills by the hundred.

Adding a command is one SCENARIOS entry: a setup that damages/prepares the data dir, and argv.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli, main
from kstore_cli.errors import KstoreError
from kstore_cli.log import fileops
from kstore_cli.log import swap as swap_module
from kstore_cli.log.logdir import Partition
from kstore_cli.record.reader import read_batches
from tests.safety_data import (
    DAY,
    GZIP,
    INTERVAL,
    LEFTOVER_SUFFIXES,
    T0,
    check_loadable,
    diff,
    is_contiguous_slice,
    is_subsequence,
    loader_view,
    log_end,
    alive,
    child_pids,
    make_data_dir,
    make_many_segments,
    make_partitions_to_recover,
    records,
    tree_bytes,
)

_register_commands()

WORKERS = 2  # crashed children run this many at a time
QUARANTINE = "kstore-quarantine"
INTENT = "kstore-compact-intent.json"



@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """os.fsync as a no-op: it only matters for a power loss, which no test can make; a SIGKILL or
    an error leaves the page cache as it was either way. Every fsync is still a file operation
    (counted, a crash point, a fault point) since fileops counts before calling it."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)

# --------------------------------------------------------------------------- scenarios


def _drop_indexes(data: Path) -> None:
    make_data_dir(data)
    for p in sorted(data.glob("*-0/*")):
        if p.suffix in (".index", ".txnindex"):
            p.unlink()
        elif p.suffix == ".timeindex":
            p.write_bytes(p.read_bytes()[:-5])  # damaged: not a multiple of the entry size


def _damaged_tail(data: Path) -> None:
    """A CRC mismatch in the last batch of the second of four segments: Kafka's recovery cuts
    there and deletes the two later segments (kstore quarantines them)."""
    part = make_data_dir(data)
    seg = Partition(str(part)).segments[1]
    raw = bytearray(Path(seg.log).read_bytes())
    raw[-10] ^= 0xFF
    Path(seg.log).write_bytes(bytes(raw))


def _unclean_damaged_tail(data: Path) -> None:
    """_damaged_tail after an unclean shutdown whose recovery point is still 0: the broker's startup
    recovers every segment, and cuts at the damage."""
    _damaged_tail(data)
    from kstore_cli.log.checkpoint import format_offset_checkpoint, read_offset_checkpoint

    path = data / "recovery-point-offset-checkpoint"
    entries = read_offset_checkpoint(str(path))
    entries = {k: 0 for k in entries}
    path.write_text(format_offset_checkpoint(entries))


def _legacy(data: Path) -> None:
    make_data_dir(data, magic=1, codec=GZIP)


def _compactable(data: Path) -> None:
    """orders-0 with repeated keys and tombstones, cleanup.policy=compact (a topic config beside the data dir)."""
    make_data_dir(data, keys=7)
    (data.parent / "topics.ini").write_text("[orders]\ncleanup.policy = compact\n")


def _compactable_many(data: Path) -> None:
    """orders-0 with ten segments of repeated keys and tombstones (an aborted transaction in segment 3,
    a committed one in segment 6, producer snapshots at every segment base), cleaner checkpoint at
    segment 1, cleanup.policy=compact: with --segment-bytes 1500 the cleaner makes four groups of two or three
    segments ([0, 12, 24] [36, 52] [64, 76] [92, 104]), each swapped in on its own."""
    make_many_segments(data, segments=10, keys=9)
    (data.parent / "topics.ini").write_text("[orders]\ncleanup.policy = compact\n")


def _replica_copies(data: Path) -> None:
    """Two brokers' copies beside an empty output dir `data`: broker2 the leader at epoch 3 from offset 62
    (a batch of its own there), broker1 the old leader whose last two batches (62..71, epoch 2) diverged."""
    from kstore_cli.record.builder import RecordSpec, build_v2_batch
    from kstore_cli.log.checkpoint import format_leader_epoch_checkpoint, format_offset_checkpoint

    data.mkdir(parents=True)
    make_data_dir(data.parent / "broker1")
    shutil.copytree(data.parent / "broker1", data.parent / "broker2")
    part = data.parent / "broker2" / "orders-0"
    last = Partition(str(part)).segments[-1]
    first = next(iter(read_batches(last.log)))
    fork = first.last_offset + 1
    raw = Path(last.log).read_bytes()[:first.position + first.size] + build_v2_batch(
        [RecordSpec(fork + i, T0 + 9 * DAY + i, b"new-%d" % i, b"N" * 80, []) for i in range(4)],
        partition_leader_epoch=3)
    for f in part.iterdir():
        if f.name.startswith(Path(last.log).stem) or f.suffix == ".snapshot" and int(f.stem) > fork:
            f.unlink()
    Path(last.log).write_bytes(raw)
    epochs = (part / "leader-epoch-checkpoint").read_text().split("\n")[2:-1]
    (part / "leader-epoch-checkpoint").write_text(format_leader_epoch_checkpoint(
        [tuple(map(int, e.split())) for e in epochs] + [(3, fork)]))
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (part.parent / name).write_text(format_offset_checkpoint({("orders", 0): fork + 4, ("clicks", 0): 6}))
    from kstore_cli.operations.recovery import apply_plan, plan_partition

    apply_plan(plan_partition(Partition(str(part)), index_interval_bytes=INTERVAL))


def _repairable(data: Path) -> None:
    """What repair writes (a kill at every step): orders-0 without partition.metadata (the topic ID from a replica
    in data2, another data dir of the same node), a malformed leader-epoch-checkpoint, a dir no broker can parse."""
    make_data_dir(data)
    (data / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=kstore-safety\n")
    (data / "orders-0" / "partition.metadata").unlink()
    (data / "orders-0" / "leader-epoch-checkpoint").write_text("0\n3\n0 0\n")
    (data / "lost+found").mkdir()
    (data / "lost+found" / "#1234").write_bytes(b"inode 1234")
    replica = data.parent / "data2" / "orders-1"
    replica.mkdir(parents=True)
    shutil.copy2(data / "clicks-0" / "partition.metadata", replica / "partition.metadata")
    (data.parent / "data2" / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=kstore-safety\n")


def _merge_argv(d: Path) -> List[str]:
    return ["merge", "--output-dir", str(d), "--keep-diverged", str(d.parent / "diverged"),
            str(d.parent / "broker1"), str(d.parent / "broker2")]


NOW = T0 + 10 * DAY
MANY_SEGMENT_BYTES = "1500"


def _compact_argv(d: Path, *extra: str) -> List[str]:
    return ["compact", "--now", str(NOW), "--force-clean", "--topic-config", str(d.parent / "topics.ini"), *extra,
            str(d / "orders-0")]


@dataclass
class Scenario:
    name: str
    setup: Callable[[Path], None]  # writes the data dir at the given path
    argv: Callable[[Path], List[str]]  # the command line, given the data dir
    exit_code: int = 0
    damaged_input: bool = False  # the input has damage Kafka's recovery would cut (allowed until cut)
    min_ops: int = 10  # a floor, so that a command that stopped writing is noticed
    #: The policy removes a prefix of the log (or nothing), so every intermediate state is a
    #: contiguous run of the original records; compaction removes records anywhere.
    contiguous: bool = True
    #: The command writes new partitions into the (empty) data dir, all or nothing (merge): a crash state
    #: holds each either not at all or exactly as the uninterrupted run left it.
    new_output: bool = False
    #: Dirs beside the data dir (in the work dir) that the rerun must also leave as the uninterrupted run did.
    also_compare: Tuple[str, ...] = ()
    #: Files of the data dir whose own damage (a malformed checkpoint) is the input's: allowed while they are as it was.
    damaged_files: Tuple[str, ...] = ()
    #: False: a command whose file operations run in worker processes (recover --jobs), where a crash point
    #: kills the worker that reaches it, not the command: killed at random wall-clock times only
    #: (test_sigkill_at_random_wall_clock_times, bench/random_kill.py), the parent alone.
    every_operation: bool = True

    def __str__(self) -> str:
        return self.name


SCENARIOS = [
    Scenario("rebuild-index-missing", _drop_indexes,
             lambda d: ["rebuild-index", "--jobs", "1", "--index-interval-bytes", str(INTERVAL), str(d)],
             min_ops=40),
    Scenario("rebuild-index-truncate", _damaged_tail,
             lambda d: ["rebuild-index", "--jobs", "1", "--truncate", "--index-interval-bytes", str(INTERVAL),
                        str(d / "orders-0")],
             damaged_input=True, min_ops=15),
    Scenario("convert-v1gzip-v2zstd", _legacy,
             lambda d: ["convert-format", "--to-magic", "2", "--compression", "zstd", "--in-place",
                        "--index-interval-bytes", str(INTERVAL), str(d / "orders-0")], min_ops=40),
    Scenario("retain-time", make_data_dir,
             lambda d: ["retain", "--now", str(NOW), "--retention-ms", str(5 * DAY), str(d)], min_ops=25),
    Scenario("retain-size", make_data_dir,
             lambda d: ["retain", "--now", str(NOW), "--retention-ms", "-1", "--retention-bytes", "2000", str(d)],
             min_ops=15),
    Scenario("retain-log-start-offset", make_data_dir,
             lambda d: ["retain", "--now", str(NOW), "--retention-ms", "-1", "--log-start-offset", "40",
                        str(d / "orders-0")], min_ops=12),
    # Kafka's startup recovery offline: the same cut as rebuild-index --truncate, then the producer snapshot,
    # the roll and the recovery point.
    Scenario("recover", _unclean_damaged_tail, lambda d: ["recover", "--jobs", "1", str(d)],
             damaged_input=True, min_ops=15),
    # Five partitions (four cut) in two worker processes; the parent, which holds .lock and writes the
    # recovery point last, is the one killed (issue 29: its workers must die with it).
    Scenario("recover-jobs", make_partitions_to_recover, lambda d: ["recover", "--jobs", "2", str(d)],
             damaged_input=True, min_ops=4, every_operation=False),
    # Salvage keeps the batches after the damage too: a gap in the offsets, not a prefix.
    Scenario("salvage-in-place", _damaged_tail, lambda d: ["salvage", "--in-place", str(d / "orders-0")],
             damaged_input=True, min_ops=8, contiguous=False),
    Scenario("compact", _compactable, lambda d: _compact_argv(d), min_ops=15, contiguous=False),
    # Three groups ([0] clean, [15] dirty with the aborted transaction, [36] dirty), each swapped in
    # on its own: a crash between two swaps leaves part of the pass done, which the rerun resumes.
    Scenario("compact-multi-group", _compactable, lambda d: _compact_argv(d, "--segment-bytes", "1000"),
             min_ops=40, contiguous=False),
    # Several groups of two or three segments each: a group's swap merges segments away, so the
    # intent of a resumed pass names segments that no longer exist on their own (issue 16).
    Scenario("compact-multi-segment-groups", _compactable_many,
             lambda d: _compact_argv(d, "--segment-bytes", MANY_SEGMENT_BYTES), min_ops=60, contiguous=False),
    # partition.metadata written, leader-epoch-checkpoint rebuilt (the old one quarantined), lost+found moved out.
    Scenario("repair", _repairable, lambda d: ["repair", str(d), str(d.parent / "data2")], min_ops=10,
             also_compare=("data2",), damaged_files=("orders-0/leader-epoch-checkpoint",)),
    # Built in data.kstore-tmp (and diverged.kstore-tmp) and renamed into place: all or nothing; exit 1
    # since broker1's last batches are left out (kept aside).
    Scenario("merge", _replica_copies, _merge_argv, exit_code=1, min_ops=40, new_output=True,
             also_compare=("diverged",)),
]


# --------------------------------------------------------------------------- running


def _run_in_process(argv: List[str]) -> int:
    fileops.arm_crash(None)  # disarmed; operation_count() and journal then describe this run
    result = CliRunner().invoke(cli, argv)
    if isinstance(result.exception, KstoreError):
        return int(result.exception.exit_status)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code


def _fork_crashed(argv: List[str], crash_at: int) -> int:
    """Fork a child that runs the CLI with a crash armed at operation crash_at; returns its pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            fileops.arm_crash(crash_at)  # the default hook: os.kill(getpid(), SIGKILL)
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os._exit(100 + code)  # "finished on its own" (the crash never came)
    return pid


def _wait(pid: int) -> Tuple[bool, int]:
    """(killed by SIGKILL, exit code if it finished)."""
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return os.WTERMSIG(status) == signal.SIGKILL, -os.WTERMSIG(status)
    return False, os.WEXITSTATUS(status) - 100


def _quarantined(root: Path) -> Dict[str, bytes]:
    """{"<partition>/<file name>": bytes} of everything quarantined under root, over every time-stamped
    run dir (the manifest aside: it names the run). A file quarantined twice for one partition (a killed
    run's dir and the rerun's holding the same bytes) fails: a rerun finishes the killed run's quarantine."""
    out: Dict[str, bytes] = {}
    base = root / QUARANTINE
    for p in sorted(base.rglob("*")):
        if p.is_file() and p.name != "kstore-quarantine.json":
            key = f"{p.relative_to(base).parts[0]}/{p.name}"  # <partition>/<run dir>/<file>
            assert key not in out, f"{key} quarantined twice"
            out[key] = p.read_bytes()
    return out


@dataclass
class Reference:
    ops: int
    data: Dict[str, bytes]
    quarantine: Dict[str, bytes]
    original: Dict[str, list] = field(default_factory=dict)  # partition -> records before
    kept: Dict[str, list] = field(default_factory=dict)  # partition -> records after
    also: Dict[str, bytes] = field(default_factory=dict)  # the scenario's also_compare dirs' files


def _partitions(data: Path) -> List[Path]:
    return sorted(p for p in data.iterdir() if p.is_dir() and "-" in p.name)


def _reference(sc: Scenario, template: Path, tmp: Path) -> Reference:
    work = tmp / "reference"
    shutil.copytree(template, work)
    data = work / "data"
    before = {p.name: records(p, tolerate_damage=sc.damaged_input) for p in _partitions(data)}
    fileops.arm_crash(None)
    code = _run_in_process(sc.argv(data))
    ops = fileops.operation_count()
    _journals[sc.name] = list(fileops.journal)
    assert code == sc.exit_code, f"{sc}: the uninterrupted run exited {code}"
    assert ops >= sc.min_ops, f"{sc}: only {ops} file operations"
    problems = check_loadable(data)
    assert not problems, f"{sc}: the uninterrupted result does not load: {problems}"
    ref = Reference(ops, tree_bytes(data), _quarantined(work))
    ref.original = before
    ref.kept = {p.name: records(p) for p in _partitions(data)}
    ref.also = _also(sc, work)
    assert ref.data != tree_bytes(template / "data"), f"{sc}: the command changed nothing"
    return ref


def _also(sc: Scenario, work: Path) -> Dict[str, bytes]:
    return {f"{d}/{k}": v for d in sc.also_compare for k, v in tree_bytes(work / d).items()}


def _check_crashed(sc: Scenario, n: int, work: Path, template: Path, ref: Reference, scratch: Path) -> None:
    data = work / "data"
    view = loader_view(data, scratch)
    problems = check_loadable(view)
    if sc.damaged_input:  # the input's own damage is allowed while its .log is still untouched
        original = tree_bytes(template / "data")
        problems = [p for p in problems if not (
            "unreadable segment" in p and any(
                (data / rel).read_bytes() == raw for rel, raw in original.items()
                if rel.endswith(".log") and (data / rel).exists() and os.path.basename(rel) in p))]
    for rel in sc.damaged_files:  # the input's own damage, still untouched
        if (data / rel).exists() and (data / rel).read_bytes() == (template / "data" / rel).read_bytes():
            problems = [p for p in problems if f"/{rel} " not in p]
    assert not problems, f"{sc}: crash before operation {n} ({fileops_journal_hint(sc, n)}) leaves: {problems}"
    for part in _partitions(view):
        got = records(part, tolerate_damage=sc.damaged_input)
        assert len({r[0] for r in got}) == len(got), f"{sc} crash {n}: {part.name} has duplicate offsets"
        if sc.new_output and part.name not in ref.original:
            assert got == ref.kept[part.name], f"{sc} crash {n}: {part.name} is there, but not whole"
            continue
        whole, kept = ref.original[part.name], ref.kept[part.name]
        within = is_contiguous_slice if sc.contiguous else is_subsequence
        assert within(got, whole), f"{sc} crash {n}: {part.name} records are not {within.__name__} of the originals"
        assert within(kept, got), f"{sc} crash {n}: {part.name} lost records the policy keeps"


_journals: Dict[str, List[tuple]] = {}


def fileops_journal_hint(sc: Scenario, n: int) -> str:
    journal = _journals.get(sc.name, [])
    if 0 < n <= len(journal):
        kind, path = journal[n - 1]
        return f"{kind} {os.path.basename(path.split(' -> ')[0])}"
    return "?"


def _check_rerun(sc: Scenario, n: int, work: Path, ref: Reference) -> None:
    """Rerun and check that it converges to the uninterrupted result."""
    data = work / "data"
    code = _run_in_process(sc.argv(data))
    assert code == sc.exit_code, f"{sc}: the rerun after a crash at {n} exited {code}"
    where = f"{sc}: crash before operation {n} ({fileops_journal_hint(sc, n)})"
    stray = [str(p.relative_to(work)) for p in work.rglob("*") if p.name.endswith(LEFTOVER_SUFFIXES)]
    assert not stray, f"{where}: leftovers survive the rerun: {stray}"
    state = tree_bytes(data)
    assert state == ref.data, f"{where}: the rerun does not converge: {diff(state, ref.data)}"
    also = _also(sc, work)
    assert also == ref.also, f"{where}: the rerun does not converge: {diff(also, ref.also)}"
    if ref.quarantine:
        got = _quarantined(work)
        assert set(ref.quarantine) == set(got), f"{where}: quarantine lacks {set(ref.quarantine) - set(got)}, " \
                                                f"has more: {set(got) - set(ref.quarantine)}"
        assert all(got[k] == v for k, v in ref.quarantine.items()), f"{where}: quarantined bytes differ"
    for part in _partitions(data):
        assert records(part) == ref.kept[part.name], f"{where}: {part.name} records differ"




# --------------------------------------------------------------------------- Kafka's loader as the judge


@dataclass
class KafkaCase:
    """A directory Kafka's LogLoader must load, and what kstore says it then holds, per partition."""

    label: str
    data: Path  # a kept copy of the data dir, exactly as the crash (or the run) left it
    #: partition name -> (records (offset, key hex, value hex) of the data records, log end offset,
    #: the input's damage still there (Kafka's recovery cuts it: unclean load only))
    expected: Dict[str, Tuple[list, int, bool]] = field(default_factory=dict)


def _valid_prefix(part: Path) -> Tuple[list, int, bool]:
    """kstore's reading of a resolved partition as a broker would have it: the data records up to
    the first unreadable batch (recovery deletes everything after it), the log end, whether it was cut."""
    out: list = []
    segments = Partition(str(part)).segments
    end = segments[0].base_offset if segments else 0
    for seg in segments:
        end = max(end, seg.base_offset)
        try:
            for batch in read_batches(seg.log):
                batch.ensure_valid()  # LogSegment.recover checks every batch's CRC
                if not batch.is_control:
                    out.extend((r.offset, None if r.key is None else bytes(r.key).hex(),
                                None if r.value is None else bytes(r.value).hex()) for r in batch.records())
                end = batch.last_offset + 1
        except KstoreError:
            return out, end, True
    return out, end, False


def kafka_case(label: str, data: Path, keep: Path, scratch: Path, input_data: Optional[Path] = None) -> KafkaCase:
    """Keep a copy of `data` under `keep` and record what kstore's resolution of it holds (for the
    partitions the command changed, when `input_data` is the data dir before it ran)."""
    shutil.copytree(data, keep, ignore=shutil.ignore_patterns(".lock"))
    case = KafkaCase(label, keep)
    view = loader_view(keep, scratch)
    same_root = input_data is not None and all(
        (f.is_file() and (input_data / f.name).is_file() and f.read_bytes() == (input_data / f.name).read_bytes())
        for f in keep.iterdir() if not f.is_dir())
    for part in _partitions(view):
        if same_root and tree_bytes(keep / part.name) == tree_bytes(input_data / part.name):
            continue  # untouched: the input itself
        case.expected[part.name] = _valid_prefix(part)
    shutil.rmtree(scratch)
    return case


def kafka_load_problems(oracle, cases: List[KafkaCase]) -> Tuple[List[str], int]:
    """Load every partition of every case with Kafka's LogLoader, clean and unclean (a damaged one
    unclean only), in ONE JVM; returns the problems (an exception, a truncation kstore did not
    expect, another log end, other records) and the number of loads."""
    work = Path(tempfile.mkdtemp(prefix="kstore-kafka-cases-"))
    calls, meta = [], []
    try:
        for i, case in enumerate(cases):
            for name, (want, end, damaged) in sorted(case.expected.items()):
                for clean in ((False,) if damaged else (True, False)):
                    parent = work / f"c{len(calls)}"
                    parent.mkdir()
                    for f in case.data.iterdir():
                        if f.is_file() and "checkpoint" in f.name:
                            shutil.copy2(f, parent / f.name)
                    shutil.copytree(case.data / name, parent / name)
                    calls.append(("load-log", [str(parent / name), "--clean" if clean else "--unclean", "--no-lookup"]))
                    meta.append((case, name, clean, want, end, damaged))
        results = oracle.run_many(calls) if calls else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    problems = []
    for (case, name, clean, want, end, damaged), res in zip(meta, results):
        where = f"{case.label}: {name} ({'clean' if clean else 'unclean'} load)"
        summary = res.of_type("summary")
        if res.rc != 0 or len(summary) != 1 or not summary[0].get("ok"):
            problems.append(f"{where}: Kafka could not load it: {res.stdout[-800:]}")
            continue
        summary = summary[0]
        # The harness collects Kafka's log lines over the whole JVM: this load's name its directory.
        mine = f"dir={Path(res.args[0]).parent}]"
        truncated = [t for t in summary.get("truncations") or [] if not isinstance(t, str) or mine in t]
        if truncated and not damaged:
            problems.append(f"{where}: Kafka truncated {truncated}")
        if summary.get("log_end_offset") != end:
            problems.append(f"{where}: Kafka's log end {summary.get('log_end_offset')}, kstore's {end}")
        # Every record of the segments (a log start offset inside a segment hides none of them).
        got = [(r["offset"], r.get("key"), r.get("value")) for r in res.of_type("record") if not r.get("controlType")]
        if got != want:
            gone = sorted({r[0] for r in want} - {r[0] for r in got})[:10]
            extra = sorted({r[0] for r in got} - {r[0] for r in want})[:10]
            problems.append(f"{where}: Kafka reads {len(got)} records, kstore {len(want)} (missing offsets {gone}, "
                            f"extra {extra})")
    return problems, len(calls)


#: Crash states kept for Kafka's loader (test_kafka_loads_every_kept_state, at the end of the module).
_KAFKA_CASES: List[KafkaCase] = []
#: Per scenario, this many crash states (right after evenly spread renames) go to Kafka's loader;
#: KSTORE_CRASH_ORACLE=all sends every one (minutes of JVM time: ~0.3 s per load).
KAFKA_STATES_PER_SCENARIO = 2


def _kafka_sample(sc: Scenario) -> set:
    """The crash points whose states Kafka's loader checks: just after evenly spread renames (the
    operations that change what a loader sees), or every one with KSTORE_CRASH_ORACLE=all."""
    journal = _journals[sc.name]
    if os.environ.get("KSTORE_CRASH_ORACLE") == "all":
        return set(range(1, len(journal) + 1))
    renames = [i + 1 for i, (kind, _path) in enumerate(journal, 1) if kind in ("rename", "truncate", "unlink")]
    k = min(KAFKA_STATES_PER_SCENARIO, len(renames))
    return {renames[round(j * (len(renames) - 1) / max(k - 1, 1))] for j in range(k)}


@pytest.fixture(scope="module")
def kept_states(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kafka-cases")


@pytest.mark.parametrize("sc", [s for s in SCENARIOS if s.every_operation], ids=str)
def test_sigkill_at_every_file_operation(sc: Scenario, tmp_path: Path, capsys,
                                        kept_states: Path) -> None:
    started = time.perf_counter()
    template = tmp_path / "template"
    sc.setup(template / "data")
    ref = _reference(sc, template, tmp_path)
    _KAFKA_CASES.append(kafka_case(f"{sc}: uninterrupted (every rerun's end state)", tmp_path / "reference" / "data",
                                   kept_states / f"{sc}-reference", tmp_path / "scratch", template / "data"))
    sample = _kafka_sample(sc)
    killed = 0
    for first in range(1, ref.ops + 1, WORKERS):
        batch = list(range(first, min(first + WORKERS, ref.ops + 1)))
        works = {}
        pids = {}
        for n in batch:
            work = tmp_path / f"crash-{n}"
            shutil.copytree(template, work)
            works[n] = work
            pids[n] = _fork_crashed(sc.argv(work / "data"), n)
        for n in batch:
            was_killed, code = _wait(pids[n])
            assert was_killed, f"{sc}: armed at operation {n} of {ref.ops}, the run was not killed (exit {code})"
            killed += 1
        for n in batch:
            _check_crashed(sc, n, works[n], template, ref, tmp_path / "view")
            if n in sample:
                _KAFKA_CASES.append(kafka_case(f"{sc}: crash before operation {n} ({fileops_journal_hint(sc, n)})",
                                               works[n] / "data", kept_states / f"{sc}-{n}", tmp_path / "scratch",
                                               template / "data"))
            _check_rerun(sc, n, works[n], ref)
            shutil.rmtree(works[n])
    # Armed one past the end: the run finishes by itself, with the reference result.
    work = tmp_path / "past-the-end"
    shutil.copytree(template, work)
    was_killed, code = _wait(_fork_crashed(sc.argv(work / "data"), ref.ops + 1))
    assert not was_killed and code == sc.exit_code
    assert tree_bytes(work / "data") == ref.data
    assert killed == ref.ops
    with capsys.disabled():
        print(f"\n[crash-matrix] {sc}: {ref.ops} operation indexes, each killed and rerun, "
              f"{time.perf_counter() - started:.1f} s", end="")


@pytest.mark.parametrize("name", ["compact", "compact-multi-group"])
def test_compact_killed_between_swap_and_checkpoint_converges(name: str, tmp_path: Path) -> None:
    """Killed after its (last) swap and before cleaner-offset-checkpoint: the rerun finishes that pass
    from its intent (advances the checkpoint, removes the intent) instead of cleaning the range a
    second time, so it converges to the uninterrupted result; a broker meeting the intent ignores it."""
    sc = next(s for s in SCENARIOS if s.name == name)
    sc.setup(tmp_path / "template" / "data")
    ref = _reference(sc, tmp_path / "template", tmp_path)
    journal = _journals[sc.name]
    swapped = max(i for i, (kind, path) in enumerate(journal, 1) if kind == "rename" and ".cleaned -> " in path)
    checkpoint = max(i for i, (kind, path) in enumerate(journal, 1)
                     if kind == "rename" and path.endswith(" -> " + str(tmp_path / "reference" / "data" /
                                                                         "cleaner-offset-checkpoint")))
    assert checkpoint > swapped + 5
    for n in (swapped + 1, checkpoint - 1, checkpoint):
        work = tmp_path / f"crashed-{n}"
        shutil.copytree(tmp_path / "template", work)
        assert _wait(_fork_crashed(sc.argv(work / "data"), n))[0]
        part = work / "data" / "orders-0"
        assert (part / INTENT).exists(), f"crash at {n}: no intent"
        swap_module.resolve_leftovers(str(part))  # what a broker does at startup: the intent stays, unharmed
        assert (part / INTENT).exists()
        assert not check_loadable(work / "data")
        assert _run_in_process(sc.argv(work / "data")) == sc.exit_code
        assert tree_bytes(work / "data") == ref.data, f"crash at {n}: {diff(tree_bytes(work / 'data'), ref.data)}"


def test_compact_resumes_after_a_multi_segment_group_is_swapped_in(tmp_path: Path) -> None:
    """Issue 16: killed after the first group ([0, 12, 24] merged into one segment) is swapped in,
    every rerun failed with ``internal error: KeyError: 12`` (the intent names segments merged
    away). The rerun resumes at the second group and ends where an uninterrupted run does."""
    sc = next(s for s in SCENARIOS if s.name == "compact-multi-segment-groups")
    template = tmp_path / "template"
    sc.setup(template / "data")
    ref = _reference(sc, template, tmp_path)
    journal = _journals[sc.name]
    second = [i for i, (kind, path) in enumerate(journal, 1) if kind == "create" and path.endswith(".log.cleaned")][1]
    work = tmp_path / "crashed"
    shutil.copytree(template, work)
    assert _wait(_fork_crashed(sc.argv(work / "data"), second))[0]
    part = work / "data" / "orders-0"
    assert (part / INTENT).exists() and not (part / "00000000000000000012.log").exists()
    result = CliRunner().invoke(cli, sc.argv(work / "data"))
    assert result.exit_code == 0, result.output
    assert tree_bytes(work / "data") == ref.data, diff(tree_bytes(work / "data"), ref.data)


def test_compact_with_a_full_offset_map_killed_at_every_operation(tmp_path: Path) -> None:
    """Two groups and a pass ended early by a full offset map (inside a batch), so the resumed pass
    must rebuild exactly the same map. Such a pass leaves work for the next run: killed after its
    intent is removed (the pass complete), the rerun is the next pass, as after an uninterrupted run."""
    sc = Scenario("compact-map-full", _compactable,
                  lambda d: _compact_argv(d, "--segment-bytes", "1000", "--dedupe-buffer-bytes", "144"),
                  min_ops=25, contiguous=False)
    template = tmp_path / "template"
    sc.setup(template / "data")
    ref = _reference(sc, template, tmp_path)
    journal = _journals[sc.name]
    assert sum(1 for kind, path in journal if kind == "rename" and ".log.cleaned -> " in path) == 2
    intent_gone = max(i for i, (kind, path) in enumerate(journal, 1) if kind == "unlink" and path.endswith(INTENT))
    again = tmp_path / "again"
    shutil.copytree(tmp_path / "reference", again)
    assert _run_in_process(sc.argv(again / "data")) == 0
    next_pass = tree_bytes(again / "data")
    assert next_pass != ref.data
    for n in range(1, ref.ops + 1):
        work = tmp_path / f"crash-{n}"
        shutil.copytree(template, work)
        assert _wait(_fork_crashed(sc.argv(work / "data"), n))[0]
        _check_crashed(sc, n, work, template, ref, tmp_path / "view")
        assert _run_in_process(sc.argv(work / "data")) == 0
        stray = [p.name for p in work.rglob("*") if p.name.endswith(LEFTOVER_SUFFIXES) or p.name == INTENT]
        assert not stray, f"crash at {n}: leftovers survive the rerun: {stray}"
        want = ref.data if n <= intent_gone else next_pass
        state = tree_bytes(work / "data")
        assert state == want, f"crash at {n} ({fileops_journal_hint(sc, n)}): {diff(state, want)}"
        shutil.rmtree(work)


def test_the_matrix_knows_every_mutating_command() -> None:
    """A new mutating command must get a scenario: every command that takes the data dir lock
    (the mark of a command that changes files) appears in SCENARIOS."""
    from kstore_cli.commands import COMMANDS

    mutating = set()
    for command in COMMANDS:
        if any(p.name == "force" for p in command.params):
            mutating.add(command.name)
    covered = {sc.argv(Path("/x"))[0] for sc in SCENARIOS}
    # restore undoes a cut (more records after it than before: not this matrix's invariant); it is
    # killed before each of its file operations in tests/commands/test_restore.py.
    covered.add("restore")
    # (merge takes no lock: it only reads its inputs, and writes a new output dir; it has a scenario too)
    assert mutating <= covered, f"mutating commands without a crash scenario: {mutating - covered}"


# --------------------------------------------------------------------------- regressions the matrix found


def test_truncate_brings_the_data_dir_checkpoints_down_to_the_new_log_end(tmp_path: Path) -> None:
    """rebuild-index --truncate used to leave recovery point and high watermark at the old log end
    (72), past the files; LogLoader clamps them, and a cleaner offset past the end is reset."""
    from kstore_cli.log.checkpoint import read_leader_epoch_checkpoint, read_offset_checkpoint

    data = tmp_path / "data"
    _damaged_tail(data)
    cleaner = data / "cleaner-offset-checkpoint"
    cleaner.write_text(cleaner.read_text().replace("orders 0 15", "orders 0 60"))
    assert _run_in_process(SCENARIOS[1].argv(data)) == 0
    end = 30  # the valid part of the second segment ends there (after the abort marker at 29)
    assert log_end(data / "orders-0") == end
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        assert read_offset_checkpoint(str(data / name)) == {("orders", 0): end, ("clicks", 0): 6}, name
    assert read_offset_checkpoint(str(cleaner)) == {("clicks", 0): 0}
    assert read_offset_checkpoint(str(data / "log-start-offset-checkpoint"))[("orders", 0)] == 0
    assert read_leader_epoch_checkpoint(data / "orders-0" / "leader-epoch-checkpoint") == [(0, 0), (1, 15)]
    assert check_loadable(data) == []


def test_a_broker_completing_an_interrupted_conversion_keeps_the_producer_snapshots(tmp_path: Path) -> None:
    """LogLoader deletes every file in a completed swap's range, snapshots included; convert-format
    used to leave them out of the swap, so a crash after the .swap renames lost them."""
    sc = next(s for s in SCENARIOS if s.name.startswith("convert"))
    template = tmp_path / "template"
    sc.setup(template / "data")
    ref = _reference(sc, template, tmp_path)
    journal = _journals[sc.name]
    n = max(i for i, (kind, path) in enumerate(journal, 1) if kind == "rename" and path.endswith(".swap")) + 1
    work = tmp_path / "crashed"
    shutil.copytree(template, work)
    assert _wait(_fork_crashed(sc.argv(work / "data"), n))[0]
    part = work / "data" / "orders-0"
    assert sorted(p.name for p in part.glob("*.snapshot.swap")) == [
        "00000000000000000013.snapshot.swap", "00000000000000000026.snapshot.swap", "00000000000000000039.snapshot.swap"]
    report = swap_module.resolve_leftovers(str(part))  # what a broker does at startup
    assert report.outcome == "completed"
    assert {k: v for k, v in tree_bytes(work / "data").items()} == ref.data


def test_replace_segments_refuses_an_extra_file_it_cannot_swap(tmp_path: Path) -> None:
    part = make_data_dir(tmp_path / "data", second_partition=False)
    (part / "00000000000000000000.log.cleaned").write_bytes((part / "00000000000000000000.log").read_bytes())
    segments = Partition(str(part)).segments[:1]
    with pytest.raises(KstoreError, match="to swap in"):
        swap_module.replace_segments(str(part), [0], segments, extra=[str(part / "snapshot.cleaned")])
    with pytest.raises(KstoreError, match="to swap in"):
        swap_module.replace_segments(str(part), [0], segments, extra=[str(part / "00000000000000000015.snapshot")])
    assert (part / "00000000000000000000.log.cleaned").exists() and (part / "00000000000000000000.log").exists()


# --------------------------------------------------------------------------- random wall-clock kills


ROOT = Path(__file__).resolve().parent.parent
#: Kills per scenario in the suite (bench/random_kill.py runs hundreds); KSTORE_KILL_SEED picks the delays.
RANDOM_KILLS = {"compact-multi-segment-groups": 4, "convert-v1gzip-v2zstd": 1, "retain-time": 1,
                "rebuild-index-truncate": 1, "merge": 1,
                "recover-jobs": 2}


def kill_at_random(argv: List[str], scratch: Path, delay: float) -> Tuple[bool, float]:
    """Run ``python -m kstore_cli argv`` as a real process (fsync and all) and SIGKILL it `delay`
    seconds after its first file operation (it waits there until told to go, so the start-up does not
    eat the delay). Returns (killed, seconds from its first operation to its end). The process alone is
    killed, not its group: its worker processes (recover --jobs) must die with it, within 2 s, else
    AssertionError (after killing them)."""
    from tests.safety_data import PAUSED_RUN

    scratch.mkdir(parents=True, exist_ok=True)
    ready, go = scratch / "ready", scratch / "go"
    for f in (ready, go):
        if f.exists():
            f.unlink()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(fileops.CRASH_ENV, None)
    proc = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, str(ready), str(go), *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None:  # finished without a file operation
            return False, 0.0
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"{argv}: no first file operation within 60 s")
        time.sleep(0.002)
    go.touch()
    started = time.monotonic()
    try:
        code = proc.wait(timeout=delay)
        return False, time.monotonic() - started  # it finished before the kill came
    except subprocess.TimeoutExpired:
        workers = child_pids(proc.pid)
        proc.send_signal(signal.SIGKILL)
    code = proc.wait()
    ended = time.monotonic() - started
    deadline = time.monotonic() + 2
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.005)
    survivors = [pid for pid in workers if alive(pid)]
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not survivors, f"{argv}: worker processes {survivors} outlived their SIGKILLed parent by 2 s"
    return code == -signal.SIGKILL, ended


@pytest.mark.parametrize("name", sorted(RANDOM_KILLS))
def test_sigkill_at_random_wall_clock_times(name: str, tmp_path: Path, kept_states: Path, capsys) -> None:
    """Real processes killed at random times (not at a chosen operation: mid-write, mid-fsync, between
    a rename and the next), each state checked as in the matrix and kept for Kafka's loader, then the
    rerun must equal the uninterrupted run byte for byte."""
    import random

    sc = next(s for s in SCENARIOS if s.name == name)
    seed = int(os.environ.get("KSTORE_KILL_SEED", "16"))
    rng = random.Random(f"{seed}-{name}")
    template = tmp_path / "template"
    sc.setup(template / "data")
    ref = _reference(sc, template, tmp_path)
    # How long a real run takes from its first operation: the delays are drawn below that.
    timing = tmp_path / "timing"
    shutil.copytree(template, timing)
    killed, duration = kill_at_random(sc.argv(timing / "data"), tmp_path / "flags", 120.0)
    assert not killed and tree_bytes(timing / "data") == ref.data
    outcomes: List[bool] = []
    i = 0
    # A delay past the run's end (its duration varies with the machine's load) is no kill: draw again.
    while sum(outcomes) < RANDOM_KILLS[name] and i < 4 * RANDOM_KILLS[name]:
        i += 1
        delay = rng.uniform(0, duration)
        work = tmp_path / f"kill-{i}"
        shutil.copytree(template, work)
        killed, _ = kill_at_random(sc.argv(work / "data"), tmp_path / "flags", delay)
        outcomes.append(killed)
        label = f"{sc}: killed {delay * 1000:.1f} ms into the run (seed {seed})"
        try:
            _check_crashed(sc, 0, work, template, ref, tmp_path / "view")
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
        _KAFKA_CASES.append(kafka_case(label, work / "data", kept_states / f"{sc}-random-{i}", tmp_path / "scratch",
                                       template / "data"))
        try:
            _check_rerun(sc, 0, work, ref)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from None
        shutil.rmtree(work)
    with capsys.disabled():
        print(f"\n[crash-matrix] {sc}: {sum(outcomes)} random kills in a {duration * 1000:.0f} ms run "
              f"({len(outcomes) - sum(outcomes)} came after its end), seed {seed}", end="")


# --------------------------------------------------------------------------- Kafka's loader over the kept states
# (last in the module: the tests above keep the states, this one loads them all in one JVM)


def test_kafka_loads_every_kept_state(oracle, capsys) -> None:
    """Every kept crash state (a sample of each scenario's matrix, see _kafka_sample) and every
    uninterrupted end state (which every rerun must equal byte for byte) loads with Kafka's own
    LogLoader, clean and unclean: no exception, no truncation (but of the input's own damage), the
    log end and exactly the records kstore's reading of the directory says."""
    if not _KAFKA_CASES:
        pytest.skip("no states kept: this test checks what the crash tests above it keep (run the module)")
    started = time.perf_counter()
    problems, loads = kafka_load_problems(oracle, _KAFKA_CASES)
    assert not problems, "\n".join(problems[:20])
    with capsys.disabled():
        print(f"\n[crash-matrix] Kafka's LogLoader: {len(_KAFKA_CASES)} states, {loads} loads, "
              f"{time.perf_counter() - started:.1f} s", end="")
