"""bench/run.py works: a --quick run of two cheap benchmarks writes JSON figures of sane types.

No timing is asserted: performance is measured by bench/run.py, never by a unit test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_run_writes_json_figures(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--only", "scan,verify-index",
         "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())

    machine = doc["machine"]
    assert isinstance(machine["cores"], int) and machine["cores"] >= 1
    assert machine["decoders"] and all(isinstance(d["backend"], str) and d["backend"] for d in machine["decoders"])
    assert machine["peers"]  # versions of kafka-python, aiokafka, ... (None when not installed)

    rows = {r["id"]: r for r in doc["rows"]}
    assert {"scan", "verify-index"} <= set(rows)
    assert not any(r["id"].startswith(("decode", "dump-segment", "spark-export")) for r in doc["rows"])
    for row_id in ("scan", "verify-index"):
        row = rows[row_id]
        assert isinstance(row["figure"], float) and row["figure"] > 0
        assert row["unit"] == "GB/s"
        assert isinstance(row["peak_rss_mb"], float) and row["peak_rss_mb"] > 0
        assert isinstance(row["decoder"], str) and row["decoder"]
        assert row["met"] in (True, False, None)
    assert "cat > /dev/null" in rows["scan"]["peers"]
    if machine.get("kafka_oracle"):  # Kafka's own index check ran on the same files, in the same run
        assert rows["verify-index"]["ratios"]["Kafka dump-log --verify-index-only"] > 0
    assert all(isinstance(v, float) and v > 0 for v in rows["scan"]["ratios"].values())

    # The table on stdout names both rows and the machine.
    assert "verify-index" in proc.stdout and "machine:" in proc.stdout
    # Inputs live in a temp dir under --dir, removed afterwards.
    assert not list(tmp_path.glob("kstore-bench-*"))


def test_startup_bench_prints_every_ratio(tmp_path):
    """bench/startup.py runs and prints one line per timed command with its ratio to `import click`."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "startup.py"), "-n", "1"],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()[2:]]
    assert [" ".join(r[:-6]) for r in rows] == ["python -c 'import click'", "kstore --version",
                                                "kstore dump-segment --help", "kstore --help"]
    assert rows[0][-1] == rows[0][-4] == "1.00x" and all(float(r[-1].rstrip("x")) > 0 for r in rows)
