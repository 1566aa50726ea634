"""kstore replicas and merge on copies of a partition written by Kafka's own leader and follower code
(append-log): a diverged old leader (unclean election), a truncated follower, a leader whose oldest
segment retention removed. The divergence offset is Kafka's truncation rule's; the merge keeps every offset
of the surviving lineage once, reports the diverged ones, and Kafka loads it without truncating."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.errors import KstoreError
from kstore_cli.record.reader import read_batches
from kstore_cli.cluster.replicas import compare, end_offset_for

_register_commands()
T = 1_700_000_000_000
CONFIG = ["--config", "segment.bytes=1500", "--clock", str(T), "--checkpoints"]


def _batch(epoch: int, tag: str, n: int = 3) -> dict:
    return {"op": "leader", "leaderEpoch": epoch,
            "records": [{"timestamp": T + i, "key": f"{tag}-{i}", "value": f"{tag}-value-{i}" * 4} for i in range(n)]}


def _batches(part: Path) -> list:
    out = []
    for log in sorted(part.glob("*.log")):
        data = log.read_bytes()
        out.extend((b.base_offset, b.last_offset, data[b.position:b.position + b.size]) for b in read_batches(str(log)))
    return out


@pytest.fixture(scope="module")
def copies(oracle, tmp_path_factory):
    root = tmp_path_factory.mktemp("replicas")
    common = [_batch(0, f"c{i}") for i in range(12)]
    res = oracle.append_log(root / "common" / "t-0", common, *CONFIG)
    assert res.rc == 0, res.stderr[-1500:]
    common_leo = json.loads(res.lines[-1])["log_end_offset"]
    for name in ("a", "b"):
        shutil.copytree(root / "common", root / name)
    # a: elected leader at epoch 1 (unclean election: b's last appends never reached it)
    ops_a = [{"op": "leaderEpochStart", "epoch": 1, "offset": common_leo}] + [_batch(1, f"a{i}") for i in range(8)]
    res_a = oracle.append_log(root / "a" / "t-0", ops_a, *CONFIG)
    # b: the old leader at epoch 0, which appended 3 batches before it failed
    res_b = oracle.append_log(root / "b" / "t-0", [_batch(0, f"b{i}") for i in range(3)], *CONFIG)
    assert res_a.rc == 0 and res_b.rc == 0, (res_a.stderr[-1500:], res_b.stderr[-1500:])
    # c: a follower of a that truncated (KIP-101 style) and is behind
    shutil.copytree(root / "a", root / "c")
    res_c = oracle.append_log(root / "c" / "t-0", [{"op": "truncateTo", "offset": common_leo + 6}], *CONFIG)
    assert res_c.rc == 0, res_c.stderr[-1500:]
    # a's oldest segment removed by retention (its log start offset raised past it)
    a_part = root / "a" / "t-0"
    oldest = sorted(a_part.glob("*.log"))[0]
    second = sorted(a_part.glob("*.log"))[1]
    for f in a_part.glob(oldest.name.split(".")[0] + ".*"):
        f.unlink()
    first_base = int(second.name.split(".")[0])
    (root / "a" / "log-start-offset-checkpoint").write_text(f"0\n1\nt 0 {first_base}\n")
    return root, common_leo, json.loads(res_a.lines[-1]), first_base


def test_end_offset_for_is_kafkas() -> None:
    cache = [(0, 0), (2, 10), (5, 20)]
    assert end_offset_for(cache, 5, 30) == (5, 30)     # the latest epoch: the log end
    assert end_offset_for(cache, 3, 30) == (2, 20)     # the largest epoch below, ending at the next one's start
    assert end_offset_for(cache, 0, 30) == (0, 10)
    assert end_offset_for(cache, 7, 30) == (-1, -1)    # past every known epoch
    assert end_offset_for([(4, 10)], 1, 30) == (1, 10)  # below every known epoch


def test_the_divergence_offset_is_kafkas_truncation_point(copies) -> None:
    root, common_leo, summary_a, _first = copies
    (pc,), _skipped = compare([str(root / n) for n in ("a", "b", "c")])
    by = {Path(c.path).parent.name: c for c in pc.copies}
    assert by["a"].role == "leader" and summary_a["leader_epoch_cache"][-1][0] == 1
    # b (epoch 0) asks a for the end of epoch 0: the start of epoch 1 in a's cache, where the fork began
    assert by["b"].truncate_to == common_leo == summary_a["leader_epoch_cache"][-1][1]
    assert by["b"].diverged == (common_leo, by["b"].log_end_offset - 1) and pc.divergent
    assert by["c"].truncate_to == by["c"].log_end_offset and by["c"].diverged is None  # only behind
    # below the truncation point the copies hold the same batches, byte for byte
    a_batches = {b[0]: b for b in _batches(root / "a" / "t-0")}
    for base, last, raw in _batches(root / "b" / "t-0"):
        if last < common_leo and base in a_batches:
            assert raw == a_batches[base][2]


def test_kafkas_truncation_leaves_exactly_the_common_prefix(copies, oracle, tmp_path) -> None:
    root, common_leo, _summary_a, _first = copies
    shutil.copytree(root / "b", tmp_path / "b")
    res = oracle.append_log(tmp_path / "b" / "t-0", [{"op": "truncateTo", "offset": common_leo}], *CONFIG)
    assert json.loads(res.lines[-1])["log_end_offset"] == common_leo
    after = _batches(tmp_path / "b" / "t-0")
    assert [b[2] for b in after] == [b[2] for b in _batches(root / "common" / "t-0")]


def test_merge_keeps_the_lineage_once_and_kafka_loads_it(copies, oracle, tmp_path) -> None:
    root, common_leo, summary_a, first_base = copies
    out, side = tmp_path / "out", tmp_path / "diverged"
    result = CliRunner().invoke(cli, ["merge", "--json", "--output-dir", str(out), "--keep-diverged", str(side),
                                      *(str(root / n) for n in ("a", "b", "c"))])
    assert result.exit_code == 1, result.output  # b diverged: said in the exit status
    (row,) = [json.loads(line) for line in result.output.splitlines()]
    assert row["diverged"] == [{"copy": str(root / "b" / "t-0"), "first_offset": common_leo,
                                "last_offset": common_leo + 3 * 3 - 1, "reason": "diverged"}]  # b's three batches
    merged = _batches(out / "t-0")
    offsets = [o for base, last, _raw in merged for o in range(base, last + 1)]
    assert offsets == list(range(0, summary_a["log_end_offset"]))  # every offset of the lineage, once
    a_batches = {b[0]: b[2] for b in _batches(root / "a" / "t-0")}
    common = {b[0]: b[2] for b in _batches(root / "common" / "t-0")}
    for base, _last, raw in merged:
        assert raw == (a_batches.get(base) or common[base])  # byte for byte from the lineage
    assert row["sources"][0]["last_offset"] == first_base - 1
    side_batches = _batches(side / "copy1" / "t-0") or _batches(next(side.glob("*/t-0")))
    assert side_batches and side_batches[0][0] == common_leo
    clean, unclean = oracle.run_many([("load-log", [str(out / "t-0"), "--clean"]),
                                      ("load-log", [str(out / "t-0"), "--unclean"])])
    for res in (clean, unclean):
        s = res.one("summary")
        assert s["ok"] and s["truncations"] == [] and s["deleted_segments"] == [], s
        assert s["log_start_offset"] == 0 and s["log_end_offset"] == summary_a["log_end_offset"]
        assert [r["offset"] for r in res.of_type("record")] == offsets


def test_replicas_cli(copies) -> None:
    root, _leo, _s, _f = copies
    agree = CliRunner().invoke(cli, ["replicas", str(root / "a"), str(root / "c")])
    assert agree.exit_code == 0 and "copies agree" in agree.output
    diverged = CliRunner().invoke(cli, ["replicas", "--json", str(root / "a"), str(root / "b")])
    assert diverged.exit_code == 1 and json.loads(diverged.output)["divergent"]


def _merge(*args: str):
    return CliRunner().invoke(cli, ["merge", "--json", *args])


def _offsets(part: Path) -> list:
    return [o for base, last, _raw in _batches(part) for o in range(base, last + 1)]


def _rewrite_value(log: Path, base: int) -> None:
    """Change one value byte of the batch at `base` (its CRC made right again): same offsets, other bytes."""
    from kstore_cli.record.crc import crc32c

    raw = bytearray(log.read_bytes())
    batch = next(b for b in read_batches(str(log)) if b.base_offset == base)
    at = raw.index(b"value", batch.position, batch.position + batch.size)
    raw[at] = ord("V")
    body = bytes(raw[batch.position + 21:batch.position + batch.size])
    raw[batch.position + 17:batch.position + 21] = crc32c(body).to_bytes(4, "big")
    log.write_bytes(bytes(raw))


def test_merge_reports_a_batch_that_differs_below_the_truncation_point(copies, tmp_path) -> None:
    """Issue 29: replicas said DIVERGED (exit 1) and merge said "diverged": [] (exit 0), writing nothing aside."""
    root, _leo, summary_a, first_base = copies
    shutil.copytree(root / "c", tmp_path / "c")
    c_part = tmp_path / "c" / "t-0"
    target = next(b for b in _batches(c_part) if b[0] >= first_base + 10)
    log = max((p for p in c_part.glob("*.log") if int(p.name.split(".")[0]) <= target[0]),
              key=lambda p: int(p.name.split(".")[0]))
    _rewrite_value(log, target[0])
    replicas = CliRunner().invoke(cli, ["replicas", "--json", str(root / "a"), str(tmp_path / "c")])
    assert replicas.exit_code == 1
    by = {Path(c["path"]).parent.name: c for c in json.loads(replicas.output)["copies"]}
    # c's batches below a's first segment are left out too: a copy with a batch that differs from the
    # leader's is no donor of older history
    differs = [(0, first_base - 1), (target[0], target[1])]
    assert by["c"]["left_out"] == [{"first_offset": a, "last_offset": b, "reason": "differs"} for a, b in differs]
    out, side = tmp_path / "out", tmp_path / "side"
    result = _merge("--output-dir", str(out), "--keep-diverged", str(side), str(root / "a"), str(tmp_path / "c"))
    assert result.exit_code == 1, result.output
    (row,) = [json.loads(line) for line in result.output.splitlines()]
    assert row["diverged"] == [{"copy": str(c_part), "first_offset": a, "last_offset": b, "reason": "differs"}
                               for a, b in differs]
    assert _offsets(out / "t-0") == list(range(first_base, summary_a["log_end_offset"]))
    (side_part,) = side.glob("*/t-0")
    assert _offsets(side_part) == [*range(0, first_base), *range(target[0], target[1] + 1)]


def test_merge_keeps_aside_the_whole_batch_that_straddles_the_truncation_point(copies, tmp_path) -> None:
    """A follower without leader epochs truncates to its high watermark, here inside a batch: Kafka's
    LogSegment.truncateTo removes that batch whole, so all its offsets are left out and kept aside
    (they used to be in neither output)."""
    root, common_leo, _summary_a, _first = copies
    shutil.copytree(root / "b", tmp_path / "b")
    (tmp_path / "b" / "t-0" / "leader-epoch-checkpoint").unlink()
    (tmp_path / "b" / "replication-offset-checkpoint").write_text(f"0\n1\nt 0 {common_leo + 4}\n")
    out, side = tmp_path / "out", tmp_path / "side"
    inputs = [str(root / "a"), str(tmp_path / "b"), str(root / "c")]  # c: the donor of a's removed segment
    result = _merge("--output-dir", str(out), "--keep-diverged", str(side), *inputs)
    assert result.exit_code == 1, result.output
    (row,) = [json.loads(line) for line in result.output.splitlines()]
    b_part = str(tmp_path / "b" / "t-0")
    # below the truncation point b's batches are not a's (other epoch's data): differs; from the base of the
    # batch holding common_leo + 4 on: diverged
    assert row["diverged"] == [{"copy": b_part, "first_offset": common_leo, "last_offset": common_leo + 2,
                                "reason": "differs"},
                               {"copy": b_part, "first_offset": common_leo + 3, "last_offset": common_leo + 8,
                                "reason": "diverged"}]
    (side_part,) = side.glob("*/t-0")
    assert _offsets(side_part) == list(range(common_leo, common_leo + 9))  # every offset not taken, once
    replicas = CliRunner().invoke(cli, ["replicas", "--json", *inputs])
    assert replicas.exit_code == 1
    by = {Path(c["path"]).parent.name: c for c in json.loads(replicas.output)["copies"]}
    assert [(r["first_offset"], r["last_offset"], r["reason"]) for r in by["b"]["left_out"]] == [
        (d["first_offset"], d["last_offset"], d["reason"]) for d in row["diverged"]]  # the two commands agree


def _topic_id(part: Path, tid: str) -> None:
    (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {tid}\n")


def test_copies_with_different_topic_ids_are_different_topics(copies, tmp_path) -> None:
    root, _leo, _s, _f = copies
    for name, tid in (("a", "AAECAwQFBgcICQoLDA0ODw"), ("c", "DwECAwQFBgcICQoLDA0ODw")):
        shutil.copytree(root / name, tmp_path / name)
        _topic_id(tmp_path / name / "t-0", tid)
    a, c = str(tmp_path / "a"), str(tmp_path / "c")
    replicas = CliRunner().invoke(cli, ["replicas", a, c])
    assert replicas.exit_code == 1, replicas.output
    assert "TOPIC ID DIFFERS" in replicas.output and "DwECAwQFBgcICQoLDA0ODw" in replicas.output
    rows = [json.loads(line) for line in CliRunner().invoke(cli, ["replicas", "--json", a, c]).output.splitlines()]
    assert sorted(r["topic_id"] for r in rows) == ["AAECAwQFBgcICQoLDA0ODw", "DwECAwQFBgcICQoLDA0ODw"]
    assert all(r["divergent"] and len(r["copies"]) == 1 and r["other_topic_ids"] for r in rows)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["merge", "--output-dir", str(out), a, c])
    assert isinstance(result.exception, KstoreError) and result.exception.exit_status == 1
    message = str(result.exception)
    assert "different topic ids" in message and "AAECAwQFBgcICQoLDA0ODw" in message and "DwECAwQF" in message
    assert not out.exists() and not list(tmp_path.glob("*.kstore-tmp"))  # nothing written


def test_a_copy_without_partition_metadata_goes_with_the_topic_id_of_the_others(copies, tmp_path) -> None:
    """Data written before Kafka 2.8 has no partition.metadata: UnifiedLog.assignTopicId gives it the
    partition's id, so it merges with the copies that have one, and the output gets their file."""
    root, _leo, _s, _f = copies
    shutil.copytree(root / "c", tmp_path / "c")
    _topic_id(tmp_path / "c" / "t-0", "AAECAwQFBgcICQoLDA0ODw")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["merge", "--output-dir", str(out), str(root / "a"), str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert (out / "t-0" / "partition.metadata").read_text() == "version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw\n"


def test_merge_rerun_after_it_finished_writes_nothing_and_another_merge_is_refused(copies, tmp_path) -> None:
    """The output's kstore-merge.json names the merge: the same command again (a rerun after a kill that came
    after the last write) reports and exits as before without writing; another merge into it is refused."""
    from tests.safety_data import tree_bytes

    root, _leo, _s, _f = copies
    out, side = tmp_path / "out", tmp_path / "side"
    argv = ["merge", "--output-dir", str(out), "--keep-diverged", str(side), *(str(root / n) for n in "abc")]
    first = CliRunner().invoke(cli, argv)
    assert first.exit_code == 1, first.output
    assert json.loads((out / "kstore-merge.json").read_text())["state"] == "done"
    assert not (side / "kstore-merge.json").exists()
    before = tree_bytes(tmp_path)
    again = CliRunner().invoke(cli, argv)
    assert (again.exit_code, again.output) == (1, first.output) and tree_bytes(tmp_path) == before
    other = CliRunner().invoke(cli, ["merge", "--output-dir", str(out), str(root / "a"), str(root / "c")])
    assert isinstance(other.exception, KstoreError) and other.exception.exit_status == 2
    # Another merge's finished output holds its checkpoints: refused as a Kafka data dir before "not empty".
    assert "inside the Kafka data dir" in str(other.exception) and tree_bytes(tmp_path) == before


def test_a_merge_building_beside_an_output_keeps_a_second_one_out(copies, tmp_path) -> None:
    """Two merges into one output would each clear the other's <output>.kstore-tmp as a killed run's
    leftover: the dir the output is built beside is flock'ed for the whole run, the second is refused."""
    import fcntl
    import os

    from kstore_cli.errors import LogDirLockedError
    from tests.safety_data import tree_bytes

    root, _leo, _s, _f = copies
    out = tmp_path / "out"
    argv = ["merge", "--output-dir", str(out), *(str(root / n) for n in "abc")]
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)  # another merge's hold on the dir, as merge takes it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        before = tree_bytes(tmp_path)
        res = CliRunner().invoke(cli, argv)
        assert isinstance(res.exception, LogDirLockedError) and res.exception.exit_status == 1, res.output
        assert "another kstore process is writing a merge's output" in str(res.exception)
        assert tree_bytes(tmp_path) == before and not out.exists()
    finally:
        os.close(fd)
    assert CliRunner().invoke(cli, argv).exit_code == 1 and (out / "kstore-merge.json").exists()  # exit 1: diverged
