"""Transactions from the files: the coordinator's state from ``__transaction_state-N`` and the transactions
still open in each data partition, with the hanging ones as ``kafka-transactions.sh find-hanging`` finds them.

* Coordinator: every ``__transaction_state`` partition in the data dirs is loaded as
  ``TransactionStateManager.loadTransactionMetadata`` does: records in offset order, the latest per
  transactional id wins, a tombstone removes it, a key version Kafka does not know is skipped.
  A transactional id lives in partition ``Utils.abs(id.hashCode) % transaction.state.log.num.partitions``.
* Partitions: each data partition's producer state at its log end (kstore_cli.log.producer_state):
  the producers with an open transaction, its first offset, the producer's epoch, coordinator epoch and
  last timestamp; the last stable offset they hold back.
* Hanging (``FindHangingTransactionsCommand``): an open transaction whose producer's last timestamp is
  more than ``--max-transaction-timeout`` (15 minutes) before now, and whose producer id no loaded
  transactional id has (no coordinator state), or whose transactional id's partitions do not include
  this partition (the coordinator will never write its marker). Where the transactional id could live
  in a ``__transaction_state`` partition missing from the dirs, the verdict is "unknown", never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from kstore_cli.errors import KstoreError, RecordParseError
from kstore_cli.parsers.txnlog import STATES, read_transaction_record
from kstore_cli.log.names import METADATA_LOG_TOPIC
from kstore_cli.cluster.coordinator import coordinator_batches, partition_for
from kstore_cli.log.logdir import Partition, coordinator_partitions, topic_matcher
from kstore_cli.log.producer_state import ProducerStateManager
from kstore_cli.log.unified_log import DataDirState, DataDirStates, log_offsets

TRANSACTION_TOPIC = "__transaction_state"
#: transaction.state.log.num.partitions default (TransactionLogConfig).
DEFAULT_TRANSACTION_PARTITIONS = 50
#: kafka-transactions.sh find-hanging --max-transaction-timeout default, in minutes.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES = 15
_INTERNAL = ("__consumer_offsets", TRANSACTION_TOPIC, METADATA_LOG_TOPIC)

HANGING = "hanging"
NOT_HANGING = "not hanging"
UNKNOWN = "unknown"
TOO_RECENT = "within the timeout"


@dataclass
class TransactionMetadata:
    """One transactional id as the coordinator loaded it."""

    transactional_id: str
    coordinator_partition: int
    producer_id: int
    producer_epoch: int
    state: str
    partitions: List[Tuple[str, int]]
    timeout_ms: int
    start_timestamp: int
    last_update_timestamp: int
    last_producer_id: int = -1
    next_producer_id: int = -1

    def to_dict(self) -> dict:
        return {"type": "transactional-id", "transactional_id": self.transactional_id,
                "coordinator_partition": self.coordinator_partition, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "state": self.state,
                "partitions": [f"{t}-{p}" for t, p in self.partitions], "timeout_ms": self.timeout_ms,
                "txn_start_timestamp": self.start_timestamp, "last_update_timestamp": self.last_update_timestamp,
                "last_producer_id": self.last_producer_id, "next_producer_id": self.next_producer_id}


@dataclass
class OpenTransaction:
    """A transaction still open at a partition's log end, and the verdict on it."""

    topic: str
    partition: int
    path: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int
    last_timestamp: int
    duration_ms: int
    last_stable_offset: int
    transactional_id: Optional[str] = None
    verdict: str = NOT_HANGING
    reason: str = ""

    def to_dict(self) -> dict:
        return {"type": "open-transaction", "partition": self.path, "topic": self.topic,
                "partition_id": self.partition, "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "coordinator_epoch": self.coordinator_epoch, "first_offset": self.first_offset,
                "last_timestamp": self.last_timestamp, "duration_ms": self.duration_ms,
                "last_stable_offset": self.last_stable_offset, "transactional_id": self.transactional_id,
                "verdict": self.verdict, "reason": self.reason}


@dataclass
class TransactionsReport:
    """What `kstore transactions` reports."""

    num_partitions: int
    loaded_partitions: List[int]
    missing_partitions: List[int]
    transactions: Dict[str, TransactionMetadata]
    open_transactions: List[OpenTransaction]
    now: int
    max_timeout_ms: int
    skipped: List[Tuple[str, int, str]] = field(default_factory=list)
    partitions_checked: int = 0

    @property
    def hanging(self) -> List[OpenTransaction]:
        return [t for t in self.open_transactions if t.verdict == HANGING]

    @property
    def undetermined(self) -> List[OpenTransaction]:
        return [t for t in self.open_transactions if t.verdict == UNKNOWN]


def _load_coordinator(partitions: List[Partition], num_partitions: int,
                      skipped: List[Tuple[str, int, str]]) -> Dict[str, TransactionMetadata]:
    loaded: Dict[str, TransactionMetadata] = {}
    for partition in partitions:
        for path, batch in coordinator_batches(partition):
            if batch.is_control:
                continue
            for record in batch.records():
                _replay(loaded, partition, path, record, num_partitions, skipped)
    return loaded


def _replay(loaded: Dict[str, TransactionMetadata], partition: Partition, path: str, record, num_partitions: int,
            skipped: List[Tuple[str, int, str]]) -> None:
    try:
        transactional_id, v = read_transaction_record(record.key, record.value)
    except RecordParseError as exc:
        skipped.append((path, record.offset, exc.message))
        return
    if transactional_id is None:
        skipped.append((path, record.offset, "a key version this Kafka does not know (the coordinator skips it)"))
        return
    if v is None:
        loaded.pop(transactional_id, None)
        return
    parts = [(p["Topic"], pid) for p in (v["TransactionPartitions"] or []) for pid in p["PartitionIds"]]
    loaded[transactional_id] = TransactionMetadata(
        transactional_id, partition.partition, v["ProducerId"], v["ProducerEpoch"], STATES[v["TransactionStatus"]],
        parts, v["TransactionTimeoutMs"], v["TransactionStartTimestampMs"], v["TransactionLastUpdateTimestampMs"],
        v.get("PreviousProducerId", -1), v.get("NextProducerId", -1))


def _open_transactions(partition: Partition, state: DataDirState, now: int) -> List[OpenTransaction]:
    producers = ProducerStateManager.load(partition)
    offsets = log_offsets(partition, state, log_end_offset=producers.end_offset or None)
    lso, _why = producers.last_stable_offset(offsets.high_watermark)
    return [OpenTransaction(partition.topic, partition.partition, partition.path, e.producer_id, e.producer_epoch,
                            e.coordinator_epoch, e.current_txn_first_offset, e.timestamp, now - e.timestamp, lso)
            for e in producers.open_transactions()]


def _judge(txn: OpenTransaction, by_producer: Dict[int, TransactionMetadata], missing: List[int],
           num_partitions: int, max_timeout_ms: int) -> None:
    if txn.duration_ms <= max_timeout_ms:
        txn.verdict, txn.reason = TOO_RECENT, (f"last written {txn.duration_ms} ms ago, within the "
                                               f"{max_timeout_ms} ms maximum transaction timeout")
        return
    meta = by_producer.get(txn.producer_id)
    if meta is None:
        if missing:
            txn.verdict = UNKNOWN
            txn.reason = (f"no loaded transactional id has producer id {txn.producer_id}, but {len(missing)} of "
                          f"{num_partitions} {TRANSACTION_TOPIC} partitions are missing from the dirs: its "
                          "coordinator state may be there")
        else:
            txn.verdict, txn.reason = HANGING, (f"no transactional id has producer id {txn.producer_id}: the "
                                                "coordinator has no state for it and will never write its marker")
        return
    txn.transactional_id = meta.transactional_id
    if (txn.topic, txn.partition) in meta.partitions:
        txn.verdict, txn.reason = NOT_HANGING, (f"{meta.transactional_id} is {meta.state} with this partition: "
                                                "the coordinator will write its marker")
    else:
        txn.verdict, txn.reason = HANGING, (f"{meta.transactional_id} is {meta.state} and this partition is not "
                                            "among its partitions: the coordinator will never write its marker")


def load_transactions(paths: Iterable[str], *, now: int, num_partitions: int = DEFAULT_TRANSACTION_PARTITIONS,
                      max_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES * 60_000,
                      transactional_ids: Optional[List[str]] = None,
                      topics: Optional[str] = None) -> TransactionsReport:
    """The coordinator's transactional ids and every data partition's open transactions under `paths` (with
    `topics`, comma-separated globs, only partitions of matching topics)."""
    wanted = topic_matcher(topics)
    partitions, coordinator, found = coordinator_partitions(
        paths, TRANSACTION_TOPIC, num_partitions, "--transaction-partitions to transaction.state.log.num.partitions")
    skipped: List[Tuple[str, int, str]] = []
    loaded = _load_coordinator(coordinator, num_partitions, skipped)
    missing = [n for n in range(num_partitions) if n not in found]
    by_producer = {m.producer_id: m for m in loaded.values()}
    states = DataDirStates()
    opened: List[OpenTransaction] = []
    data = [p for p in partitions if p.topic not in _INTERNAL and p.partition >= 0
            and not p.name.endswith(("-delete", "-future", "-stray")) and wanted(p.topic)]
    for partition in data:
        try:
            found_open = _open_transactions(partition, states[partition.data_dir], now)
        except KstoreError as exc:
            skipped.append((partition.path, -1, f"producer state not readable: {exc}"))
            continue
        for txn in found_open:
            _judge(txn, by_producer, missing, num_partitions, max_timeout_ms)
        opened.extend(found_open)
    if transactional_ids:
        loaded = {k: v for k, v in loaded.items() if k in transactional_ids}
        wanted = {m.producer_id for m in loaded.values()}
        opened = [t for t in opened if t.producer_id in wanted]
    return TransactionsReport(num_partitions, found, missing, loaded, opened, now, max_timeout_ms, skipped,
                              len(data))


def coordinator_partition_missing(report: TransactionsReport, transactional_id: str) -> Optional[int]:
    """The __transaction_state partition of an id asked for when it is missing from the dirs."""
    n = partition_for(transactional_id, report.num_partitions)
    return n if n in report.missing_partitions else None

