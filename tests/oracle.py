"""Apache Kafka's own code as the judge: the shared kafka-oracle (../shared/kafka-oracle) from tests.

`oracle` (a session fixture) skips a test cleanly where the oracle is absent, except under CI
(`CI` set), where a missing or broken oracle fails the run. Invocations are batched: one JVM runs
many harness calls (tests/oracle_java/OracleBatch.java), so a test should gather its inputs and make
one `run_many` call rather than one call per input.

    def test_x(oracle, tmp_path):
        summary = oracle.load_log(partition_dir, clean=True)       # on a private copy
        results = oracle.run_many([("dump-log", ["--files", f]) for f in files])
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORACLE_DIR = Path(os.environ.get("KSTORE_ORACLE", ROOT.parent / "shared" / "kafka-oracle"))
SHARED = ORACLE_DIR.parent
_LAUNCHER = Path(__file__).resolve().parent / "oracle_java" / "OracleBatch.java"

# tool name (the wrapper script in kafka-oracle/) -> the main class it runs
MAIN_CLASS = {
    "dump-log": "kafka.tools.DumpLogSegments",
    "load-log": "kafka.oracle.LoadLog",
    "clean-log": "kafka.log.OracleCleanLog",
    "retain-log": "kafka.log.OracleRetainLog",
    "append-log": "kafka.oracle.AppendLog",
    "metadata-image": "kafka.oracle.OracleMetadataImage",
}
_END = '{"type":"oracle_batch_end","rc":'
_START = '{"type":"oracle_batch_start"}\n'
_END_RE = re.compile(r'\{"type":"oracle_batch_end","rc":(-?\d+)\}\n')


def _split_runs(text: str) -> list:
    """(rc, exact output) of each run, from a stream where OracleBatch ended every run with an end line
    (a run whose output does not end in a newline has the end marker on its last line)."""
    runs, start = [], 0
    for m in _END_RE.finditer(text):
        runs.append((int(m.group(1)), text[start:m.start()]))
        start = m.end()
    return runs


@dataclass
class OracleResult:
    """One harness invocation: its exit status and stdout lines (JSON lines parsed in `records`)."""

    tool: str
    args: list
    rc: int
    lines: list = field(default_factory=list)
    #: exactly what the run wrote to stdout / stderr (Kafka's log lines included in stderr)
    raw_stdout: Optional[str] = None
    stderr: str = ""

    @property
    def stdout(self) -> str:
        if self.raw_stdout is not None:
            return self.raw_stdout
        return "".join(line + "\n" for line in self.lines)

    @property
    def crashed(self) -> bool:
        """An exception escaped the harness (OracleBatch printed its stack trace on stderr)."""
        return self.rc == 99

    @property
    def records(self) -> list:
        return [json.loads(line) for line in self.lines if line.startswith("{")]

    def of_type(self, kind: str) -> list:
        return [r for r in self.records if r.get("type") == kind]

    def one(self, kind: str) -> dict:
        hits = self.of_type(kind)
        assert len(hits) == 1, f"{self.tool} {self.args}: expected one {kind!r} line, got {len(hits)}: {self.stdout[-2000:]}"
        return hits[0]


class Oracle:
    """Runs kafka-oracle harnesses, many per JVM."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._classpath: Optional[str] = None
        self.invocations = 0
        self.jvm_starts = 0

    def _env_and_classpath(self) -> tuple:
        if self._classpath is None:
            out = subprocess.run(
                ["bash", "-c", 'source "$1"; printf "%s\\n%s" "$ORACLE_CP" "$KAFKA_LOG4J_OPTS"', "_", str(self.home / "oracle-env.sh")],
                capture_output=True, text=True,
            )
            if out.returncode != 0:
                raise RuntimeError(f"kafka-oracle is broken: {out.stderr.strip() or out.stdout.strip()}")
            self._classpath, self._log4j = out.stdout.split("\n", 1)
        return self._classpath, self._log4j

    def run_many(self, calls: Sequence[tuple], *, stdin_files: Optional[Sequence[Optional[str]]] = None,
                 heap: str = "-Xmx1G", timeout: float = 900) -> list:
        """Run `(tool, [args...])` calls in one JVM; returns one OracleResult per call, in order."""
        if not calls:
            return []
        classpath, log4j = self._env_and_classpath()
        stdin_files = list(stdin_files or [None] * len(calls))
        script = []
        for (tool, args), stdin in zip(calls, stdin_files):
            args = [str(a) for a in args]
            if any("\t" in a or "\n" in a for a in args):
                raise ValueError(f"oracle argument with a tab or newline: {args}")
            script.append("\t".join([MAIN_CLASS[tool], str(stdin or "")] + args))
        cmd = ["java", "-Djava.security.manager=allow", heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               *log4j.split(), "-cp", classpath, str(_LAUNCHER)]
        # bytes, decoded here: text mode would turn a record's \r into \n
        proc = subprocess.run(cmd, input=("\n".join(script) + "\n").encode("utf-8"), capture_output=True,
                              timeout=timeout, env={**os.environ, "LANG": os.environ.get("LANG", "C.UTF-8")})
        proc.stdout = proc.stdout.decode("utf-8", "surrogateescape")
        proc.stderr = proc.stderr.decode("utf-8", "surrogateescape")
        self.jvm_starts += 1
        self.invocations += len(calls)
        outs = _split_runs(proc.stdout)
        errs = _split_runs(proc.stderr.split(_START, 1)[-1])
        results = []
        for (tool, args), (rc, out) in zip(calls, outs):
            err = errs[len(results)][1] if len(results) < len(errs) else ""
            # split on \n only: a record's text may hold \r or U+2028, which str.splitlines would split on
            lines = out[:-1].split("\n") if out.endswith("\n") else (out.split("\n") if out else [])
            results.append(OracleResult(tool, [str(a) for a in args], rc, lines, out, err))
        if len(results) != len(calls):
            raise RuntimeError(f"kafka-oracle batch ended after {len(results)} of {len(calls)} calls "
                               f"(exit {proc.returncode}): {proc.stderr[-3000:]}")
        return results

    def run(self, tool: str, *args, stdin_file: Optional[str] = None) -> OracleResult:
        return self.run_many([(tool, list(args))], stdin_files=[stdin_file])[0]

    # -- the common shapes -------------------------------------------------------------------------
    def load_logs(self, partition_dirs: Iterable[Path], *, clean: bool, extra: Sequence[str] = ()) -> list:
        """Kafka's LogLoader over a private copy of each partition dir (with its parent's checkpoint files)."""
        work = Path(tempfile.mkdtemp(prefix="kstore-oracle-"))
        try:
            calls = []
            for i, src in enumerate(partition_dirs):
                src = Path(src)
                parent = work / f"d{i}"
                parent.mkdir()
                for f in src.parent.iterdir():
                    if f.is_file() and "checkpoint" in f.name:
                        shutil.copy2(f, parent / f.name)
                dst = parent / src.name
                shutil.copytree(src, dst, symlinks=False)
                calls.append(("load-log", [str(dst), "--clean" if clean else "--unclean", *extra]))
            return self.run_many(calls)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def load_log(self, partition_dir: Path, *, clean: bool, extra: Sequence[str] = ()) -> OracleResult:
        return self.load_logs([partition_dir], clean=clean, extra=extra)[0]

    def append_log(self, partition_dir: Path, ops: Sequence[dict], *args: str) -> OracleResult:
        """Append through the broker's code (append-log) into `partition_dir` (created or opened)."""
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as spec:
            spec.write("".join(json.dumps(op) + "\n" for op in ops))
        try:
            return self.run_many([("append-log", [str(partition_dir), *args])], stdin_files=[spec.name])[0]
        finally:
            os.unlink(spec.name)


def kafka_records(result: OracleResult) -> list:
    """(offset, key hex, value hex) of every record a load-log/clean-log/retain-log run printed."""
    return [(r["offset"], r.get("key"), r.get("value")) for r in result.of_type("record")]


_instance: dict = {}


def find_oracle() -> Optional[Oracle]:
    """The oracle, or None where it is absent (a broken one raises)."""
    if "o" not in _instance:
        if not (ORACLE_DIR / "kafka-oracle.jar").is_file() or shutil.which("java") is None:
            _instance["o"] = None
        else:
            oracle = Oracle(ORACLE_DIR)
            oracle._env_and_classpath()
            _instance["o"] = oracle
    return _instance["o"]


def require_oracle() -> Oracle:
    """The oracle for a test: skip where it is absent, fail under CI (where it must be there)."""
    try:
        oracle = find_oracle()
    except RuntimeError as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    if oracle is None:
        why = f"kafka-oracle not found at {ORACLE_DIR} (or no java on PATH)"
        if os.environ.get("CI"):
            pytest.fail(why + ": CI must have ../shared beside the clone")
        pytest.skip(why)
    return oracle
