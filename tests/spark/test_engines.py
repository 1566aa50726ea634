"""--engine arrow: the same planned tasks and task writer as Spark's engine, in local processes (no JVM)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kstore_cli.errors import CorruptDataError, UsageError
from kstore_cli.spark.engines import LocalEngine, TaskFailedError
from kstore_cli.spark.export import ExportRequest, export_on, export_with, run_export

from tests.spark.conftest import CORPUS_LOGS, TXN_PARTITION

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "fixtures" / "kafka-golden" / "inputs"


def _files(out: Path) -> dict:
    """{relative path with the job id taken out: the file's table (with its metadata)}."""
    found = {}
    for path in sorted(glob.glob(str(out / "**" / "*.parquet"), recursive=True)):
        name = re.sub(r"-[0-9a-f]{32}\.", "-JOB.", os.path.relpath(path, out))
        found[name] = pq.read_table(path, partitioning=None)
    return found


@pytest.mark.parametrize("partition_by", ["topic,partition", "date"])
def test_the_arrow_engine_writes_the_spark_engines_files_row_for_row(spark, gen_dir, tmp_path, partition_by):
    common = dict(include_headers=True, include_metadata=True, partition_by=partition_by,
                  max_bytes_per_partition=64 * 1024)
    calls = []
    on_spark = export_with(spark, ExportRequest([str(gen_dir), str(TXN_PARTITION)], str(tmp_path / "spark"),
                                                writer="arrow", **common), progress=lambda *a: calls.append(a))
    # Spark's engine reports through accumulators, polled: the last report is the whole job
    assert calls[-1] == (on_spark.tasks, on_spark.tasks, on_spark.records, on_spark.bytes_in, on_spark.bytes_in)
    jobs = spark.sparkContext.defaultParallelism
    local = run_export(ExportRequest([str(gen_dir), str(TXN_PARTITION)], str(tmp_path / "local"), engine="arrow",
                                     jobs=jobs, **common))
    assert local.engine == "arrow" and on_spark.engine == "spark"
    assert local.records == on_spark.records > 10000 and local.tasks == on_spark.tasks > 4
    spark_files, local_files = _files(tmp_path / "spark"), _files(tmp_path / "local")
    assert sorted(spark_files) == sorted(local_files)
    for name, table in spark_files.items():
        assert local_files[name].equals(table, check_metadata=True), name
    assert (tmp_path / "local" / "_SUCCESS").exists() and not (tmp_path / "local" / "_temporary").exists()


def test_progress_reports_running_totals_up_to_the_summary(gen_dir, tmp_path):
    calls = []
    summary = run_export(ExportRequest([str(gen_dir)], str(tmp_path / "out"), engine="arrow", jobs=2,
                                       max_bytes_per_partition=64 * 1024), progress=lambda *a: calls.append(a))
    assert calls[0] == (0, summary.tasks, 0, 0, summary.bytes_in)
    assert calls[-1] == (summary.tasks, summary.tasks, summary.records, summary.bytes_in, summary.bytes_in)
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_a_failed_task_fails_the_job_and_leaves_no_output(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(CorruptDataError, match="corrupt-badsize-0.*at byte 6658"):
        run_export(ExportRequest([str(GEN_CORRUPT), str(TXN_PARTITION)], str(out), engine="arrow", jobs=2))
    assert not out.exists()


GEN_CORRUPT = GOLDEN / "corrupt-badsize-0"


def test_a_workers_own_error_is_one_line_with_its_class(tmp_path, monkeypatch):
    import kstore_cli.spark.engines as engines

    def broken(job, indexed):
        raise ValueError("disk says no\nsecond line")

    monkeypatch.setattr(engines, "_write_one", broken)
    with pytest.raises(TaskFailedError, match=r"^a task failed: ValueError: disk says no$"):
        export_on(LocalEngine(1), ExportRequest([str(TXN_PARTITION)], str(tmp_path / "out"), engine="arrow"))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kwargs, message", [
    (dict(writer="spark"), "--engine arrow writes with pyarrow"),
    (dict(master="local[2]"), "--master is for --engine spark"),
    (dict(spark_conf={"spark.ui.enabled": "true"}), "--spark-conf is for --engine spark"),
    (dict(engine="flink"), "--engine must be one of spark, arrow"),
])
def test_what_the_arrow_engine_cannot_honour_is_a_usage_error(tmp_path, kwargs, message):
    kwargs.setdefault("engine", "arrow")
    with pytest.raises(UsageError, match=message):
        ExportRequest([str(TXN_PARTITION)], str(tmp_path / "out"), **kwargs)
    with pytest.raises(UsageError, match="--jobs is for --engine arrow"):
        ExportRequest([str(TXN_PARTITION)], str(tmp_path / "out"), jobs=2)


def test_the_arrow_engine_picks_the_arrow_writer_for_any_output(tmp_path):
    assert ExportRequest([str(TXN_PARTITION)], "s3a://bucket/x", engine="arrow").writer == "arrow"
    # the Spark engine's auto: pyarrow's filesystems (s3://, gs://) to the arrow writer, Hadoop's to Spark's
    assert ExportRequest([str(TXN_PARTITION)], "s3://bucket/x").writer == "arrow"
    assert ExportRequest([str(TXN_PARTITION)], "s3a://bucket/x").writer == "spark"


#: pyspark and py4j made uninstalled in a child interpreter (pyarrow stays).
_WITHOUT_PYSPARK = """
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('pyspark', 'py4j'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
sys.argv = ['kstore', 'spark-export', *sys.argv[1:]]
from kstore_cli.cli import main
main()
"""


def test_the_arrow_engine_needs_no_pyspark_and_the_spark_engine_says_what_to_install(tmp_path):
    def export(*args):
        return subprocess.run([sys.executable, "-c", _WITHOUT_PYSPARK, str(CORPUS_LOGS), *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, env={**os.environ, "JAVA_HOME": "/nonexistent"})

    done = export("--output", str(tmp_path / "a"), "--engine", "arrow", "--json")
    assert done.returncode == 0, done.stderr
    assert '"engine": "arrow"' in done.stdout and (tmp_path / "a" / "_SUCCESS").exists()
    done = export("--output", str(tmp_path / "b"))
    assert done.returncode == 3 and done.stderr.count("\n") == 1
    assert "needs pyspark" in done.stderr and "kstore-cli[spark]" in done.stderr
    shutil.rmtree(tmp_path / "a")


def _export_cli(args, tty: bool) -> str:
    """spark-export's stdout, on a pseudo-terminal or a pipe."""
    import pty

    command = [sys.executable, "-m", "kstore_cli", "spark-export", *map(str, args)]
    env = {**os.environ, "COLUMNS": "160"}
    if not tty:
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env).stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=120)
    os.close(leader)
    return out.decode("utf-8", "replace")


def test_a_terminal_gets_progress_and_a_pipe_only_the_summary(gen_dir, tmp_path):
    args = [gen_dir, "--engine", "arrow", "--jobs", "2", "--max-bytes-per-partition", "65536"]
    shown = _export_cli([*args, "-o", tmp_path / "tty"], tty=True)
    assert "exporting" in shown and re.search(r"tasks \d+/\d+", shown) and " rows" in shown
    piped = _export_cli([*args, "-o", tmp_path / "pipe"], tty=False)
    assert piped.count("\n") == 1 and piped.startswith("exported ") and "exporting" not in piped


def test_sparks_own_writer_reports_tasks_and_bytes_but_no_rows(spark, tmp_path):
    calls = []
    summary = export_with(spark, ExportRequest([str(TXN_PARTITION)], str(tmp_path / "out"), writer="spark"),
                          progress=lambda *a: calls.append(a))
    assert calls[0] == (0, summary.tasks, 0, 0, summary.bytes_in)
    assert calls[-1] == (summary.tasks, summary.tasks, -1, summary.bytes_in, summary.bytes_in)
