"""Compaction of transactional logs against Kafka's own Cleaner: committed and aborted transactions from
several producers interleaved with plain batches, written by Kafka's leader code (append-log: its
.txnindex, producer snapshots), cleaned by ``kstore compact`` and by Kafka's ``Cleaner.clean``
(clean-log) at the same clock: the same .log bytes. The native runs decide committed transactions' batches
themselves and leave aborted ones to CleanedTransactionMetadata (tests/cleaner/test_cleaner_twins.py
checks the twins agree); this checks the result is Kafka's."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

T = 1_700_000_000_000
NOW = T + 10 * 86_400_000  # past every delete horizon a first pass sets: markers may go as Kafka lets them


def _ops(seed: int) -> list:
    """A leader's appends: transactions of producers 100-102 (each committed or aborted, some spanning
    other producers' batches), plain keyed batches and tombstones between them, a few rolls."""
    rng = random.Random(seed)
    sequences = {pid: 0 for pid in (100, 101, 102)}
    open_txns: set = set()
    ops: list = []
    ts = T
    for _ in range(160):
        ts += 1
        roll = rng.random()
        if roll < 0.04:
            ops.append({"op": "roll"})
            continue
        keys = [f"k{rng.randrange(12)}" for _ in range(rng.randint(1, 4))]
        records = [{"timestamp": ts, "key": k, "value": None if rng.random() < 0.1 else f"v{ts}-{i}"}
                   for i, k in enumerate(keys)]
        pid = rng.choice(list(sequences))
        if pid in open_txns and rng.random() < 0.35:
            ops.append({"op": "marker", "producerId": pid, "producerEpoch": 0, "coordinatorEpoch": 1,
                        "type": rng.choice(["commit", "commit", "abort"]), "leaderEpoch": 0, "timestamp": ts})
            open_txns.discard(pid)
        elif roll < 0.3:
            ops.append({"op": "leader", "leaderEpoch": 0, "records": records})
        else:
            ops.append({"op": "leader", "leaderEpoch": 0, "producerId": pid, "producerEpoch": 0,
                        "baseSequence": sequences[pid], "transactional": True, "records": records})
            sequences[pid] += len(records)
            open_txns.add(pid)
    for pid in sorted(open_txns):  # every transaction ends: the cleaner's range reaches the log end
        ts += 1
        ops.append({"op": "marker", "producerId": pid, "producerEpoch": 0, "coordinatorEpoch": 1,
                    "type": "abort" if pid % 2 else "commit", "leaderEpoch": 0, "timestamp": ts})
    ops.append({"op": "roll"})
    end = sum(len(op["records"]) if op["op"] == "leader" else op["op"] == "marker" for op in ops)
    ops.append({"op": "highWatermark", "offset": end})  # the cleaner stops at the high watermark
    return ops


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_transactional_compaction_is_kafkas(oracle, tmp_path: Path, seed: int) -> None:
    data = tmp_path / "data"
    written = oracle.append_log(data / "orders-0", _ops(seed), "--clock", str(T + 1000), "--checkpoints")
    assert written.rc == 0, written.stderr[-2000:]
    kafka = tmp_path / "kafka" / "orders-0"
    shutil.copytree(data / "orders-0", kafka)
    assert any(p.stat().st_size for p in (data / "orders-0").glob("*.txnindex"))  # aborted transactions exist
    config = tmp_path / "compact.ini"
    config.write_text("[*]\ncleanup.policy = compact\n")
    out = subprocess.run([sys.executable, "-m", "kstore_cli", "compact", "--force-clean", "--topic-config", str(config),
                          "--now", str(NOW), "--no-cluster-metadata", str(data / "orders-0")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "cleaned [0, " in out.stdout, out.stdout + out.stderr
    cleaned = oracle.run("clean-log", str(kafka), "--now", str(NOW), "--no-records")
    assert cleaned.rc == 0 and cleaned.one("clean_summary")["ok"], cleaned.stdout[-2000:]
    ours = sorted(p.name for p in (data / "orders-0").glob("*.log"))
    assert ours == sorted(p.name for p in kafka.glob("*.log"))
    for name in ours:
        assert (data / "orders-0" / name).read_bytes() == (kafka / name).read_bytes(), name
