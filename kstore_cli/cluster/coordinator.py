"""What Kafka's group and transaction coordinators share: the partition a key lives in, and the loading
loop over one of their internal topic's partitions (CoordinatorLoaderImpl,
TransactionStateManager.loadTransactionMetadata)."""

from __future__ import annotations

from typing import Iterator, Tuple

from kstore_cli.log.logdir import Partition
from kstore_cli.record.batch import Batch
from kstore_cli.record.reader import read_batches
from kstore_cli.record.text import java_string_hash


def partition_for(key: str, num_partitions: int) -> int:
    """The coordinators' partitionFor: ``Utils.abs(key.hashCode) % numPartitions``."""
    h = java_string_hash(key)
    h = 0 if h == -(1 << 31) else abs(h)  # Utils.abs maps Integer.MIN_VALUE to 0
    return h % num_partitions


def coordinator_batches(partition: Partition) -> Iterator[Tuple[str, Batch]]:
    """Every batch of a coordinator partition in offset order, with its segment's ``.log`` path: CRCs
    checked, and a batch that fails ``ensure_valid`` stops the load (raised)."""
    for segment in partition.segments:
        for batch in read_batches(segment.log, check_crc=True):
            batch.ensure_valid()
            yield segment.log, batch
