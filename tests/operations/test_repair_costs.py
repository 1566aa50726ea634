"""repair_costs: what rebuild-index --truncate and salvage keep and lose, from verify-index's plan and salvage's
resync scan past the cut, equal to a salvage planned from the start and to the batches before Kafka's cut."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kstore_cli.log.logdir import Partition
from kstore_cli.operations import salvage
from kstore_cli.operations.repair_costs import repair_costs
from kstore_cli.operations.salvage import plan_salvage
from kstore_cli.operations.tally import RepairCost, Tally
from kstore_cli.operations.verify import verify_partition
from kstore_cli.record.reader import read_batches
from tests.conftest import CORPUS


def _damage_last_byte(log: Path, index: int):
    """Flip the last byte of the index-th batch of the .log (covered by its CRC, v2 or legacy); returns it."""
    batch = list(read_batches(str(log)))[index]
    raw = bytearray(log.read_bytes())
    raw[batch.position + batch.size - 1] ^= 0x5A
    log.write_bytes(bytes(raw))
    return batch


@pytest.mark.parametrize("name,segment,index", [("mixed-magic-0", "00000000000000000059.log", 3),
                                                 ("legacy-v1-0", "00000000000000000000.log", 0),
                                                 ("v2-compact-0", "00000000000000000146.log", 2)])
def test_figures_equal_a_salvage_from_the_start_and_the_batches_before_the_cut(tmp_path, name, segment, index):
    part = tmp_path / name
    shutil.copytree(CORPUS / "logs" / name, part)
    before = [(b.base_offset, b.last_offset, b.record_count()) for log in sorted(part.glob("*.log"))
              for b in read_batches(str(log))]
    victim = _damage_last_byte(part / segment, index)
    first_lost = [b[0] for b in before].index(victim.base_offset)
    cut, salv = repair_costs(verify_partition(Partition(str(part)))[1])
    kept = before[:first_lost]
    assert (cut.keeps.batches, cut.keeps.records) == (len(kept), sum(b[2] for b in kept))
    assert cut.keeps.last_offset == (kept[-1][1] if kept else None)
    whole = plan_salvage(Partition(str(part)))
    assert salv.keeps == whole.kept_tally() and salv.keeps.uncounted == 0
    assert salv.damaged == [(d.first_offset, d.next_offset) for d in whole.damaged]
    # every batch is kept by one repair or lost by the cut, none twice
    assert cut.keeps.merge(cut.loses) == salv.keeps
    # only the damaged batch is lost to salvage
    assert salv.keeps.records == sum(b[2] for b in before) - victim.record_count()


def test_later_segments_recovery_found_whole_are_not_scanned_again(tmp_path, monkeypatch):
    part = tmp_path / "v2-none-0"
    shutil.copytree(CORPUS / "logs" / "v2-none-0", part)
    logs = sorted(part.glob("*.log"))
    _damage_last_byte(logs[0], 1)
    _damage_last_byte(logs[2], 0)
    scanned = []
    real = salvage._Scan.run

    def run(self, pos=0):
        scanned.append((Path(self.path).name, pos))
        return real(self, pos)

    monkeypatch.setattr(salvage._Scan, "run", run)
    plan = verify_partition(Partition(str(part)))[1]
    cut, salv = repair_costs(plan)
    # the damaged segment from its cut, the later damaged one whole; the clean ones counted by recovery's scan
    assert scanned == [(logs[0].name, plan.damaged.result.valid_bytes), (logs[2].name, 0)]
    assert salv.keeps == plan_salvage(Partition(str(part))).kept_tally() and len(salv.damaged) == 2


def test_lost_offsets_merge_the_damage_with_the_intact_batches_cut():
    cost = RepairCost("x", Tally(), Tally(), [(10, 12), (20, 21)])
    assert cost.lost_offsets() == [[10, 11], [20, 20]] and cost.damaged_records_at_most == 3
    lost = Tally()
    lost.add(12, 19, 8)
    lost.add(21, 30, 10)
    cost = RepairCost("x", Tally(), lost, [(10, 12), (20, 21)])
    assert cost.lost_offsets() == [[10, 30]]
    assert RepairCost("x", Tally(), Tally(), [(10, None)]).lost_offsets() == [[10, None]]
    assert RepairCost("x", Tally(), Tally(), [(10, None)]).damaged_records_at_most is None
    # a damaged range between two batches with no offset between them holds no offset
    assert RepairCost("x", Tally(), Tally(), [(10, 10)]).lost_offsets() == []


def test_tally_merge_keeps_uncounted_batches():
    a, b = Tally(), Tally()
    a.add(0, 4, 5)
    b.add(5, 9, None)
    b.add(10, 10, 1)
    merged = a.merge(b)
    assert (merged.batches, merged.records, merged.uncounted, merged.first_offset, merged.last_offset) == (3, 6, 1, 0, 10)
    assert "cannot be counted" in merged.text()
