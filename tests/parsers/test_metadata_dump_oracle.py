"""``kstore dump-segment`` on KRaft metadata logs and snapshots vs Kafka's ``dump-log``, byte for byte.

The files (tests/parsers/metadata_factory.py) hold every metadata record type and version the schema table
and the oracle's Kafka build both know (test_metadata_records_oracle.py), four value variants each
plus the defaults, KRaft control records (LeaderChange, KRaftVersion, Voters, SnapshotHeader/Footer),
compressed batches, and values Kafka's parser skips (bad frames, unknown api key, garbage, a version newer
than the build). All Kafka runs happen in one JVM (module fixture).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import main
from tests.parsers.metadata_factory import write_metadata_log, write_snapshot

#: (name, file key, options); --files FILE is appended
CASES: List[Tuple[str, str, List[str]]] = [
    ("log-decoder", "log", ["--cluster-metadata-decoder"]),
    ("log-decoder-deep", "log", ["--cluster-metadata-decoder", "--deep-iteration"]),
    ("log-decoder-skip-metadata", "log", ["--cluster-metadata-decoder", "--skip-record-metadata"]),
    ("log-print-data", "log", ["--print-data-log"]),
    ("log-shallow", "log", []),
    ("snapshot-decoder", "snapshot", ["--cluster-metadata-decoder"]),
    ("snapshot-decoder-print", "snapshot", ["--cluster-metadata-decoder", "--print-data-log", "--deep-iteration"]),
    ("snapshot-deep", "snapshot", ["--deep-iteration"]),
]


def _as_oracle_lines(out: bytes) -> List[str]:
    return io.TextIOWrapper(io.BytesIO(out), encoding="utf-8", newline=None).read().splitlines()


def run_kstore(args: List[str]) -> Tuple[int, bytes, bytes]:
    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        try:
            main(["dump-segment", *args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def dumps(oracle, tmp_path_factory) -> Dict[str, Tuple[str, List[str], object]]:
    work = tmp_path_factory.mktemp("kraft")
    files = {"log": write_metadata_log(work), "snapshot": write_snapshot(work)}
    calls = [("dump-log", [*opts, "--files", str(files[key])]) for _, key, opts in CASES]
    results = oracle.run_many(calls)
    return {name: (str(files[key]), opts, result) for (name, key, opts), result in zip(CASES, results)}


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_dump_matches_kafka_byte_for_byte(dumps, name: str) -> None:
    path, opts, kafka = dumps[name]
    assert kafka.rc == 0
    code, out, err = run_kstore([*opts, "--files", path])
    assert out.decode("utf-8", "surrogateescape") == kafka.stdout  # byte for byte
    # kstore's exit status: 1 when the decoder skipped records (Kafka says "skipping" and exits 0)
    assert code == (1 if "skipping." in kafka.stdout else 0)
    assert b"Traceback" not in err


def test_every_record_type_and_version_is_decoded_not_skipped(dumps) -> None:
    from tests.parsers.metadata_factory import ORACLE_RECORD_TYPES

    _, _, kafka = dumps["snapshot-decoder"]
    text = kafka.stdout
    assert "Error at" not in text
    for t in ORACLE_RECORD_TYPES.values():
        for version in range(t.lowest_supported_version, t.highest_supported_version + 1):
            assert f'payload: {{"type":"{t.name}","version":{version},"data":' in text, (t.name, version)
    _, _, log = dumps["log-decoder"]
    assert log.stdout.count("skipping.") == 9  # the damaged values, and nothing else
    assert '"type":"BEGIN_TRANSACTION_RECORD"' in log.stdout and " KRaftVoters " in log.stdout


def test_print_data_bytes_exact(oracle, dumps) -> None:
    """Binary payloads (with "\\r", invalid UTF-8) printed by --print-data-log: Kafka's bytes, unchanged."""
    path, opts, _ = dumps["log-print-data"]
    classpath, log4j = oracle._env_and_classpath()
    kafka = subprocess.run(["java", *log4j.split(), "-cp", classpath, "kafka.tools.DumpLogSegments", *opts,
                            "--files", path], capture_output=True, timeout=300,
                           env={**os.environ, "LANG": os.environ.get("LANG", "C.UTF-8")})
    assert kafka.returncode == 0, kafka.stderr[-2000:]
    assert b"\r" in kafka.stdout
    _, out, _ = run_kstore([*opts, "--files", path])
    assert out == kafka.stdout
