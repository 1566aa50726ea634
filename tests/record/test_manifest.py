"""Every batch and record Kafka lists in the corpus MANIFEST is what kstore's reader returns."""

from __future__ import annotations

import pytest

from kstore_cli.errors import KstoreError
from kstore_cli.record.reader import read_batches
from tests.conftest import CORPUS, load_manifest

LOG_FILES = sorted(name for name, f in load_manifest()["files"].items() if f.get("kind") == "log")


def _java_message(error: dict) -> str:
    """The message Kafka's exception carried, without a wrapping exception's class name."""
    message = error["message"]
    if message.startswith("java.io.IOException: "):
        message = message[len("java.io.IOException: ") :]
    return message


def batch_fields(batch, skip=()) -> dict:
    fields = {
        "baseOffset": None if "baseOffset" in skip else batch.base_offset,
        "lastOffset": batch.last_offset,
        "count": batch.count,
        "position": batch.position,
        "size": batch.size,
        "magic": batch.magic,
        "compression": batch.compression_name,
        "timestampType": batch.timestamp_type_name,
        "maxTimestamp": batch.max_timestamp,
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "baseSequence": batch.base_sequence,
        "lastSequence": batch.last_sequence,
        "isTransactional": batch.is_transactional,
        "isControl": batch.is_control,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "crc": batch.crc,
        "nextOffset": batch.next_offset,
        "deleteHorizonMs": batch.delete_horizon_ms,
        "isValid": batch.is_valid,
    }
    return {k: v for k, v in fields.items() if k not in skip}


def record_fields(record) -> dict:
    fields = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": None if record.key is None else record.key.hex(),
        "value": None if record.value is None else record.value.hex(),
        "headers": [[h.key, None if h.value is None else h.value.hex()] for h in record.headers],
        "sequence": record.sequence,
        "sizeInBytes": record.size_in_bytes,
    }
    if record.is_legacy:
        fields.update(legacyCrc=record.crc, legacyIsValid=record.is_valid, legacyAttributes=record.attributes)
    return fields


@pytest.mark.parametrize("name", LOG_FILES)
def test_log_matches_manifest(name: str) -> None:
    expected = load_manifest()["files"][name]
    batches = []
    iteration_error = expected.get("batchIterationError")
    try:
        for batch in read_batches(CORPUS / name):
            batches.append(batch)
    except KstoreError as exc:
        assert iteration_error is not None, f"unexpected error {exc}"
        assert exc.message == iteration_error["message"].replace(name, str(CORPUS / name))
        assert exc.position == expected["bytesCoveredByBatches"]
    else:
        assert iteration_error is None
    assert len(batches) == len(expected["batches"])
    covered = sum(b.size for b in batches)
    assert covered == expected["bytesCoveredByBatches"]

    for batch, want in zip(batches, expected["batches"]):
        field_errors = want.get("fieldErrors", {})
        for field, error in field_errors.items():
            with pytest.raises(KstoreError) as info:
                getattr(batch, {"baseOffset": "base_offset"}[field])
            assert info.value.message == _java_message(error)
        got = batch_fields(batch, skip=field_errors)
        shared = [k for k in got if k in want]
        assert len(shared) >= 15
        assert {k: got[k] for k in shared} == {k: want[k] for k in shared}, batch.position
        if "ensureValidError" in want:
            with pytest.raises(KstoreError) as info:
                batch.ensure_valid()
            assert info.value.message == want["ensureValidError"]["message"]
        else:
            batch.ensure_valid()
        if "recordIterationError" in want:
            with pytest.raises(KstoreError) as info:
                batch.records()
            assert info.value.message == _java_message(want["recordIterationError"])
            continue
        records = batch.records()
        assert len(records) == len(want["records"])
        for record, want_record in zip(records, want["records"]):
            got_record = record_fields(record)
            got_record["legacyTimestampType"] = batch.timestamp_type_name
            shared = [k for k in got_record if k in want_record]
            assert len(shared) >= 7
            assert {k: got_record[k] for k in shared} == {k: want_record[k] for k in shared}, (batch.position, record.offset)


# ----------------------------------------------------------------- indexes, snapshots, checkpoints

from kstore_cli.log.checkpoint import (  # noqa: E402
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from kstore_cli.log.index import OffsetIndex, TimeIndex, TransactionIndex  # noqa: E402
from kstore_cli.log.snapshot import read_snapshot  # noqa: E402


def _files_of(*kinds: str):
    return sorted(name for name, f in load_manifest()["files"].items() if f.get("kind") in kinds)


@pytest.mark.parametrize("name", _files_of("offset-index", "time-index"))
def test_index_matches_manifest(name: str) -> None:
    want = load_manifest()["files"][name]
    cls = OffsetIndex if want["kind"] == "offset-index" else TimeIndex
    index = cls(CORPUS / name)
    assert index.base_offset == want["baseOffset"]
    assert index.entries == want["entriesAsReadByKafka"]
    zero_slots = want.get("trailingZeroSlots", 0)
    expected = [list(e) for e in want["entries"]]
    if zero_slots:
        expected += [list(want["trailingZeroSlotsReadAs"])] * zero_slots
    assert [list(e) for e in index] == expected
    if zero_slots:
        assert index.entries - index.zero_tail_start() == zero_slots
    if want["sanityCheck"] == "ok":
        index.sanity_check()
    else:
        with pytest.raises(KstoreError) as info:
            index.sanity_check()
        relative = want["sanityCheck"]["message"]
        assert info.value.message == relative.replace(name, str((CORPUS / name).resolve()))


@pytest.mark.parametrize("name", _files_of("transaction-index"))
def test_txnindex_matches_manifest(name: str) -> None:
    want = load_manifest()["files"][name]
    got = [
        {
            "version": t.version,
            "producerId": t.producer_id,
            "firstOffset": t.first_offset,
            "lastOffset": t.last_offset,
            "lastStableOffset": t.last_stable_offset,
        }
        for t in TransactionIndex(CORPUS / name)
    ]
    assert got == want["abortedTxns"]
    TransactionIndex(CORPUS / name).sanity_check()


@pytest.mark.parametrize("name", _files_of("producer-state-snapshot"))
def test_snapshot_matches_manifest(name: str) -> None:
    want = load_manifest()["files"][name]
    snapshot = read_snapshot(CORPUS / name)
    assert snapshot.version == want["version"]
    assert snapshot.offset == want["snapshotOffset"]
    got = [
        {
            "producerId": e.producer_id,
            "producerEpoch": e.producer_epoch,
            "coordinatorEpoch": e.coordinator_epoch,
            "lastTimestamp": e.timestamp,
            "currentTxnFirstOffset": e.open_transaction_first_offset,
            "lastSequence": e.last_sequence,
            "lastOffset": e.last_offset,
            "offsetDelta": e.offset_delta,
            "firstSequence": e.first_sequence,
            "firstOffset": e.first_offset,
        }
        for e in snapshot.producers
    ]
    assert got == want["producers"]


@pytest.mark.parametrize("name", _files_of("leader-epoch-checkpoint", "partition-metadata", "offset-checkpoint"))
def test_text_files_match_manifest(name: str) -> None:
    want = load_manifest()["files"][name]
    path = CORPUS / name
    if want["kind"] == "leader-epoch-checkpoint":
        assert [{"epoch": e, "startOffset": o} for e, o in read_leader_epoch_checkpoint(path)] == want["entries"]
    elif want["kind"] == "partition-metadata":
        assert read_partition_metadata(path) == {"version": want["version"], "topicId": want["topicId"]}
    else:
        got = {f"{topic}-{partition}": offset for (topic, partition), offset in read_offset_checkpoint(path).items()}
        assert got == want["entries"]
