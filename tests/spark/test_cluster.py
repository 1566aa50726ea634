"""``kstore spark-export --master spark://127.0.0.1:PORT`` on a standalone cluster started here.

A master and a worker from the pyspark installation (``bin/spark-class``), loopback only;
the CLI runs as a real subprocess; the executors' trace shows they ran kstore from the
zip the launcher ships (not from this tree or any installed copy). Both JVMs are stopped
by PID whatever happens.
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


def test_export_on_a_standalone_cluster_matches_local(tmp_path, spark):
    from kstore_cli.spark.export import ExportRequest, export_with

    spark_home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    trace = tmp_path / "trace"
    trace.mkdir()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable)
    env.pop("PYTHONPATH", None)
    # Only the worker (and so its executors) traces what it reads, and which kstore module read it.
    worker_env = dict(env, KSTORE_SPARK_TRACE=str(trace))
    port, ui, worker_ui = _free_port(), _free_port(), _free_port()
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    procs = []
    try:
        with open(master_log, "w") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                 "--webui-port", str(ui)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path))
        _wait_for(master_log, "I have been elected leader", procs[0])
        with open(worker_log, "w") as log:
            procs.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                 "--memory", "2g", "--webui-port", str(worker_ui), "--work-dir", str(tmp_path / "work"),
                 f"spark://127.0.0.1:{port}"], env=worker_env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path))
        _wait_for(worker_log, "Successfully registered with master", procs[1])

        out = tmp_path / "cluster-out"
        cmd = [sys.executable, "-m", "kstore_cli", "spark-export", str(CORPUS_LOGS), "--output", str(out),
               "--include-headers", "--master", f"spark://127.0.0.1:{port}", "--json",
               "--spark-conf", "spark.driver.host=127.0.0.1", "--spark-conf", "spark.executor.memory=1g",
               "--spark-conf", "spark.cores.max=2"]
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert summary["writer"] == "arrow"  # auto, for a local --output
        # Spark's writer on the same cluster.
        spark_out = tmp_path / "cluster-out-spark"
        cmd[cmd.index(str(out))] = str(spark_out)
        done = subprocess.run(cmd + ["--writer", "spark"], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.strip().splitlines()[-1])["writer"] == "spark"
        # Executors on the worker read every segment, with kstore from the zip the launcher shipped.
        traces = [json.loads(line) for f in trace.glob("*.jsonl") for line in f.read_text().splitlines()]
        assert traces and {t["log"] for t in traces} == {s.log for t in exported_targets([CORPUS_LOGS]) for s in t.segments
                                                         if os.path.getsize(s.log)}
        modules = {t["module"] for t in traces}
        assert all(m.startswith("./kstore_cli.zip/") for m in modules), modules  # relative to the executor dir
        # ... and with the same record decoder as this process (the native one comes out of the zip).
        from kstore_cli.record import decode

        assert {t["decoder"] for t in traces} == {decode.BACKEND}
    finally:
        for proc in reversed(procs):
            _stop(proc)
    assert all(p.poll() is not None for p in procs)

    local = tmp_path / "local-out"
    export_with(spark, ExportRequest([str(CORPUS_LOGS)], str(local), include_headers=True))
    import pyarrow.dataset as pads

    def rows(path):
        return by_key(arrow_rows(pads.dataset(str(path), format="parquet", partitioning="hive").to_table(),
                                 headers=True))

    expected = by_key(core_rows([CORPUS_LOGS], headers=True))
    assert summary["records"] == len(expected)
    assert rows(out) == rows(spark_out) == rows(local) == expected
