"""``--transaction-log-decoder``: ``__transaction_state`` records (``TransactionLog.formatRecordKeyAndValue``).

Layout::

    key   = int16 version (only 0 is known) | TransactionLogKey v0
    value = int16 version (0 or 1)          | TransactionLogValue     (null value = tombstone)

Kafka does not catch anything here: every failure aborts the dump (``RecordParseError``), except an
unknown key version, printed as ``unknown::version=<v>``.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

from kstore_cli.errors import RecordParseError
from kstore_cli.parsers.decoded import RAW, JsonDecoded
from kstore_cli.parsers.schema import plain, read_message, to_json
from kstore_cli.parsers.schemas import TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE
from kstore_cli.parsers.wire import JavaError, WireReader
from kstore_cli.record.text import int32, java_string_hash

#: TransactionState ids and their Scala case-object names.
STATES: Dict[int, str] = {
    0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
    4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence",
}
#: TransactionVersion feature levels known to the Kafka build of the goldens.
TRANSACTION_VERSIONS = (0, 1, 2)


def _abort(e: JavaError) -> RecordParseError:
    return RecordParseError(e.message if e.message is not None else e.java_class.rsplit(".", 1)[-1])


def topic_partition_hash(topic: str, partition: int) -> int:
    """``TopicPartition.hashCode()``: ``31 * (31 + partition) + topic.hashCode()``."""
    return int32(31 * (31 + partition) + java_string_hash(topic))


def _table_size_for(capacity: int) -> int:
    """Scala 2.13 ``mutable.HashSet.tableSizeFor``."""
    c = max(capacity - 1, 4)
    return min((1 << (c.bit_length() - 1)) * 2, 1 << 30)


class ScalaMutableHashSet:
    """Iteration order of a Scala 2.13 ``mutable.HashSet`` (load factor 0.75, initial table 16).

    Each bucket is a list kept sorted by the improved hash (``h ^ (h >>> 16)``); buckets are visited in
    index order (``improved & (len - 1)``); resizes keep relative order, so only the final table size
    matters, and that depends on how elements were added (``add`` checks the threshold first;
    ``addAll`` of an ``immutable.HashSet`` pre-sizes with ``sizeHint`` and then skips the check).
    """

    def __init__(self) -> None:
        self.table_len = 16
        self.threshold = 12
        self.items: List[Tuple[int, int, object, str]] = []  # (improved hash, seq, key, text)
        self._keys: set = set()

    def _grow(self, new_len: int) -> None:
        self.table_len = new_len
        self.threshold = int(new_len * 0.75)

    def _add_elem(self, key: object, java_hash: int, text: str) -> None:
        if key in self._keys:
            return
        self._keys.add(key)
        improved = int32(java_hash ^ ((java_hash & 0xFFFFFFFF) >> 16))
        self.items.append((improved, len(self.items), key, text))

    def add(self, key: object, java_hash: int, text: str) -> None:
        """``add(elem)``."""
        if len(self._keys) + 1 >= self.threshold:
            self._grow(self.table_len * 2)
        self._add_elem(key, java_hash, text)

    def add_all(self, elems: List[Tuple[object, int, str]]) -> None:
        """``++=`` with an immutable Set of these (distinct) elements."""
        size = len(elems)
        target = _table_size_for(int((size + 1) / 0.75))
        if target > self.table_len:
            self._grow(target)
        if size > 4:  # an immutable.HashSet: addElem without threshold checks
            for key, h, text in elems:
                self._add_elem(key, h, text)
        else:  # Set1..Set4: plain add()
            for key, h, text in elems:
                self.add(key, h, text)

    def __iter__(self) -> Iterable[str]:
        mask = self.table_len - 1
        for _, _, _, text in sorted(self.items, key=lambda t: (t[0] & mask, t[0], t[1])):
            yield text


def format_partitions(groups: List[Tuple[str, List[int]]]) -> str:
    """``topicPartitions.mkString("[", ",", "]")`` after ``addPartitions`` of each topic's set."""
    hs = ScalaMutableHashSet()
    for topic, partition_ids in groups:
        seen: Dict[int, None] = {}
        for p in partition_ids:
            seen.setdefault(p, None)  # ``.toSet`` drops duplicates
        hs.add_all([((topic, p), topic_partition_hash(topic, p), f"{topic}-{p}") for p in seen])
    return "[" + ",".join(hs) + "]"


def read_transaction_record(key: Optional[bytes], value: Optional[bytes]) -> Tuple[Optional[str], Optional[Dict[str, Any]]]:
    """(transactional id, TransactionLogValue fields) of a ``__transaction_state`` record, as
    ``TransactionLog.readTxnRecordKey``/``readTxnRecordValue`` read it: id None for a key version this
    Kafka does not know (the coordinator skips it), value None for a tombstone. Raises
    RecordParseError where Kafka's reader throws."""
    _key_version, transactional_id, _version, fields = TransactionLogMessageParser()._read(key, value)
    return transactional_id, fields


class TransactionLogMessageParser:
    """``--transaction-log-decoder``."""

    skipped = 0

    def _read(self, key: Optional[bytes], value: Optional[bytes]) -> Tuple[int, Optional[str], Optional[int],
                                                                         Optional[Dict[str, Any]]]:
        """(key version, transactional id, value version, value fields); id None = unknown key version."""
        if key is None:
            raise RecordParseError('Cannot invoke "java.nio.ByteBuffer.getShort()" because "buffer" is null')
        try:
            kr = WireReader(key)
            key_version = kr.int16()
            if key_version != 0:
                return key_version, None, None, None
            transactional_id = read_message(TRANSACTION_LOG_KEY, kr, key_version)["TransactionalId"]
            if value is None:
                return key_version, transactional_id, None, None
            vr = WireReader(value)
            version = vr.int16()
            if version not in TRANSACTION_LOG_VALUE.valid:
                raise RecordParseError(f"Unknown version {version} from the transaction log message value")
            v = read_message(TRANSACTION_LOG_VALUE, vr, version)
        except JavaError as e:
            raise _abort(e) from None
        state = STATES.get(v["TransactionStatus"])
        if state is None:
            raise RecordParseError(f"Unknown transaction state id {v['TransactionStatus']} "
                                   "from the transaction status message")
        if v["ClientTransactionVersion"] not in TRANSACTION_VERSIONS:
            raise RecordParseError(f"No feature:transaction.version with feature level "
                                   f"{v['ClientTransactionVersion']}")
        if state != "Empty" and v["TransactionPartitions"] is None:
            raise RecordParseError(
                'Cannot invoke "java.util.List.forEach(java.util.function.Consumer)" because the return '
                'value of "org.apache.kafka.coordinator.transaction.generated.TransactionLogValue.'
                'transactionPartitions()" is null')
        return key_version, transactional_id, version, v

    def parse(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> Tuple[Optional[str], Optional[str]]:
        key_version, transactional_id, _, v = self._read(key, value)
        if transactional_id is None:
            self.skipped += 1
            return f"unknown::version={key_version}", None
        key_text = f"transaction_metadata::transactionalId={transactional_id}"
        if v is None:
            return key_text, "<DELETE>"
        state = STATES[v["TransactionStatus"]]
        groups: List[Tuple[str, List[int]]] = []
        if state != "Empty":
            groups = [(p["Topic"], p["PartitionIds"]) for p in v["TransactionPartitions"]]
        payload = (f"producerId:{v['ProducerId']},producerEpoch:{v['ProducerEpoch']},state={state},"
                   f"partitions={format_partitions(groups)},"
                   f"txnLastUpdateTimestamp={v['TransactionLastUpdateTimestampMs']},"
                   f"txnTimeoutMs={v['TransactionTimeoutMs']}")
        return key_text, payload

    def decode_json(self, offset: int, key: Optional[bytes], value: Optional[bytes]) -> JsonDecoded:
        """Key ``{"version": 0, "data": {"transactionalId": ...}}``; value ``{"version": V, "state": NAME,
        "data": {...every TransactionLogValue field...}}`` (null for a tombstone)."""
        key_version, transactional_id, version, v = self._read(key, value)
        if transactional_id is None:
            return JsonDecoded(RAW, RAW, f"unknown::version={key_version}")
        key_tree = {"version": key_version,
                    "data": to_json(TRANSACTION_LOG_KEY, {"TransactionalId": transactional_id}, key_version)}
        if v is None:
            return JsonDecoded(key_tree, None)
        return JsonDecoded(key_tree, {"version": version, "state": STATES[v["TransactionStatus"]],
                                      "data": plain(to_json(TRANSACTION_LOG_VALUE, v, version))})
