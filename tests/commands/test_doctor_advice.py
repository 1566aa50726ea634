"""doctor's advice for mid-log damage on a Kafka-written partition (fixtures/kafka-written/leader-4.0, appended
by Kafka's own leader code): both repairs named with the exact offsets and records each keeps and loses, and
each named command, run on a copy, keeping and losing exactly that (the dry runs saying the same); Kafka's own
recovery and loader agree (the oracle)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.record.reader import read_batches
from tests.conftest import ROOT
from tests.oracle import kafka_records

_register_commands()

SOURCE = ROOT / "fixtures" / "kafka-written" / "leader-4.0"
SEGMENT = "00000000000000000354.log"


def _batches(part: Path) -> List[Tuple[str, int, int, int, int]]:
    """(.log name, position, base offset, last offset, records) of every batch of the partition, in log order."""
    return [(log.name, b.position, b.base_offset, b.last_offset, b.record_count())
            for log in sorted(part.glob("*.log")) for b in read_batches(str(log))]


def _damaged_copy(tmp_path: Path, picks=((SEGMENT, 40),), name: str = "data") -> Tuple[Path, list, list]:
    """A copy of the Kafka-written data dir with one byte flipped inside the records of each picked batch
    ((.log name, index of the batch in that .log)); returns the partition, its batches before the damage and
    the damaged ones."""
    data = tmp_path / name
    shutil.copytree(SOURCE, data)
    part = data / "t-0"
    batches = _batches(part)
    damaged = []
    for log_name, index in picks:
        batch = [b for b in batches if b[0] == log_name][index]
        log = part / log_name
        raw = bytearray(log.read_bytes())
        raw[batch[1] + 70] ^= 0xFF  # inside the records: only the CRC tells
        log.write_bytes(bytes(raw))
        damaged.append(batch)
    return part, batches, damaged


def _expected(batches: list, damaged: list) -> Tuple[dict, dict]:
    """(salvage's, rebuild-index --truncate's) repairs entry, counted from the undamaged batches."""
    first = batches.index(min(damaged, key=batches.index))
    before, after = batches[:first], [b for b in batches[first:] if b not in damaged]
    spans = [[b[2], b[3]] for b in sorted(damaged, key=lambda b: b[2])]
    damage = {"offsets": spans, "records_at_most": sum(b[3] - b[2] + 1 for b in damaged)}

    def tally(bs):
        return {"batches": len(bs), "records": sum(b[4] for b in bs), "first_offset": bs[0][2],
                "last_offset": bs[-1][3]}

    kept = [b for b in batches if b not in damaged]
    salvage = {"keeps": tally(kept), "loses": {"offsets": spans, "records": 0, "batches": 0, "damaged": damage}}
    truncate = {"keeps": tally(before), "loses": {"offsets": [[batches[first][2], batches[-1][3]]],
                                                   "records": sum(b[4] for b in after), "batches": len(after),
                                                   "damaged": damage}}
    return salvage, truncate


def _run(*args: str) -> Tuple[int, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def _doctor_finding(data: Path) -> dict:
    """doctor's finding about the first damaged segment (a later one points to it: Kafka's cut deletes it)."""
    code, out = _run("doctor", "--json", data)
    assert code == 1
    first, *later = [r for r in map(json.loads, out.splitlines())
                     if r["type"] == "finding" and r["check"] == "log-corrupt-batch"]
    for finding in later:
        assert finding["kafka"].startswith(f"delete: after an unclean shutdown recovery cuts the earlier damaged "
                                           f"segment {Path(first['file']).name}")
        assert finding["repair"] == f"the repairs named for {first['file']} (each covers the whole partition)"
        assert "repairs" not in finding
    return first


def _kept(part: Path) -> Tuple[int, List[int]]:
    """(records, offsets) of every batch left in the partition."""
    records, offsets = 0, []
    for log in sorted(part.glob("*.log")):
        for batch in read_batches(str(log)):
            batch.ensure_valid()
            records += batch.record_count()
            offsets.extend(range(batch.base_offset, batch.last_offset + 1))
    return records, offsets


def test_doctor_names_salvage_first_then_the_cut_with_exact_offsets_and_records(tmp_path):
    part, batches, damaged = _damaged_copy(tmp_path)
    salvage, truncate = _expected(batches, damaged)
    finding = _doctor_finding(part.parent)
    assert [r["command"] for r in finding["repairs"]] == [f"kstore salvage --in-place {part}",
                                                        f"kstore rebuild-index --truncate {part}"]
    got_salvage, got_truncate = ({k: v for k, v in r.items() if k != "command"} for r in finding["repairs"])
    assert got_salvage == salvage and got_truncate == truncate
    # the figures themselves, for the record: one 2-record batch at offsets 523-524 damaged, of 1074 records
    assert salvage["keeps"]["records"] == 1072 and truncate["keeps"]["records"] == 523
    assert truncate["loses"]["records"] == 549 and truncate["loses"]["offsets"] == [[523, 1073]]
    # text: one line per repair, salvage first
    code, out = _run("doctor", part.parent)
    assert code == 1
    run = [line for line in out.splitlines()
           if line.startswith(("    run:   kstore salvage", "    or:    kstore rebuild-index --truncate"))]
    assert run == [
        f"    run:   kstore salvage --in-place {part}  (every intact batch, past the damage too: keeps offsets "
        "0-1073: 1072 record(s) in 249 batch(es); loses only the damaged batch(es) at offsets 523-524 (at most 2 "
        "record(s), unreadable); the damaged bytes are quarantined)",
        f"    or:    kstore rebuild-index --truncate {part}  (Kafka's own recovery, cuts at the first invalid batch: "
        "keeps offsets 0-522: 523 record(s) in 123 batch(es); loses offsets 523-1073: 549 record(s) in 126 intact "
        "batch(es) and the damaged batch(es) at offsets 523-524 (at most 2 record(s), unreadable); the cut bytes "
        "are quarantined, kstore restore undoes it)"]


@pytest.mark.parametrize("picks", [((SEGMENT, 40),), ((SEGMENT, 0),), (("00000000000000000000.log", 5), (SEGMENT, 60)),
                                   (("00000000000000000000.log", 82), ("00000000000000000697.log", 0))],
                         ids=["mid-segment", "first-batch-of-a-segment", "two-damages", "segment-edges"])
def test_each_named_command_keeps_and_loses_exactly_what_doctor_says(tmp_path, picks):
    part, batches, damaged = _damaged_copy(tmp_path, picks, "doctor")
    salvage, truncate = _expected(batches, damaged)
    repairs = _doctor_finding(part.parent)["repairs"]
    assert [{k: v for k, v in r.items() if k != "command"} for r in repairs] == [salvage, truncate]
    every = {o for b in batches for o in range(b[2], b[3] + 1)}
    lost_to_damage = {o for b in damaged for o in range(b[2], b[3] + 1)}

    # rebuild-index --truncate: its dry run and its run say what doctor said; the partition then holds exactly that
    cut_part = _damaged_copy(tmp_path, picks, "cut")[0]
    rows = {}
    for mode in ("--dry-run", None):
        code, out = _run("rebuild-index", "--truncate", "--json", *([mode] if mode else []), cut_part)
        [rows[mode]] = [r for r in map(json.loads, out.splitlines()) if r["type"] == "cut"]
    assert rows["--dry-run"]["status"] == "would cut" and rows[None]["status"] == "cut"
    for row in rows.values():
        assert row["keeps"] == truncate["keeps"] and row["cuts"] == truncate["loses"]
    records, offsets = _kept(cut_part)
    assert records == truncate["keeps"]["records"]
    assert offsets == list(range(truncate["keeps"]["first_offset"], truncate["keeps"]["last_offset"] + 1))

    # salvage --in-place: the same
    salvage_part = _damaged_copy(tmp_path, picks, "salvage")[0]
    summaries = {}
    for mode in ("--dry-run", "--in-place"):
        code, out = _run("salvage", "--json", mode, salvage_part)
        [summaries[mode]] = [r for r in map(json.loads, out.splitlines()) if r["type"] == "summary"]
    for summary in summaries.values():
        assert summary["keeps"] == salvage["keeps"] and summary["loses"] == salvage["loses"]
    records, offsets = _kept(salvage_part)
    assert records == salvage["keeps"]["records"] and set(offsets) == every - lost_to_damage


def test_damage_in_the_last_batch_names_the_cut_alone(tmp_path):
    """Nothing intact past the damage: salvage keeps nothing more, so doctor names Kafka's cut (restorable) only."""
    part, batches, damaged = _damaged_copy(tmp_path, (("00000000000000000697.log", 82),))
    finding = _doctor_finding(part.parent)
    assert finding["repair"].startswith(f"kstore rebuild-index --truncate {part}  (") and "\n" not in finding["repair"]
    [cut] = finding["repairs"]
    assert cut["keeps"]["records"] == sum(b[4] for b in batches[:-1]) and cut["loses"]["batches"] == 0
    # the damaged batch is the log's last: how far its offsets went cannot be read
    assert cut["loses"]["damaged"] == {"offsets": [[damaged[0][2], None]], "records_at_most": None}


def test_kafka_recovery_and_loader_agree_with_both_repairs(oracle, tmp_path):
    """Kafka's recovery of the damaged partition keeps what doctor says the cut keeps; Kafka's loader reads the
    salvaged partition whole, with the records doctor says salvage keeps."""
    part, batches, damaged = _damaged_copy(tmp_path, (("00000000000000000000.log", 5), (SEGMENT, 60)))
    salvage, truncate = _expected(batches, damaged)
    salvaged = _damaged_copy(tmp_path, (("00000000000000000000.log", 5), (SEGMENT, 60)), "salvaged")[0]
    assert _run("salvage", "--in-place", salvaged)[0] == 0
    recovered, loaded = oracle.load_logs([part, salvaged], clean=False)
    summary = recovered.one("summary")
    assert summary["ok"] and summary["log_end_offset"] == truncate["keeps"]["last_offset"] + 1
    assert len(kafka_records(recovered)) == truncate["keeps"]["records"]
    summary = loaded.one("summary")
    assert summary["ok"] and not summary["truncations"]
    offsets = [r[0] for r in kafka_records(loaded)]
    assert len(offsets) == salvage["keeps"]["records"]
    assert not set(offsets) & {o for b in damaged for o in range(b[2], b[3] + 1)}
