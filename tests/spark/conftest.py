"""Shared fixtures of the Spark tests: one local[2] session, a generated data dir, and the
rows kstore's core reader gives (the reference every export is compared with)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

from kstore_cli.record.batch import parse_control_key
from kstore_cli.log.logdir import resolve
from kstore_cli.record.reader import read_batches

from tests.spark.datagen import write_data_dir

CORPUS_LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "kafka-corpus" / "logs"
TXN_PARTITION = CORPUS_LOGS / "transactional-0"

GENERATED_TOPICS = {"orders": (2, 3000), "clicks": (3, 1500), "audit.log": (1, 800)}


def pytest_collection_modifyitems(items):
    for item in items:
        if "/tests/spark/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark():
    """One local[2] session for every Spark test (with the source registered)."""
    pytest.importorskip("pyspark")
    from kstore_cli.spark import register
    from kstore_cli.spark.session import build_session

    session = build_session("local[2]", {
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "2g",
    })
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def gen_dir(tmp_path_factory) -> Path:
    """A generated multi-topic data dir: several segments per partition, all codecs, headers."""
    root = tmp_path_factory.mktemp("gen-data")
    write_data_dir(str(root), GENERATED_TOPICS, seed=7, segment_bytes=24 * 1024, index_interval=1024)
    return root


def record_row(topic: str, partition: int, batch, record, *, headers: bool = False) -> dict:
    """A row as Spark's Kafka source gives it, from kstore's core objects (timestamps in us)."""
    row = {
        "key": record.key,
        "value": record.value,
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestamp": record.timestamp * 1000,
        "timestampType": batch.timestamp_type,
    }
    if headers:
        hs = [] if record.is_legacy else [(h.key, h.value) for h in record.headers]
        row["headers"] = hs or None
    return row


def exported_targets(paths: Iterable[str], internal: bool = False):
    """The partitions an export of `paths` reads: internal topics (``__*``) of a data dir only with `internal`."""
    out = []
    for p in paths:
        for target in resolve([str(p)]):
            named = os.path.abspath(target.partition.path) == os.path.abspath(str(p)) or target.only is not None
            if internal or named or not target.partition.topic.startswith("__"):
                out.append(target)
    return out


def core_rows(paths: Iterable[str], *, headers: bool = False,
              skip: Optional[Set[Tuple[str, int, int]]] = None, internal: bool = False) -> List[dict]:
    """Every non-control record under `paths` through the core reader, in log order (internal topics
    of a data dir only with `internal`, as the export)."""
    out = []
    for target in exported_targets(paths, internal):
        part = target.partition
        for segment in target.segments:
            for batch in read_batches(segment.log):
                if batch.is_control:
                    continue
                for record in batch.records():
                    if skip and (part.topic, part.partition, record.offset) in skip:
                        continue
                    out.append(record_row(part.topic, part.partition, batch, record, headers=headers))
    return out


def transaction_outcomes(partition_dir: str) -> Dict[str, Set[int]]:
    """Offsets of aborted and of still-open transactional records, by replaying the markers
    (independent of the .txnindex files the source uses)."""
    pending: Dict[int, List[int]] = {}
    aborted: Set[int] = set()
    for target in resolve([partition_dir]):
        for segment in target.segments:
            for batch in read_batches(segment.log):
                if batch.magic < 2 or not batch.is_transactional:
                    continue
                if batch.is_control:
                    record = batch.records()[0]
                    _v, kind = parse_control_key(record.key)
                    offsets = pending.pop(batch.producer_id, [])
                    if kind == 0:
                        aborted.update(offsets)
                    continue
                pending.setdefault(batch.producer_id, []).extend(r.offset for r in batch.records())
    open_ = {o for offsets in pending.values() for o in offsets}
    return {"aborted": aborted, "open": open_}


def arrow_rows(table, *, headers: bool = False) -> List[dict]:
    """Rows of an Arrow table with timestamps as integer microseconds."""
    import pyarrow as pa

    ts = table.column("timestamp").cast(pa.int64()).to_pylist()
    cols = ["key", "value", "topic", "partition", "offset", "timestampType"] + (["headers"] if headers else [])
    data = {c: table.column(c).to_pylist() for c in cols}
    out = []
    for i in range(table.num_rows):
        row = {c: data[c][i] for c in cols}
        row["timestamp"] = ts[i]
        if headers and row["headers"] is not None:
            row["headers"] = [(h["key"], h["value"]) for h in row["headers"]]
        out.append(row)
    return out


def by_key(rows: List[dict]) -> List[dict]:
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


PYTHON = sys.executable


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: runs Spark (a shared local[2] session, or a standalone cluster)")
