"""kstore transactions: the coordinator's state and each partition's open transactions, judged as
kafka-transactions.sh find-hanging judges them; producer state checked against Kafka's own (append-log)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from kstore_cli.cli import _register_commands, cli
from kstore_cli.parsers.schema import write_message
from kstore_cli.parsers.schemas import TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.log.logdir import Partition
from kstore_cli.log.producer_state import ProducerStateManager
from kstore_cli.cluster.transactions import HANGING, NOT_HANGING, TOO_RECENT, UNKNOWN, load_transactions, partition_for

_register_commands()
T = 1_700_000_000_000
MINUTE = 60_000
NOW = T + 20 * MINUTE
PARTS = 3  # transaction.state.log.num.partitions of the test cluster
STATUS = {"Empty": 0, "Ongoing": 1, "CompleteCommit": 4, "CompleteAbort": 5}


def _txn(pid: int, ts: int, n: int = 2) -> dict:
    return {"op": "leader", "leaderEpoch": 0, "producerId": pid, "producerEpoch": 0, "baseSequence": 0,
            "transactional": True, "records": [{"timestamp": ts + i, "key": f"k{pid}-{i}", "value": "v"}
                                               for i in range(n)]}


#: What a leader appends: 2000 commits; 3000, 4000, 5000, 7000 stay open; 7000 was written recently; a roll
#: between them leaves a producer snapshot the replay starts from.
OPS = [_txn(2000, T), {"op": "marker", "producerId": 2000, "producerEpoch": 0, "coordinatorEpoch": 5, "type": "commit",
                       "leaderEpoch": 0, "timestamp": T + 10},
       _txn(3000, T + 20), _txn(4000, T + 30), {"op": "roll"}, _txn(5000, T + 40), _txn(7000, T + 19 * MINUTE),
       {"op": "leader", "leaderEpoch": 0, "records": [{"timestamp": T + 60, "key": "x", "value": "y"}]},
       {"op": "highWatermark", "offset": 12}]


def _txn_record(tid: str, value: "dict | None") -> tuple:
    key = struct.pack(">h", 0) + write_message(TRANSACTION_LOG_KEY, {"TransactionalId": tid}, 0)
    if value is None:
        return key, None
    fields = {"ProducerId": value["pid"], "PreviousProducerId": -1, "NextProducerId": -1, "ProducerEpoch": 0,
              "TransactionTimeoutMs": 60000, "TransactionStatus": STATUS[value["state"]],
              "TransactionPartitions": [{"Topic": t, "PartitionIds": ps} for t, ps in value.get("partitions", [])],
              "TransactionLastUpdateTimestampMs": T + 5, "TransactionStartTimestampMs": T,
              "ClientTransactionVersion": 0}
    return key, struct.pack(">h", 1) + write_message(TRANSACTION_LOG_VALUE, fields, 1)


#: The coordinator's log, in order: the latest record per id wins, a tombstone deletes.
COORDINATOR = [
    ("txn-ongoing", {"pid": 5000, "state": "Ongoing", "partitions": [("orders", [0])]}),
    ("txn-done", {"pid": 3000, "state": "Ongoing", "partitions": [("orders", [0])]}),
    ("txn-done", {"pid": 3000, "state": "CompleteCommit"}),
    ("txn-deleted", {"pid": 4000, "state": "Ongoing", "partitions": [("orders", [0])]}),
    ("txn-deleted", None),
    ("txn-recent", {"pid": 7000, "state": "CompleteAbort"}),
]


def write_coordinator(data: Path, skip_partition: "int | None" = None) -> None:
    offsets = {n: 0 for n in range(PARTS)}
    logs = {n: bytearray() for n in range(PARTS)}
    for tid, value in COORDINATOR:
        n = partition_for(tid, PARTS)
        key, val = _txn_record(tid, value)
        logs[n] += build_v2_batch([RecordSpec(offsets[n], T, key, val)])
        offsets[n] += 1
    for n in range(PARTS):
        if n != skip_partition:
            (data / f"__transaction_state-{n}").mkdir(parents=True)
            (data / f"__transaction_state-{n}" / f"{0:020d}.log").write_bytes(bytes(logs[n]))


@pytest.fixture(scope="module")
def written(oracle, tmp_path_factory):
    """A data dir whose orders-0 Kafka's leader code wrote, Kafka's summary of it, and Kafka's reading of the
    coordinator log kstore built (its own --transaction-log-decoder)."""
    data = tmp_path_factory.mktemp("txn") / "data"
    summary = oracle.append_log(data / "orders-0", OPS, "--clock", str(T + 100), "--checkpoints")
    assert summary.rc == 0, summary.stderr[-2000:]
    write_coordinator(data)
    dumps = oracle.run_many([("dump-log", ["--transaction-log-decoder", "--files",
                                           str(data / f"__transaction_state-{n}" / f"{0:020d}.log")])
                             for n in range(PARTS)])
    return data, json.loads(summary.lines[-1]), "".join(d.stdout for d in dumps)


def test_kafkas_own_decoder_reads_the_coordinator_log(written) -> None:
    _data, _summary, dumped = written
    for tid in ("txn-ongoing", "txn-done", "txn-recent"):
        assert f"transaction_metadata::transactionalId={tid}" in dumped
    assert "state=CompleteCommit" in dumped and "<DELETE>" in dumped


def test_producer_state_equals_kafkas(written) -> None:
    data, summary, _dumped = written
    state = ProducerStateManager.load(Partition(str(data / "orders-0")))
    assert state.source.startswith("snapshot ")  # the roll left one: the replay started from it
    kafka = {p["producerId"]: (p["producerEpoch"], p["coordinatorEpoch"], p["currentTxnFirstOffset"], p["lastSequence"])
             for p in summary["producer_ids"]}
    ours = {e.producer_id: (e.producer_epoch, e.coordinator_epoch,
                            e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None, e.last_sequence)
            for e in state.producers.values()}
    assert ours == kafka
    assert state.last_stable_offset(summary["high_watermark"])[0] == summary["last_stable_offset"] == 3


def test_verdicts_as_find_hanging_gives_them(written) -> None:
    data, _summary, _dumped = written
    report = load_transactions([str(data)], now=NOW, num_partitions=PARTS)
    assert sorted(report.transactions) == ["txn-done", "txn-ongoing", "txn-recent"]  # the tombstone deleted one
    assert report.transactions["txn-done"].state == "CompleteCommit"
    verdicts = {t.producer_id: t.verdict for t in report.open_transactions}
    assert verdicts == {3000: HANGING,       # its transactional id completed without this partition
                        4000: HANGING,       # no coordinator state (its id was deleted)
                        5000: NOT_HANGING,   # ongoing with this partition: the marker will come
                        7000: TOO_RECENT}    # last written 1 minute ago
    assert {t.producer_id: t.last_stable_offset for t in report.open_transactions} == {
        3000: 3, 4000: 3, 5000: 3, 7000: 3}


def test_a_missing_coordinator_partition_makes_unknown_not_hanging(written, tmp_path) -> None:
    data, _summary, _dumped = written
    copy = tmp_path / "data"
    shutil.copytree(data / "orders-0", copy / "orders-0")
    for name in ("replication-offset-checkpoint", "log-start-offset-checkpoint"):
        shutil.copy2(data / name, copy / name)
    missing = partition_for("txn-deleted", PARTS)
    write_coordinator(copy, skip_partition=missing)
    report = load_transactions([str(copy)], now=NOW, num_partitions=PARTS)
    verdicts = {t.producer_id: t.verdict for t in report.open_transactions}
    assert verdicts[4000] == UNKNOWN and report.missing_partitions == [missing]
    result = CliRunner().invoke(cli, ["transactions", "--now", str(NOW), "--transaction-partitions", str(PARTS),
                                      "--json", str(copy)])
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert all("type" in row for row in rows)
    (summary,) = [r for r in rows if r["type"] == "summary"]
    assert summary["missing_partitions"] == [missing] and summary["undetermined"] == 1


def test_text_and_exit_status(written) -> None:
    data, _summary, _dumped = written
    result = CliRunner().invoke(cli, ["transactions", "--now", "2023-11-14T22:33:20Z", "--transaction-partitions",
                                      str(PARTS), str(data)])
    assert result.exit_code == 1
    assert "now = --now 2023-11-14 22:33:20.000Z" in result.output
    assert "orders-0  producer 4000 epoch 0  first offset 5" in result.output and "HANGING: no transactional id" in result.output
    calm = CliRunner().invoke(cli, ["transactions", "--now", str(T + 100), "--transaction-partitions", str(PARTS),
                                    str(data)])
    assert calm.exit_code == 0, calm.output


def test_topics_globs_select_the_data_partitions(written) -> None:
    data, _summary, _dumped = written
    for globs, producers in (("ord*", {3000, 4000, 5000, 7000}), ("payments,x*", set())):
        report = load_transactions([str(data)], now=NOW, num_partitions=PARTS, topics=globs)
        assert {t.producer_id for t in report.open_transactions} == producers
    result = CliRunner().invoke(cli, ["transactions", "--now", str(NOW), "--transaction-partitions", str(PARTS),
                                      "--topics", "payments", str(data)])
    assert result.exit_code == 0 and "HANGING" not in result.output, result.output


def test_a_marker_of_a_newer_epoch_clears_the_batch_metadata_as_kafka_does(oracle, tmp_path) -> None:
    """A coordinator that bumped the producer's epoch (fencing) writes the marker with the new epoch: Kafka's
    appendEndTxnMarker then clears the producer's batch metadata (maybeUpdateProducerEpoch: last sequence -1);
    the replay (no snapshot after it) must give what Kafka's own producer state holds."""
    ops = [_txn(8000, T), {"op": "marker", "producerId": 8000, "producerEpoch": 1, "coordinatorEpoch": 2,
                           "type": "abort", "leaderEpoch": 0, "timestamp": T + 10},
           _txn(8100, T + 20), {"op": "marker", "producerId": 8100, "producerEpoch": 0, "coordinatorEpoch": 2,
                                "type": "commit", "leaderEpoch": 0, "timestamp": T + 30}]
    summary = oracle.append_log(tmp_path / "data" / "t-0", ops, "--clock", str(T + 100))
    assert summary.rc == 0, summary.stderr[-2000:]
    kafka = {p["producerId"]: (p["producerEpoch"], p["coordinatorEpoch"], p["currentTxnFirstOffset"], p["lastSequence"])
             for p in json.loads(summary.lines[-1])["producer_ids"]}
    for snapshot in (tmp_path / "data" / "t-0").glob("*.snapshot"):
        snapshot.unlink()  # Kafka's close wrote its state: the replay is what is tested
    state = ProducerStateManager.load(Partition(str(tmp_path / "data" / "t-0")))
    assert state.source.startswith("the log from")
    ours = {e.producer_id: (e.producer_epoch, e.coordinator_epoch,
                            e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None, e.last_sequence)
            for e in state.producers.values()}
    assert ours == kafka and kafka[8000][3] == -1 and kafka[8100][3] == 1
