"""Issue 16: decompression bombs (a ~30 KB batch whose one record inflates to 1 GiB) cost every command
well under 150 MB of peak RSS and end in one ``kstore: error:`` line with exit status 3, instead of
2-6 GB of RSS; a batch of many small records adding up to 256 MiB streams through ``find``.

Peak RSS is the child's own VmHWM (its address space's high-water mark, reported at exit), each command a
real ``python -m kstore_cli``. Not ``os.wait4``'s ru_maxrss: Linux carries the forked parent's high-water
mark across exec into it, so late in a full suite run every child "peaked" at pytest's own size.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from kstore_cli.codecs import GZIP, LZ4, ZSTD
from tests import bombs

ROOT = Path(__file__).resolve().parents[2]
LIMIT_MIB = 150
TIMEOUT_S = 120
LOG = "00000000000000000000.log"


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("bombs")
    return {
        "zstd": bombs.write_partition(root, "zstd-0", [bombs.one_record_bomb(ZSTD)], 1),
        "lz4": bombs.write_partition(root, "lz4-0", [bombs.one_record_bomb(LZ4)], 1),
        "gzip-v1": bombs.write_partition(root, "gzipv1-0", [bombs.legacy_gzip_wrapper(bombs.GiB)], 1),
        # 16384 records of 16 KiB: 256 MiB in one 80 KB batch.
        "many": bombs.write_partition(root, "many-0", [bombs.many_records_bomb(ZSTD, 16384, 16384)], 16384),
    }


# Runs `-m MODULE ARGS...` or `-c CODE ARGS...` as python would, and at exit writes the process's VmHWM
# (kB, /proc/self/status) to the file named by KSTORE_MEMTEST_HWM.
_HWM_WRAPPER = """
import atexit, os, runpy, sys
def _report():
    with open('/proc/self/status') as f:
        hwm = next(line.split()[1] for line in f if line.startswith('VmHWM:'))
    with open(os.environ['KSTORE_MEMTEST_HWM'], 'w') as out:
        out.write(hwm)
atexit.register(_report)
mode, what, *rest = sys.argv[1:]
if mode == '-m':
    sys.argv = [what, *rest]
    runpy.run_module(what, run_name='__main__', alter_sys=True)
else:
    sys.argv = ['-c', *rest]
    exec(compile(what, '<string>', 'exec'), {'__name__': '__main__'})
"""


def run_measured(args: List[str], env: Dict[str, str] = {}) -> Tuple[int, str, float]:
    """(exit status, stderr, peak RSS in MiB) of a kstore child process."""
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"kstore-memtest-{os.getpid()}"
    err_path, hwm_path = base.with_suffix(".err"), base.with_suffix(".hwm")
    hwm_path.unlink(missing_ok=True)
    with open(err_path, "w+b") as err:
        proc = subprocess.Popen([sys.executable, "-c", _HWM_WRAPPER, *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                 "KSTORE_MEMTEST_HWM": str(hwm_path), **env})
        killer = threading.Timer(TIMEOUT_S, proc.kill)  # a regression fails, it does not hang the suite
        killer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode()
    err_path.unlink()
    try:
        peak_kib = int(hwm_path.read_text())
        hwm_path.unlink()
    except (OSError, ValueError):  # killed before it could report: ru_maxrss is an upper bound
        peak_kib = usage.ru_maxrss
    return proc.returncode, stderr, peak_kib / 1024


def kstore(*args: str) -> List[str]:
    return ["-m", "kstore_cli", *args]


# (input, command line) -> every one must refuse the 1 GiB record in one line, exit 3, under the limit.
REFUSED = [
    ("zstd", lambda p: kstore("dump-segment", "--print-data-log", str(p / LOG))),
    ("lz4", lambda p: kstore("dump-segment", "--deep-iteration", str(p / LOG))),
    ("gzip-v1", lambda p: kstore("dump-segment", "--deep-iteration", str(p / LOG))),
    ("zstd", lambda p: kstore("find", str(p), "--offset", "0")),
    ("gzip-v1", lambda p: kstore("find", str(p), "--offset", "0")),
    ("zstd", lambda p: kstore("compact", "--policy", "compact", "--force-clean", "--dry-run", str(p))),
    ("zstd", lambda p: kstore("convert-format", "--to-magic", "2", "--compression", "none", "--dry-run", str(p))),
    ("gzip-v1", lambda p: kstore("convert-format", "--to-magic", "2", "--compression", "none", "--dry-run", str(p))),
    ("many", lambda p: kstore("dump-segment", "--deep-iteration", str(p / LOG))),
]


@pytest.mark.parametrize("name,argv", REFUSED, ids=[f"{n}-{a(Path('x'))[2]}-{i}" for i, (n, a) in enumerate(REFUSED)])
def test_bomb_refused_in_one_line_under_150_mb(parts: Dict[str, Path], name: str, argv) -> None:
    code, err, rss = run_measured(argv(parts[name]))
    lines = err.strip().splitlines()
    assert code == 3, err
    # compact prefixes its per-partition failures with the partition ("kstore: <dir>: <error>").
    prefix = "kstore: " if argv(Path("x"))[2] == "compact" else "kstore: error: "
    assert len(lines) == 1 and lines[0].startswith(prefix), err
    assert "over kstore's bound of 33554432 bytes" in lines[0] and "KSTORE_MAX_RECORD_BYTES" in lines[0]
    assert LOG in lines[0]
    assert "Traceback" not in err and "MemoryError" not in err
    assert rss < LIMIT_MIB, f"peak RSS {rss:.0f} MiB"


def test_one_record_bomb_names_the_offset(parts: Dict[str, Path]) -> None:
    code, err, _rss = run_measured(kstore("dump-segment", "--deep-iteration", str(parts["zstd"] / LOG)))
    assert code == 3
    assert f"{LOG} at byte 0: the record at offset 0 is 1073741835 bytes decompressed" in err


@pytest.mark.parametrize("name", ["zstd", "gzip-v1"])
def test_verify_index_stays_under_150_mb(parts: Dict[str, Path], name: str) -> None:
    # verify-index only decodes what it must (a legacy wrapper's first offset, control batches).
    code, err, rss = run_measured(kstore("verify-index", str(parts[name])))
    assert code in (0, 1) and "Traceback" not in err, err
    assert rss < LIMIT_MIB, f"peak RSS {rss:.0f} MiB"


def test_find_streams_many_small_records(parts: Dict[str, Path]) -> None:
    """256 MiB of 16 KiB records in one batch: find hands records out as they are decoded."""
    code, err, rss = run_measured(kstore("find", str(parts["many"]), "--offset", "16000", "--json"))
    assert code == 0, err
    assert "offset 16000" in err or err == ""
    assert rss < LIMIT_MIB, f"peak RSS {rss:.0f} MiB"


SPARK_READER = """
import sys
from kstore_cli.record.batch import Batch
from kstore_cli.record.columns import read_columns
from kstore_cli.errors import KstoreError
try:
    for piece in read_columns(sys.argv[1], check_crc=True):
        if isinstance(piece, Batch):
            piece.records() if piece.is_legacy else piece.columns()  # as kstore_cli/spark/columns.py
except KstoreError as exc:
    print("kstore: error:", exc, file=sys.stderr)
    sys.exit(int(exc.exit_status))
"""


@pytest.mark.parametrize("name", ["zstd", "lz4", "gzip-v1"])
def test_spark_reader_refuses_bomb_under_150_mb(parts: Dict[str, Path], name: str) -> None:
    code, err, rss = run_measured(["-c", SPARK_READER, str(parts[name] / LOG)])
    assert code == 3, err
    assert "over kstore's bound" in err
    assert rss < LIMIT_MIB, f"peak RSS {rss:.0f} MiB"


def test_dump_segment_json_bomb_under_150_mb(parts: Dict[str, Path]) -> None:
    code, _err, rss = run_measured(kstore("dump-segment", "--json", "--print-data-log", str(parts["zstd"] / LOG)))
    assert code == 3  # the error is a JSON line on stdout
    assert rss < LIMIT_MIB, f"peak RSS {rss:.0f} MiB"


def test_bound_set_by_environment(parts: Dict[str, Path]) -> None:
    """KSTORE_MAX_RECORD_BYTES sets the bound (binary suffixes allowed)."""
    code, err, _rss = run_measured(kstore("find", str(parts["many"]), "--offset", "0", "-n", "2"),
                                   env={"KSTORE_MAX_RECORD_BYTES": "1k"})
    assert code == 3 and "bound of 1024 bytes" in err, err


@pytest.fixture(scope="module")
def sparse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A partition whose .index and .timeindex are sparse 10 GiB files of zeros (no disk used)."""
    from kstore_cli.record.builder import RecordSpec, build_v2_batch

    part = tmp_path_factory.mktemp("sparse") / "topic-0"
    part.mkdir()
    (part / LOG).write_bytes(build_v2_batch([RecordSpec(0, bombs.TS0, b"k", b"v"), RecordSpec(1, bombs.TS0, b"k", b"w")]))
    for suffix in (".index", ".timeindex"):
        with open(part / LOG.replace(".log", suffix), "wb") as f:
            f.truncate(10 << 30)
    return part


SPARSE = [
    lambda p: kstore("verify-index", str(p)),
    lambda p: kstore("find", str(p), "--offset", "1"),
    lambda p: kstore("find", str(p), "--timestamp", str(bombs.TS0)),
    lambda p: kstore("dump-segment", str(p / "00000000000000000000.index")),
    lambda p: kstore("dump-segment", str(p / "00000000000000000000.timeindex")),
    lambda p: kstore("rebuild-index", "--dry-run", str(p)),
]


@pytest.mark.parametrize("argv", SPARSE, ids=[" ".join(a(Path("x"))[2:4]) for a in SPARSE])
def test_sparse_10_gib_index_under_150_mb(sparse: Path, argv) -> None:
    if (sparse / "00000000000000000000.index").stat().st_blocks > 1024:
        pytest.skip("this filesystem does not keep the file sparse")
    code, err, rss = run_measured(argv(sparse))
    assert code in (0, 1), err  # verify-index/rebuild-index report the zero index; never an internal error
    assert "Traceback" not in err and "MemoryError" not in err and "internal error" not in err, err
    assert rss < LIMIT_MIB, f"peak RSS {rss:.0f} MiB"


def test_bound_that_is_not_a_size_is_a_usage_error(parts: Dict[str, Path]) -> None:
    code, err, _rss = run_measured(kstore("find", str(parts["many"]), "--offset", "0"),
                                   env={"KSTORE_MAX_RECORD_BYTES": "lots"})
    assert code == 2 and err.startswith("kstore: error: KSTORE_MAX_RECORD_BYTES: 'lots' is not a size"), err


def test_the_measurement_is_the_childs_own() -> None:
    """A 300 MB parent measures a tiny child as tiny (wait4's ru_maxrss would say ~310 MiB: Linux carries the
    parent's high-water mark across the child's exec)."""
    ballast = bytearray(300 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    code, err, rss = run_measured(["-c", "print(1)"])
    assert code == 0, err
    assert rss < 60, rss
