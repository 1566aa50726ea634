"""CleanerStats: what a cleaning pass read, kept and removed (Kafka's CleanerStats)."""

from __future__ import annotations


class CleanerStats:
    """Kafka's CleanerStats, plus what an operator asks about (tombstones, markers, batches)."""

    __slots__ = ("bytes_read", "bytes_written", "map_bytes_read", "map_messages_read", "messages_read",
                 "invalid_messages_read", "messages_written", "batches_read", "batches_written",
                 "batches_rebuilt", "empty_batches_written", "tombstones_removed", "markers_removed",
                 "aborted_records_removed", "deleted_batch_records", "buffer_utilization", "map_full")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)
        self.buffer_utilization = 0.0
        self.map_full = False

    @property
    def records_removed(self) -> int:
        """Records read and not written, plus those of batches dropped unread (aborted data)."""
        return self.messages_read - self.messages_written + self.deleted_batch_records

    def add(self, other: "CleanerStats") -> None:
        for name in self.__slots__:
            if name not in ("buffer_utilization", "map_full"):
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict:
        return {"bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
                "map_bytes_read": self.map_bytes_read, "map_messages_read": self.map_messages_read,
                "messages_read": self.messages_read, "invalid_messages_read": self.invalid_messages_read,
                "messages_written": self.messages_written, "batches_read": self.batches_read,
                "batches_written": self.batches_written, "batches_rebuilt": self.batches_rebuilt,
                "empty_batches_written": self.empty_batches_written, "tombstones_removed": self.tombstones_removed,
                "markers_removed": self.markers_removed, "aborted_records_removed": self.aborted_records_removed,
                "buffer_utilization": round(self.buffer_utilization, 6), "map_full": self.map_full}
