"""The batched oracle keeps runs apart: each run's own stderr, its exact stdout, its own log messages."""

import shutil

import pytest

from tests.conftest import CORPUS, GOLDEN


@pytest.fixture(scope="module")
def runs(oracle, tmp_path_factory):
    root = tmp_path_factory.mktemp("harness")
    crashed = root / "a" / "preallocated-open-0"
    clean = root / "b" / "v2-none-0"
    shutil.copytree(CORPUS / "logs-crashed" / "preallocated-open-0", crashed)
    shutil.copytree(CORPUS / "logs" / "v2-none-0", clean)
    bad = GOLDEN / "inputs" / "bad-index-0" / "00000000000000000000.index"
    good = GOLDEN / "inputs" / "multiseg-0" / "00000000000000000000.index"
    return oracle.run_many([
        ("dump-log", ["--files", str(bad)]),
        ("dump-log", ["--files", str(good)]),
        ("load-log", [str(crashed), "--unclean"]),
        ("load-log", [str(clean), "--unclean"]),
        ("dump-log", ["--files", str(GOLDEN / "inputs" / "corrupt-badsize-0" / "00000000000000000000.log")]),
    ])


def test_each_run_has_its_own_stderr(runs) -> None:
    assert runs[0].stderr.startswith("Mismatches in :") and "Index offset: 19, log offset: 20" in runs[0].stderr
    assert runs[1].stderr == ""  # nothing of the run before, nor of the JVM's start


def test_log_messages_do_not_leak_into_later_runs(runs) -> None:
    """load-log derives truncations from a static queue of Kafka's log messages; OracleBatch empties it."""
    assert runs[2].one("summary")["truncations"]
    later = runs[3].one("summary")
    assert later["truncations"] == [] and later["deleted_segments"] == []
    assert not any("preallocated-open-0" in m for m in later["kafka_log_messages"])


def test_an_escaped_exception_is_rc_99_with_its_trace_on_that_run_only(runs) -> None:
    crash = runs[4]
    assert crash.crashed and crash.rc == 99
    assert crash.stderr.startswith("org.apache.kafka.common.errors.CorruptRecordException: Found record size 5")
    assert crash.stdout.startswith("Dumping ") and crash.stdout.endswith("isvalid: true\n")
