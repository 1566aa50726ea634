"""CleanedTransactionMetadata: the aborted transactions and markers a cleaning pass meets, as Kafka's
Cleaner tracks them while it filters (which batches of aborted transactions to drop, when a marker goes)."""

from __future__ import annotations

import heapq
from typing import Callable, Dict, List, Optional, Tuple

from kstore_cli.record.batch import (
    ABORT,
    COMMIT,
    Batch,
    parse_control_key,
)
from kstore_cli.log.index import AbortedTxn

class CleanedTransactionMetadata:
    """Kafka's CleanedTransactionMetadata: ongoing aborted/committed transactions while walking the log."""

    def __init__(self) -> None:
        self._committed: set = set()
        #: producer id -> [AbortedTxn, last observed batch offset or None]
        self._aborted: Dict[int, list] = {}
        self._heap: List[Tuple[int, int, AbortedTxn]] = []
        self._seq = 0
        #: Where retained ABORT markers' entries go (the new segment's .txnindex), or None.
        self.cleaned_index: Optional[Callable[[AbortedTxn], None]] = None

    def add_aborted_transactions(self, txns: List[AbortedTxn]) -> None:
        for txn in txns:  # a min-heap by first offset (ties: arrival order)
            heapq.heappush(self._heap, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def consume_up_to(self, offset: int) -> None:
        """Aborted transactions starting at or below `offset` become ongoing (what reading any batch does first)."""
        heap = self._heap
        while heap and heap[0][0] <= offset:
            txn = heapq.heappop(heap)[2]
            self._aborted.setdefault(txn.producer_id, [txn, None])  # getOrElseUpdate: the first one stays

    def transaction_view(self) -> Tuple[set, Dict[int, list], int]:
        """What a native run needs to decide transactional data batches itself (record_filter's runs): the
        committed producers (it adds to them), the ongoing aborted ones, and the first offset of the next
        aborted transaction (a batch reaching it goes to :meth:`on_batch_read`)."""
        return self._committed, self._aborted, self._heap[0][0] if self._heap else (1 << 63) - 1

    def on_control_batch_read(self, batch: Batch) -> bool:
        """True when the control batch may be discarded."""
        self.consume_up_to(batch.last_offset)
        records = batch.records()
        if not records:
            return True  # an empty control batch was already cleaned
        _version, control_type = parse_control_key(records[0].key)
        pid = batch.producer_id
        if control_type == ABORT:
            meta = self._aborted.pop(pid, None)
            if meta is not None and meta[1] is not None:
                # Retain the marker until all batches of the transaction are gone.
                if self.cleaned_index is not None:
                    self.cleaned_index(meta[0])
                return False
            return True
        if control_type == COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False

    def to_json(self) -> dict:
        """The state between two segments, for a pass intent (see :class:`PassIntent`)."""
        return {"committed": sorted(self._committed),
                "aborted": [[pid, _txn_json(meta[0]), meta[1]] for pid, meta in self._aborted.items()],
                "heap": [[first, seq, _txn_json(txn)] for first, seq, txn in self._heap], "seq": self._seq}

    @classmethod
    def from_json(cls, state: dict) -> "CleanedTransactionMetadata":
        txns = cls()
        txns._committed = set(state["committed"])
        txns._aborted = {pid: [AbortedTxn(*txn), last] for pid, txn, last in state["aborted"]}
        txns._heap = [(first, seq, AbortedTxn(*txn)) for first, seq, txn in state["heap"]]  # still a heap
        txns._seq = state["seq"]
        return txns

    def on_batch_read(self, batch: Batch) -> bool:
        """True when the data batch belongs to an aborted transaction."""
        self.consume_up_to(batch.last_offset)
        if batch.is_transactional:
            meta = self._aborted.get(batch.producer_id)
            if meta is not None:
                meta[1] = batch.last_offset
                return True
            self._committed.add(batch.producer_id)
        return False


def _txn_json(txn: AbortedTxn) -> list:
    return [txn.version, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset]
