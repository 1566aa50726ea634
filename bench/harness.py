"""Shared helpers of bench/run.py: children with their own peak RSS and wall time, which kstore and
decoder they run, and what machine this is."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CHILD = BENCH / "child.py"
RESULT_PREFIX = "BENCH-RESULT "


class ChildResult:
    """One finished child: exit status, wall seconds, peak RSS (MiB), its result line, stderr tail, and
    the CPU seconds (user + system) it and its reaped descendants used."""

    __slots__ = ("exit", "wall", "rss_mb", "result", "stderr", "cpu")

    def __init__(self, exit: int, wall: float, rss_mb: float, result: Optional[dict], stderr: str,
                 cpu: Optional[float] = None) -> None:
        self.exit = exit
        self.wall = wall
        self.rss_mb = rss_mb
        self.result = result
        self.stderr = stderr
        self.cpu = cpu

    @property
    def ok(self) -> bool:
        return self.exit == 0

    def error(self) -> str:
        tail = self.stderr.strip().splitlines()[-1:] or [""]
        return f"exit {self.exit}: {tail[0][:200]}"


# Linux carries a process's peak RSS across exec: a child forked from this (large) process would
# report at least this process's RSS. So children start from a small launcher (a fresh `python -S`),
# which forks the command, times it, and writes its peak RSS (KiB) and wall seconds to a file.
_LAUNCHER = """
import os, sys, time
report, cmd = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
with open(report, "w") as f:
    f.write(f"{usage.ru_maxrss} {wall!r} {usage.ru_utime + usage.ru_stime!r}")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_child(cmd: List[str], env: Dict[str, str], *, stdout_to_devnull: bool = False, cwd: Optional[str] = None,
              timeout: Optional[float] = None, stdout_path: Optional[str] = None) -> ChildResult:
    """Run cmd as a fresh child; wall time and peak RSS are that child's (and its reaped descendants'), as
    os.wait4 reports them in a small launcher (see _LAUNCHER).

    stdout goes to /dev/null (the command's own output, e.g. a dump) or is read for the
    ``BENCH-RESULT`` line of bench/child.py, or to `stdout_path`; stderr is kept (the tail) for error messages.
    """
    err = tempfile.TemporaryFile()
    if stdout_path:
        stdout_to_devnull = True  # nothing to read back
        out_target = open(stdout_path, "wb")
    else:
        out_target = subprocess.DEVNULL if stdout_to_devnull else tempfile.TemporaryFile()
    fd, report = tempfile.mkstemp(prefix="kstore-bench-rss-")
    os.close(fd)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, report, *cmd], stdout=out_target, stderr=err,
                            env=env, cwd=cwd or tempfile.gettempdir(), start_new_session=True)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    code = proc.returncode
    if stdout_path:
        out_target.close()
    cpu = None
    try:
        with open(report) as f:
            maxrss_kib, wall, cpu_s = f.read().split()
        rss_mb, wall, cpu = int(maxrss_kib) / 1024.0, float(wall), float(cpu_s)  # Linux: ru_maxrss in KiB
    except (OSError, ValueError):  # killed before it could report
        rss_mb, wall = 0.0, time.perf_counter() - start
    finally:
        os.unlink(report)
    err.seek(0)
    stderr = err.read().decode("utf-8", "replace")[-4000:]
    err.close()
    result = None
    if not stdout_to_devnull:
        out_target.seek(0)
        for line in out_target.read().decode("utf-8", "replace").splitlines():
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX):])
        out_target.close()
    return ChildResult(code, wall, rss_mb, result, stderr, cpu)


def child_cmd(*args: str) -> List[str]:
    return [sys.executable, str(CHILD), *args]


def kstore_cmd(*args: str) -> List[str]:
    return [sys.executable, "-m", "kstore_cli", *args]


# ----------------------------------------------------------------------------- which kstore
def find_installed_kstore() -> Optional[str]:
    """Where `import kstore_cli` goes from outside the source tree with no PYTHONPATH, or None."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", "import kstore_cli; print(kstore_cli.__file__)"], env=env,
                          cwd=tempfile.gettempdir(), capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return str(Path(proc.stdout.strip()).parent)


#: Where the children keep their compiled bytecode: an installed kstore has its .pyc files, so a child that
#: had to compile every module it imports (PYTHONDONTWRITEBYTECODE=1) would time the compiler, not kstore.
PYCACHE = os.path.join(tempfile.gettempdir(), f"kstore-bench-pycache-{os.getuid()}")


def child_env(kstore_src: Optional[str], decoder: Optional[str]) -> Dict[str, str]:
    """The environment of every child: PYTHONPATH for a source tree, KSTORE_DECODER when one is asked for,
    bytecode cached (in PYCACHE, not the source tree)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    if kstore_src:
        env["PYTHONPATH"] = kstore_src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("KSTORE_DECODER", None)
    if decoder:
        env["KSTORE_DECODER"] = decoder
    env.setdefault("KSTORE_SPARK_LOG_LEVEL", "FATAL")
    return env


def kstore_startup(env: Dict[str, str], runs: int = 3) -> dict:
    """`kstore --version` in a fresh child: the active record decoder and the best start-up wall time
    (interpreter, kstore and its commands imported), subtracted from command timings."""
    best = cpu = None
    text = ""
    res = None
    for _ in range(runs):
        res = run_child(kstore_cmd("--version"), env)
        best = res.wall if best is None else min(best, res.wall)
        if res.cpu is not None:
            cpu = res.cpu if cpu is None else min(cpu, res.cpu)
    proc = subprocess.run(kstore_cmd("--version"), env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    text = proc.stdout.strip()
    m = re.search(r"record decoder: ([^)]+)\)", text)
    return {"version_text": text or proc.stderr.strip()[-200:], "backend": m.group(1).strip() if m else None,
            "startup_seconds": best, "startup_cpu_seconds": cpu, "startup_rss_mb": res.rss_mb if res else None,
            "ok": proc.returncode == 0}


# ----------------------------------------------------------------------------- the machine
def _first(pattern: str, text: str) -> Optional[str]:
    m = re.search(pattern, text, re.M)
    return m.group(1).strip() if m else None


def _version(module: str) -> Optional[str]:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 - not installed, or no metadata
        return None


def machine_info() -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    mem_kib = _first(r"^MemTotal:\s+(\d+)", meminfo)
    info = {
        "cpu": _first(r"^model name\s*:\s*(.*)$", cpuinfo) or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(int(mem_kib) / 2**20, 1) if mem_kib else None,
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    aiokafka_impl = None
    try:
        from aiokafka.record.memory_records import MemoryRecords

        aiokafka_impl = "Cython" if "_crecords" in MemoryRecords.__module__ else "pure Python"
    except Exception:  # noqa: BLE001
        pass
    info["peers"] = {
        "kafka-python": _version("kafka-python"),
        "aiokafka": _version("aiokafka") and f"{_version('aiokafka')} ({aiokafka_impl})",
        "pyspark": _version("pyspark"),
        "pyarrow": _version("pyarrow"),
        "crc32c": _version("crc32c"),
    }
    try:
        proc = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        info["java"] = (proc.stderr or proc.stdout).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        info["java"] = None
    return info


def warm(paths: List[str]) -> None:
    """Read files once so the measurements run from page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


# ----------------------------------------------------------------------------- Kafka itself
def find_kafka_oracle(given: Optional[str] = None) -> Optional[Path]:
    """The shared kafka-oracle (Apache Kafka's own tools, see its README): --kafka-oracle, $KSTORE_ORACLE,
    or ../shared/kafka-oracle beside the clone (or beside its worktree's parent); None when absent or when
    there is no java."""
    import shutil

    candidates = [given] if given else [os.environ.get("KSTORE_ORACLE"), ROOT.parent / "shared" / "kafka-oracle",
                                        ROOT.parent.parent / "shared" / "kafka-oracle"]
    if shutil.which("java") is None:
        return None
    for c in candidates:
        if c and (Path(c) / "kafka-oracle.jar").is_file() and (Path(c) / "dump-log").is_file():
            return Path(c).resolve()
    return None


def kafka_cmd(oracle: Path, tool: str, *args: str) -> List[str]:
    """One of the oracle's wrappers (dump-log = kafka-dump-log.sh, load-log, ...)."""
    return [str(oracle / tool), *args]


def kafka_env() -> Dict[str, str]:
    """The oracle wrappers' environment, with PYSPARK_JARS found once (else each wrapper starts a Python
    to ask pyspark where its jars are, which would count as Kafka's time)."""
    env = dict(os.environ)
    if not env.get("PYSPARK_JARS"):
        proc = subprocess.run([sys.executable, "-c", "import pyspark, os; "
                               "print(os.path.join(os.path.dirname(pyspark.__file__), 'jars'))"],
                              capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            env["PYSPARK_JARS"] = proc.stdout.strip()
    return env
