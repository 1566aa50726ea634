"""kstore log-dirs against what Kafka reports: partitions written by Kafka's own append path (append-log, with the
checkpoints LogManager writes at shutdown), their sizes as UnifiedLog.size (the sum of the segments Kafka lists),
the offset lag as ReplicaManager.getLogEndOffsetLag computes it from Kafka's high watermark and log end offsets,
future and current replicas on one broker, dirs Kafka does not serve; and the JSON LogDirsCommand prints."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kstore_cli.operations.log_dirs import INVALID_OFFSET_LAG, describe_log_dirs, kafka_json, topic_totals
from kstore_cli.record.text import java_hashmap_order, java_string_hash

T = 1_700_000_000_000
UUID = "abcdef0123456789abcdef0123456789"


def _batch(tag: str, n: int) -> dict:
    return {"op": "leader", "leaderEpoch": 0,
            "records": [{"timestamp": T + i, "key": f"{tag}-{i}", "value": f"{tag}-value-{i}" * 8} for i in range(n)]}


def _meta(data_dir: Path, node_id: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "meta.properties").write_text(f"version=1\ncluster.id=c1\nnode.id={node_id}\n")


@pytest.fixture(scope="module")
def cluster(oracle, tmp_path_factory):
    """broker 1: d1 holds t-0 (3 segments, high watermark below the log end) and t-1; d2 holds t-0's -future
    replica (behind) and a -delete dir; broker 2: t-0 and a -future replica of u-0 with no current log, and a
    metadata log (never listed)."""
    root = tmp_path_factory.mktemp("logdirs")
    d1, d2, d3 = root / "b1" / "d1", root / "b1" / "d2", root / "b2" / "d1"
    for d, node in ((d1, 1), (d2, 1), (d3, 2)):
        _meta(d, node)
    args = ["--config", "segment.bytes=1500", "--clock", str(T), "--checkpoints"]
    runs = {
        "b1/t-0": (d1 / "t-0", [_batch("a", 6), _batch("b", 6), _batch("c", 6), {"op": "highWatermark", "offset": 7}]),
        "b1/t-1": (d1 / "t-1", [_batch("x", 2), {"op": "highWatermark", "offset": 2}]),
        "b1/t-0-future": (d2 / f"t-0.{UUID}-future", [_batch("a", 6), _batch("b", 6)]),
        "b2/t-0": (d3 / "t-0", [_batch("a", 6), {"op": "highWatermark", "offset": 6}]),
        "b2/u-0-future": (d3 / f"u-0.{UUID}-future", [_batch("u", 3)]),
    }
    specs, spec_dir = [], tmp_path_factory.mktemp("specs")
    for key, (_path, ops) in runs.items():
        spec = spec_dir / (key.replace("/", "_") + ".jsonl")
        spec.write_text("".join(json.dumps(op) + "\n" for op in ops))
        specs.append(str(spec))
    results = oracle.run_many([("append-log", [str(path), *args]) for path, _ops in runs.values()], stdin_files=specs)
    out = {}
    for key, result in zip(runs, results):
        assert result.rc == 0, result.stderr[-2000:]
        out[key] = result.one("append_summary")
    (d2 / f"t-1.{UUID}-delete").mkdir()
    (d2 / f"t-1.{UUID}-delete" / "00000000000000000000.log").write_bytes(b"")
    (d3 / "__cluster_metadata-0").mkdir()
    (d3 / "__cluster_metadata-0" / "00000000000000000000.log").write_bytes(b"")
    return root, out


def _by_name(report):
    return {(b.broker, os.path.basename(os.path.dirname(d.log_dir)) + "/" + r.name + ("-future" if r.is_future else "")): r
            for b in report.brokers for d in b.log_dirs for r in d.replicas}


def test_sizes_and_lags_are_kafkas(cluster):
    root, kafka = cluster
    got = _by_name(describe_log_dirs([str(root)]))
    assert set(got) == {(1, "b1/t-0"), (1, "b1/t-1"), (1, "b1/t-0-future"), (2, "b2/t-0"), (2, "b2/u-0-future")}
    assert len(kafka["b1/t-0"]["segments"]) >= 2  # a multi-segment log is summed
    for (_broker, key), replica in got.items():
        summary = kafka[key]
        assert replica.size == sum(s["size"] for s in summary["segments"]), key  # UnifiedLog.size
        if not replica.is_future:  # max(highWatermark - logEndOffset, 0)
            assert replica.offset_lag == max(summary["high_watermark"] - summary["log_end_offset"], 0) == 0, key
    future = got[(1, "b1/t-0-future")]
    assert future.offset_lag == kafka["b1/t-0"]["log_end_offset"] - kafka["b1/t-0-future"]["log_end_offset"] > 0
    assert got[(2, "b2/u-0-future")].offset_lag == INVALID_OFFSET_LAG  # no current log on broker 2


def test_volume_totals_and_topic_filter(cluster):
    root, _kafka = cluster
    report = describe_log_dirs([str(root)], topics="u*")
    dirs = [d for b in report.brokers for d in b.log_dirs]
    assert len(dirs) == 3  # dirs without a matching log are listed, with no partitions (LogDirsCommand)
    assert [r.name for d in dirs for r in d.replicas] == ["u-0"]
    st = os.statvfs(dirs[0].log_dir)
    assert dirs[0].total_bytes == st.f_blocks * st.f_frsize and 0 < dirs[0].usable_bytes <= dirs[0].total_bytes
    totals = topic_totals(describe_log_dirs([str(root)]))
    t = next(x for x in totals if x.topic == "t")
    assert (t.partitions, t.replicas, t.future) == (2, 3, 1)
    assert t.size == sum(r.size for (_b, k), r in _by_name(describe_log_dirs([str(root)])).items() if "/t-" in k)


def parse_log_dirs_json(text: str) -> dict:
    """What a consumer of kafka-log-dirs.sh's output reads: version 1, brokers with int ids, each log dir with
    logDir, error, and partitions of "topic-N" with int size and offsetLag and a boolean isFuture."""
    js = json.loads(text)
    assert list(js) == ["brokers", "version"] and js["version"] == 1
    out = {}
    for b in js["brokers"]:
        assert list(b) == ["broker", "logDirs"] and isinstance(b["broker"], int)
        for d in b["logDirs"]:
            assert list(d) == ["partitions", "error", "logDir"] and d["error"] is None
            for p in d["partitions"]:
                assert list(p) == ["partition", "size", "offsetLag", "isFuture"]
                assert isinstance(p["size"], int) and isinstance(p["offsetLag"], int) and isinstance(p["isFuture"], bool)
                topic, _, n = p["partition"].rpartition("-")
                out[(b["broker"], d["logDir"], topic, int(n), p["isFuture"])] = (p["size"], p["offsetLag"])
    return out


def test_json_is_log_dirs_commands(cluster):
    root, _kafka = cluster
    report = describe_log_dirs([str(root)])
    text = json.dumps(kafka_json(report), separators=(",", ":"))
    parsed = parse_log_dirs_json(text)
    assert parsed == {(b.broker, d.log_dir, r.topic, r.partition, r.is_future): (r.size, r.offset_lag)
                      for b in report.brokers for d in b.log_dirs for r in d.replicas}
    assert text.startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-')


def test_java_hashmap_order():
    # keys of LogDirsCommand's HashMaps, as Jackson prints them from a real kafka-log-dirs.sh run
    keys = ["partition", "size", "offsetLag", "isFuture"]
    assert java_hashmap_order(keys, map(java_string_hash, keys)) == keys
    keys = ["logDir", "error", "partitions"]
    assert java_hashmap_order(keys, map(java_string_hash, keys)) == ["partitions", "error", "logDir"]
    # Integer keys (hash = value): 17 and 1 share bucket 1 of a 16-slot table, in insertion order
    assert java_hashmap_order([17, 1, 2], [17, 1, 2]) == [17, 1, 2]
    assert java_hashmap_order([4, 1], [4, 1]) == [1, 4]
    assert java_hashmap_order([4, 1], [4, 1], initial_capacity=2) == [4, 1]  # new HashMap<>(2): 4 slots, 4 -> 0
    many = list(range(100, 0, -1))
    assert java_hashmap_order(many, many) == sorted(many)  # 100 keys: a 256-slot table, buckets = values
