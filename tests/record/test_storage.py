"""Remote objects (kstore_cli.record.storage) against a real S3-compatible server (moto on 127.0.0.1):
ranged reads frame the same batches and columns as the local mmap read, window by window (reads no
larger than the read-ahead, a batch cut by a window carried over); a dropped connection is retried;
a permanent fault is one error naming the object and the byte range; an error no retry cures (a missing
bucket, access denied, a name that does not resolve) is that error at once, a transient answer (5xx,
SlowDown) is retried; logdir resolves a URI as it resolves the local folder."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import pytest

from kstore_cli.errors import FileUnreadableError, RemoteReadError
from kstore_cli.log import logdir
from kstore_cli.record import storage
from kstore_cli.record.columns import RecordColumns, read_columns
from kstore_cli.record.reader import map_file, read_batches
from tests.s3server import FaultProxy, s3_server

pytest.importorskip("pyarrow")

CORPUS_LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "kafka-corpus" / "logs"


@pytest.fixture(scope="module")
def server():
    with s3_server() as srv:
        srv.uri = srv.upload(CORPUS_LOGS, "corpus")
        yield srv


@pytest.fixture
def remote(server):
    storage.configure(server.options())
    yield server
    storage.configure(None)


def _logs():
    return sorted(p for p in CORPUS_LOGS.rglob("*.log") if p.stat().st_size)


def _uri(server, path: Path) -> str:
    return f"{server.uri}/{path.relative_to(CORPUS_LOGS).as_posix()}"


def _batches(source, **kw):
    return [(b.position, b.size, bytes(b.view) if hasattr(b, "view") else None, b.is_valid)
            for b in read_batches(source, check_crc=True, **kw)]


@pytest.mark.parametrize("read_ahead", [700, 64 * 1024])
def test_remote_batches_equal_local_ones_in_small_windows(remote, monkeypatch, read_ahead):
    # Windows smaller than many batches: every batch is carried over at least once.
    monkeypatch.setattr(storage, "READ_AHEAD", read_ahead)
    monkeypatch.setattr(storage, "FIRST_READ", 100)
    storage.ReadStats.largest = 0
    for log in _logs():
        local = _batches(str(log))
        assert local
        assert _batches(_uri(remote, log)) == local, log
        # From a batch boundary inside the file, up to another.
        mid = local[len(local) // 2][0]
        assert _batches(_uri(remote, log), start=mid, end=local[-1][0]) == \
            _batches(str(log), start=mid, end=local[-1][0])
    assert 0 < storage.ReadStats.largest <= read_ahead  # no request above the read-ahead


def _columns(source):
    out = []
    for item in read_columns(source, check_crc=True, with_headers=True):
        out.append(tuple(item) if isinstance(item, RecordColumns) else (item.position, item.size))
    return out


def test_remote_columns_equal_local_ones(remote, monkeypatch):
    monkeypatch.setattr(storage, "READ_AHEAD", 4096)
    decoded = 0
    for log in _logs():
        local = _flatten(_columns(str(log)))
        # Runs may split at window ends: compare what they decode to, row for row.
        assert _flatten(_columns(_uri(remote, log))) == local, log
        decoded += local[0]
    assert decoded > 1000  # plain v2 runs were decoded as columns, not only handed out as batches


def _flatten(items):
    rows, others = [], []
    for item in items:
        if len(item) == 2:
            others.append(item)
            continue
        offsets = item[4]
        rows.append((item[3], len(offsets), bytes(item[8]), bytes(item[11])))
    total = sum(r[1] for r in rows)
    data = b"".join(r[2] for r in rows), b"".join(r[3] for r in rows)
    return total, data, others


def test_small_files_read_whole_and_sizes_from_the_listing(remote):
    index = next(CORPUS_LOGS.rglob("*.index"))
    assert bytes(map_file(_uri(remote, index))) == index.read_bytes()
    log = _logs()[0]
    assert storage.stat(_uri(remote, log))[0] == log.stat().st_size
    with pytest.raises(FileUnreadableError, match="no such object"):
        storage.stat(f"{remote.uri}/nope/00000000000000000000.log")


def test_a_uri_resolves_to_the_partitions_of_the_local_folder(remote):
    def shape(targets, root):
        return sorted((t.partition.topic, t.partition.partition,
                       [(s.base_offset, os.path.basename(s.log), bool(s.index), bool(s.timeindex), bool(s.txnindex),
                         s.log_size) for s in t.segments],
                       sorted(os.path.basename(p) for p in t.partition.snapshots.values()))
                      for t in targets)

    local = logdir.resolve([str(CORPUS_LOGS)])
    remote_targets = logdir.resolve([remote.uri])
    assert shape(remote_targets, remote.uri) == shape(local, str(CORPUS_LOGS))
    assert all(t.partition.path.startswith(remote.uri + "/") for t in remote_targets)
    one = _logs()[0]
    [target] = logdir.resolve([_uri(remote, one)])
    assert [s.log for s in target.segments] == [_uri(remote, one)]


def test_a_dropped_connection_is_retried(server, monkeypatch):
    proxy = FaultProxy(server.port, faults=2)
    monkeypatch.setattr(storage, "BACKOFF_SECONDS", 0.01)
    storage.configure(server.options(proxy.endpoint))
    try:
        log = _logs()[0]
        assert _batches(_uri(server, log)) == _batches(str(log))
        assert proxy.dropped == 2 and proxy.ranged > 2
    finally:
        storage.configure(None)
        proxy.close()


def test_a_permanent_fault_is_one_error_naming_object_and_range(server, monkeypatch):
    proxy = FaultProxy(server.port, faults=None)
    monkeypatch.setattr(storage, "BACKOFF_SECONDS", 0.01)
    storage.configure(server.options(proxy.endpoint))
    try:
        log = _logs()[0]
        uri = _uri(server, log)
        storage.stat(uri)  # HEAD is not ranged: the object is there
        with pytest.raises(RemoteReadError) as info:
            list(read_batches(uri, start=0, end=100))
        text = str(info.value)
        assert text.startswith(f"{uri}: read of bytes 0-100 failed after {storage.ATTEMPTS} attempts")
        assert "\n" not in text
        assert proxy.dropped == storage.ATTEMPTS
        assert info.value.exit_status == 3
    finally:
        storage.configure(None)
        proxy.close()


def test_an_option_the_filesystem_does_not_take_is_a_usage_error(server):
    from kstore_cli.errors import UsageError

    storage.configure({"no_such_keyword": "1"})
    try:
        with pytest.raises(UsageError, match="no_such_keyword"):
            storage.filesystem(server.uri)
    finally:
        storage.configure(None)


@pytest.fixture
def backoffs(monkeypatch):
    """The pauses _retrying makes between attempts (not slept); other threads (the server's, a Spark
    session's) sleep as before."""
    pauses, sleep, this = [], time.sleep, threading.get_ident()
    monkeypatch.setattr(storage.time, "sleep",
                        lambda s: pauses.append(s) if threading.get_ident() == this else sleep(s))
    return pauses


def test_a_missing_bucket_fails_at_once(remote, backoffs):
    uri = "s3://no-such-bucket/data"
    started = time.monotonic()
    with pytest.raises(RemoteReadError) as info:
        storage.list_tree(uri)
    assert time.monotonic() - started < 0.5
    text = str(info.value)
    assert text.startswith(f"{uri}: listing failed: AWS Error NO_SUCH_BUCKET during ListObjectsV2 operation: "), text
    assert "attempts" not in text and "\n" not in text and info.value.exit_status == 3
    assert backoffs == []


def test_a_name_that_does_not_resolve_fails_at_once(server, backoffs):
    storage.configure({**server.options(), "endpoint_override": "http://no-such-host.invalid:9000"})
    try:
        with pytest.raises(RemoteReadError, match="listing failed: .*curlCode: 6"):
            storage.list_tree(server.uri)
    finally:
        storage.configure(None)
    assert backoffs == []


def test_a_refused_connection_is_retried(server, backoffs):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        storage.configure({**server.options(), "endpoint_override": f"http://127.0.0.1:{closed.getsockname()[1]}"})
        with pytest.raises(RemoteReadError, match=f"listing failed after {storage.ATTEMPTS} attempts: .*curlCode: 7"):
            storage.list_tree(server.uri)
    finally:
        storage.configure(None)
        closed.close()
    assert len(backoffs) == storage.ATTEMPTS - 1


@pytest.mark.parametrize("answer, says", [((403, "AccessDenied"), "ACCESS_DENIED"),
                                         ((403, "InvalidAccessKeyId"), "ACCESS_DENIED|INVALID_ACCESS_KEY_ID"),
                                         ((400, "ExpiredToken"), r"UNKNOWN \(HTTP status 400\)")])
def test_a_refused_read_is_one_error_at_once(server, backoffs, answer, says):
    proxy = FaultProxy(server.port, faults=None, answer=answer)
    storage.configure(server.options(proxy.endpoint))
    try:
        # A read longer than S3's error body: the AWS SDK writes that body into the read's buffer, and one
        # that does not fit is "INTERNAL_FAILURE: Failed to flush response stream", taken for transient.
        log = _logs()[0]
        uri = _uri(server, log)
        size = min(log.stat().st_size, storage.FIRST_READ)
        with pytest.raises(RemoteReadError) as info:
            list(read_batches(uri))
        text = str(info.value)
        assert text.startswith(f"{uri}: read of bytes 0-{size} failed: AWS Error "), text
        assert re.search(f"AWS Error ({says})", text), text  # the SDK reads the error's body or not
        assert proxy.ranged == 1 and backoffs == []
    finally:
        storage.configure(None)
        proxy.close()


@pytest.mark.parametrize("answer", [(503, "SlowDown"), (500, "InternalError"), (503, "ServiceUnavailable"),
                                    (429, "TooManyRequests")])
def test_a_transient_answer_is_retried(server, backoffs, answer):
    proxy = FaultProxy(server.port, faults=2, answer=answer)
    storage.configure(server.options(proxy.endpoint))
    try:
        log = _logs()[0]
        assert _batches(_uri(server, log)) == _batches(str(log))
        assert proxy.dropped == 2 and backoffs == [storage.BACKOFF_SECONDS, 2 * storage.BACKOFF_SECONDS]
    finally:
        storage.configure(None)
        proxy.close()


def test_an_unknown_error_is_not_retried():
    assert not storage.transient(OSError("AWS Error UNKNOWN (HTTP status 307) during GetObject operation: "
                                         "TemporaryRedirect"))
    assert storage.transient(ConnectionResetError("Connection reset by peer"))
    assert not storage.transient(FileNotFoundError("Path does not exist"))
