"""``kstore spark-export --master spark://127.0.0.1:PORT`` on a standalone cluster started here.

A master and two workers from the pyspark installation (``bin/spark-class``), loopback only;
the CLI runs as a real subprocess; the executors' trace shows they ran kstore from the
zip the launcher ships (not from this tree or any installed copy). The cluster starts once
for the module; its JVMs are stopped by PID whatever happens. One test exports from ``s3://`` (moto).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from tests.spark.conftest import CORPUS_LOGS, arrow_rows, by_key, core_rows, exported_targets  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[2]} exited with {proc.returncode}:\n{path.read_text(errors='replace')}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {text!r} in {path}:\n{path.read_text(errors='replace')}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class Cluster:
    """A master and `workers` workers on 127.0.0.1 (one core each), started once for this module's tests
    (bench/spark_cluster.py starts one too)."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        spark_home = os.path.dirname(pyspark.__file__)
        spark_class = os.path.join(spark_home, "bin", "spark-class")
        self.trace = root / "trace"
        self.trace.mkdir()
        self.env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable)
        self.env.pop("PYTHONPATH", None)
        # Only the workers (and so their executors) trace what they read, and which kstore module read it.
        worker_env = dict(self.env, KSTORE_SPARK_TRACE=str(self.trace))
        self.port, ui = _free_port(), _free_port()
        self.procs: list = []
        master_log = root / "master.log"
        with open(master_log, "w") as log:
            self.procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                 str(self.port), "--webui-port", str(ui)], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                cwd=root))
        _wait_for(master_log, "I have been elected leader", self.procs[0])
        for n in range(1, workers + 1):
            worker_log = root / f"worker{n}.log"
            with open(worker_log, "w") as log:
                self.procs.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                     "--memory", "1g", "--webui-port", str(_free_port()), "--work-dir", str(root / f"work{n}"),
                     f"spark://127.0.0.1:{self.port}"], env=worker_env, stdout=log, stderr=subprocess.STDOUT,
                    cwd=root))
            _wait_for(worker_log, "Successfully registered with master", self.procs[-1])

    def export(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "kstore_cli", "spark-export", *args, "--master", f"spark://127.0.0.1:{self.port}",
               "--json", "--spark-conf", "spark.driver.host=127.0.0.1", "--spark-conf", "spark.executor.memory=768m",
               "--spark-conf", "spark.cores.max=2", "--spark-conf", "spark.executor.cores=1"]
        return subprocess.run(cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=240)

    def traces(self) -> list:
        return [json.loads(line) for f in self.trace.glob("*.jsonl") for line in f.read_text().splitlines()]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)
        assert all(p.poll() is not None for p in self.procs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield started
    finally:
        started.stop()


def _rows(path):
    import pyarrow.dataset as pads

    return by_key(arrow_rows(pads.dataset(str(path), format="parquet", partitioning="hive").to_table(),
                             headers=True))


def test_export_on_a_standalone_cluster_matches_local(tmp_path, spark, cluster):
    from kstore_cli.spark.export import ExportRequest, export_with

    out = tmp_path / "cluster-out"
    done = cluster.export(str(CORPUS_LOGS), "--output", str(out), "--include-headers")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["writer"] == "arrow"  # auto, for a local --output
    # Spark's writer on the same cluster.
    spark_out = tmp_path / "cluster-out-spark"
    done = cluster.export(str(CORPUS_LOGS), "--output", str(spark_out), "--include-headers", "--writer", "spark")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["writer"] == "spark"
    # Executors on the workers read every segment, with kstore from the zip the launcher shipped.
    traces = [t for t in cluster.traces() if not t["log"].startswith("s3://")]
    assert traces and {t["log"] for t in traces} == {s.log for t in exported_targets([CORPUS_LOGS]) for s in t.segments
                                                     if os.path.getsize(s.log)}
    modules = {t["module"] for t in traces}
    assert all(m.startswith("./kstore_cli.zip/") for m in modules), modules  # relative to the executor dir
    # ... and with the same record decoder as this process (the native one comes out of the zip).
    from kstore_cli.record import decode

    assert {t["decoder"] for t in traces} == {decode.BACKEND}

    local = tmp_path / "local-out"
    export_with(spark, ExportRequest([str(CORPUS_LOGS)], str(local), include_headers=True))
    expected = by_key(core_rows([CORPUS_LOGS], headers=True))
    assert summary["records"] == len(expected)
    assert _rows(out) == _rows(spark_out) == _rows(local) == expected


def test_export_from_s3_on_two_workers_matches_local(tmp_path, cluster, gen_dir):
    from tests.s3server import s3_server

    with s3_server() as server:
        uri = server.upload(gen_dir, "gen")
        out = tmp_path / "s3-out"
        options = [a for k, v in server.options().items() for a in ("--storage-option", f"{k}={v}")]
        done = cluster.export(uri, "--output", str(out), "--include-headers", "--max-bytes-per-partition", "65536",
                              *options)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = by_key(core_rows([gen_dir], headers=True))
    assert json.loads(done.stdout.strip().splitlines()[-1])["records"] == len(expected)
    assert _rows(out) == expected
    traces = [t for t in cluster.traces() if t["log"].startswith(uri + "/")]
    # Both workers' executors read ranged slices of the objects (each worker traces into its own files).
    assert traces and all(0 < t["largestRead"] and t["remoteReads"] >= 1 for t in traces)
    assert len({f.name for f in cluster.trace.glob("trace-*.jsonl")}) >= 2
