"""Shared fixtures: where the Kafka-written reference data lives."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CORPUS = FIXTURES / "kafka-corpus"
GOLDEN = FIXTURES / "kafka-golden"

settings.register_profile("ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile("long", max_examples=20000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_manifest_cache = {}


def load_manifest() -> dict:
    """The corpus MANIFEST.json (cached)."""
    if "m" not in _manifest_cache:
        _manifest_cache["m"] = json.loads((CORPUS / "MANIFEST.json").read_text())
    return _manifest_cache["m"]


@pytest.fixture(scope="session")
def manifest() -> dict:
    return load_manifest()


_HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


@contextlib.contextmanager
def lock_held(data: Path) -> Iterator[subprocess.Popen]:
    """`data`/.lock held by another process (as a running broker holds it) for the block's duration."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(data / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="session")
def oracle():
    """Apache Kafka's own code (../shared/kafka-oracle): skips where absent, fails under CI."""
    from tests.oracle import require_oracle

    return require_oracle()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from tests.oracle import _instance

    oracle = _instance.get("o")
    if oracle is not None and oracle.invocations:
        terminalreporter.write_line(
            f"kafka-oracle: {oracle.invocations} Kafka invocations in {oracle.jvm_starts} JVM(s)")


def json_lines_summary(output: str) -> dict:
    """A command's --json output (JSON Lines: one line per partition or group, then a `summary`) as one
    object: the summary's fields, with the item lines under "partitions" (or "groups")."""
    import json as _json

    rows = [_json.loads(line) for line in output.splitlines() if line.strip()]
    assert rows and all("type" in r for r in rows), output
    summary = dict(rows[-1])
    assert summary.pop("type") == "summary", rows[-1]
    items = [{k: v for k, v in r.items() if k != "type"} for r in rows[:-1]]
    if any(r["type"] == "group" for r in rows[:-1]):
        summary["groups"] = [dict(i, type=i.pop("group_type")) for i in items]
    else:
        summary["partitions"] = items
    return summary


def pytest_collection_modifyitems(config, items) -> None:
    """The KSTORE_DECODER=python pass deselects the tests that compare both twins themselves (marker
    ``twins``; pytest reports them as deselected): they import each twin directly, so a second pass
    would only repeat the first's work."""
    if os.environ.get("KSTORE_DECODER", "").strip().lower() != "python":
        return
    repeat = [i for i in items if i.get_closest_marker("twins") and not i.get_closest_marker("decoder_env")]
    if repeat:
        config.hook.pytest_deselected(items=repeat)
        dropped = set(repeat)
        items[:] = [i for i in items if i not in dropped]
