"""Safety checks across every command (docs/safety.md):

* a real second process holding the data dir's ``.lock`` (an fcntl lock, as a broker holds it)
  makes every mutating command refuse, with exit 1 and one line on stderr; ``--force`` proceeds;
* two kstore runs on the same data dir never both change it: while one holds the lock (paused at
  its first file operation), the other refuses; the result is the one of a single run;
* read-only commands never open a data file for writing: an audit hook (``sys.addaudithook``)
  records every open with a write mode/flag, rename, delete, truncate, utime, mkdir and writable
  mmap under the data dir while each runs in-process -- and each also runs as a real process over
  the data dir mounted read-only (a bind mount in a user namespace: refused even for root), where
  any write would fail;
* a full disk (ENOSPC) or a permission error (EACCES), injected at every file operation of every
  mutating command (``fileops.arm_fault``), ends the command with exit 3 and one line naming the
  file and the error; the file being rewritten is intact, no temporary file is left, the directory
  loads, and a rerun converges; for the rewriting commands an error before the swap leaves the
  whole input untouched.
"""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from kstore_cli.cli import main
from kstore_cli.log import fileops
from tests.conftest import ROOT, lock_held
from tests.safety_data import LEFTOVER_SUFFIXES, PAUSED_RUN, T0, check_loadable, diff, loader_view, make_data_dir, tree_bytes
from tests.test_crash_matrix import SCENARIOS, Scenario, _damaged_tail

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
MUTATING = {sc.argv(Path("/x"))[0]: sc for sc in reversed(SCENARIOS)}  # one scenario per command (the first)
#: The commands that change a data dir in place and so take its lock (merge only reads its inputs and builds
#: a new output dir outside every data dir: scope.check_output_dir).
LOCKING = {name: sc for name, sc in MUTATING.items() if not sc.new_output}


def kstore(*args: str, env: Optional[dict] = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kstore_cli", *args], capture_output=True, text=True,
                          env=env or ENV, timeout=120, **kw)


def run_main(argv: List[str]) -> Tuple[int, str, str]:
    """The real entry point in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def setup(sc: Scenario, root: Path) -> Path:
    sc.setup(root / "data")
    return root / "data"



@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    """os.fsync as a no-op: it only matters for a power loss, which no test can make; a SIGKILL or
    an error leaves the page cache as it was either way. Every fsync is still a file operation
    (counted, a crash point, a fault point) since fileops counts before calling it."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)

# --------------------------------------------------------------------------- the broker's lock



@pytest.mark.parametrize("command", sorted(LOCKING))
def test_a_process_holding_the_lock_makes_every_mutating_command_refuse(command: str, tmp_path: Path) -> None:
    sc = LOCKING[command]
    data = setup(sc, tmp_path)
    with lock_held(data):
        before = tree_bytes(tmp_path)
        refused = kstore(*sc.argv(data))
        assert refused.returncode == 1, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kstore: error: ") and "locked by a running process" in lines[0]
        assert "--force" in lines[0] and str(data / ".lock") in lines[0]
        assert tree_bytes(tmp_path) == before
        code, _out, err = run_main(sc.argv(data))  # in-process, the same
        assert code == 1 and "locked" in err and tree_bytes(tmp_path) == before
        forced = run_main([*sc.argv(data)[:1], "--force", *sc.argv(data)[1:]])
        assert forced[0] == sc.exit_code, forced
        assert tree_bytes(tmp_path) != before


@pytest.mark.parametrize("command", sorted(LOCKING))
def test_two_runs_on_one_data_dir_never_both_mutate(command: str, tmp_path: Path) -> None:
    sc = LOCKING[command]
    data = setup(sc, tmp_path / "a")
    reference = tmp_path / "reference"
    shutil.copytree(tmp_path / "a", reference)
    assert run_main(sc.argv(reference / "data"))[0] == sc.exit_code
    paused, go = tmp_path / "paused", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, str(paused), str(go), *sc.argv(data)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.time() + 60
        while not paused.exists():
            assert first.poll() is None, first.communicate()
            assert time.time() < deadline
            time.sleep(0.01)
        # The first run holds the lock and is about to change its first file.
        before = tree_bytes(data)
        second = kstore(*sc.argv(data))
        assert second.returncode == 1 and "locked by a running process" in second.stderr, second.stderr
        assert tree_bytes(data) == before  # the second changed nothing
        go.touch()
        _out, err = first.communicate(timeout=120)
        assert first.returncode == sc.exit_code, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert tree_bytes(data) == tree_bytes(reference / "data")


def test_simultaneous_runs_converge_to_one_run(tmp_path: Path) -> None:
    """Started together, without a pause: whoever loses the race refuses or finds nothing left to do."""
    sc = MUTATING["convert-format"]
    data = setup(sc, tmp_path / "a")
    reference = tmp_path / "reference"
    shutil.copytree(tmp_path / "a", reference)
    assert run_main(sc.argv(reference / "data"))[0] == 0
    procs = [subprocess.Popen([sys.executable, "-m", "kstore_cli", *sc.argv(data)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(3)]
    outcomes = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert all(rc == 0 or (rc == 1 and "locked" in err) for _out, err, rc in outcomes), outcomes
    assert any(rc == 0 for _o, _e, rc in outcomes)
    assert tree_bytes(data) == tree_bytes(reference / "data")


# --------------------------------------------------------------------------- read-only commands


def _read_only_commands(data: Path) -> List[List[str]]:
    p = data / "orders-0"
    topics = data.parent / "topics.ini"
    return [
        ["dump-segment", "--deep-iteration", "--print-data-log", str(p / "00000000000000000000.log"),
         str(p / "00000000000000000015.log")],
        ["dump-segment", "--json", "--deep-iteration", str(p / "00000000000000000036.log")],
        ["dump-segment", str(p / "00000000000000000015.index"), str(p / "00000000000000000015.timeindex"),
         str(p / "00000000000000000015.txnindex"), str(p / "00000000000000000036.snapshot")],
        ["dump-segment", "--verify-index-only", str(p / "00000000000000000036.index")],
        ["verify-index", str(data)],
        ["verify-index", "--json", str(p)],
        ["find", str(p), "--offset", "40"],
        ["find", str(p), "--timestamp", str(T0 + 3 * 24 * 3_600_000 + 5), "--json"],
        ["inspect", str(data)],
        ["inspect", "--json", str(data)],
        ["rebuild-index", "--dry-run", "--index-interval-bytes", "64", str(data)],
        ["rebuild-index", "--dry-run", "--truncate", str(data)],
        ["convert-format", "--dry-run", "--to-magic", "1", "--compression", "lz4", str(p)],
        ["retain", "--dry-run", "--now", str(T0 + 30 * 24 * 3_600_000), "--retention-ms", "1", str(data)],
        ["compact", "--dry-run", "--force-clean", "--topic-config", str(topics), str(data)],
    ]


def _read_only_tree(root: Path) -> Path:
    data = root / "data"
    make_data_dir(data, keys=7)
    # A damaged tail too, and a lock file from an earlier run (present in real data dirs).
    damaged = root / "damaged"
    _damaged_tail(damaged)
    shutil.move(str(damaged / "orders-0"), str(data / "damaged-0"))
    shutil.rmtree(damaged)
    (data / ".lock").write_bytes(b"")
    (root / "topics.ini").write_text("[orders]\ncleanup.policy = compact\n")
    return data


_AUDITED: List[Optional[list]] = [None]  # the recording in progress (None: the hook does nothing)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.rename": 2, "os.remove": 1, "os.rmdir": 1, "os.truncate": 1, "os.utime": 1, "os.mkdir": 1,
                "os.chmod": 1, "os.chown": 1, "os.link": 2, "os.symlink": 2, "shutil.rmtree": 1, "shutil.copyfile": 2,
                "shutil.move": 2, "os.ftruncate": 0}


def _audit(event: str, args: tuple) -> None:
    rec = _AUDITED[0]
    if rec is None:
        return
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writes:
            rec.append((event, path, mode, flags))
    elif event == "mmap.__new__":
        _fileno, _length, access, _offset = args
        if access != mmap.ACCESS_READ:
            rec.append((event, _fileno, access, None))
    elif event in _PATH_EVENTS:
        rec.append((event,) + tuple(args[: max(1, _PATH_EVENTS[event])]))


_hook_installed = [False]


def _under(value: object, root: str) -> bool:
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    return isinstance(value, str) and os.path.abspath(value).startswith(root)


def test_read_only_commands_never_open_a_data_file_for_writing(tmp_path: Path) -> None:
    """The audit hook sees every Python-level open/rename/unlink/...; a writable mmap is refused
    too. The hook itself is proven to see what kstore's writers do (the last assertions)."""
    if not _hook_installed[0]:
        sys.addaudithook(_audit)  # cannot be removed; idle unless a recording is in progress
        _hook_installed[0] = True
    data = _read_only_tree(tmp_path)
    root = str(tmp_path)
    before = tree_bytes(tmp_path, skip=())
    for argv in _read_only_commands(data):
        rec: list = []
        _AUDITED[0] = rec
        try:
            code, out, err = run_main(argv)
        finally:
            _AUDITED[0] = None
        assert code in (0, 1), (argv, code, err)
        assert "Traceback" not in err and "internal error" not in err, (argv, err)
        assert out or err, argv
        writes = [r for r in rec if any(_under(v, root) for v in r[1:]) or r[0] == "mmap.__new__"]
        assert not writes, f"{argv[0]} wrote under the data dir: {writes}"
    assert tree_bytes(tmp_path, skip=()) == before
    # The hook is not blind: a real command's writes are seen.
    rec = []
    _AUDITED[0] = rec
    try:
        assert run_main(["rebuild-index", "--all", "--index-interval-bytes", "64", str(data / "orders-0")])[0] == 0
    finally:
        _AUDITED[0] = None
    kinds = {r[0] for r in rec if any(_under(v, root) for v in r[1:])}
    assert {"open", "os.rename"} <= kinds, kinds


def _read_only_mount_works() -> bool:
    probe = subprocess.run(["unshare", "-r", "-m", "sh", "-c", "mount --bind / /mnt 2>/dev/null || "
                            "mount --bind /tmp /tmp && mount -o remount,ro,bind /tmp /tmp"],
                           capture_output=True) if shutil.which("unshare") else None
    return probe is not None and probe.returncode == 0


def test_read_only_commands_run_on_a_read_only_mount(tmp_path: Path) -> None:
    """Each read-only command as a real process, over the data dir bind-mounted read-only in a
    private mount namespace (writes fail with EROFS even for root): same exit status and output
    as on the writable tree. Without user namespaces, falls back to chmod (a proof only when not root)."""
    data = _read_only_tree(tmp_path)
    commands = _read_only_commands(data)
    script = "\n".join(
        "python3 -m kstore_cli " + " ".join(f"'{a}'" for a in argv) + f" > '{tmp_path}/out-{i}' 2> '{tmp_path}/err-{i}';"
        f" echo $? > '{tmp_path}/rc-{i}'" for i, argv in enumerate(commands))
    outside = tmp_path.parent / (tmp_path.name + "-results")
    script = script.replace(str(tmp_path) + "/out-", str(outside) + "/out-").replace(
        str(tmp_path) + "/err-", str(outside) + "/err-").replace(str(tmp_path) + "/rc-", str(outside) + "/rc-")
    outside.mkdir()
    if _read_only_mount_works():
        wrapped = ["unshare", "-r", "-m", "sh", "-c",
                   f"mount --bind '{tmp_path}' '{tmp_path}' && mount -o remount,ro,bind '{tmp_path}' '{tmp_path}' && "
                   f"touch '{data}/probe' 2>/dev/null && exit 99; cd '{outside}' && {script}"]
    else:  # pragma: no cover - hosts without user namespaces
        subprocess.run(["chmod", "-R", "a-w", str(tmp_path)], check=True)
        wrapped = ["sh", "-c", script]
    env = dict(ENV, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1", COLUMNS="200")
    try:
        proc = subprocess.run(wrapped, capture_output=True, text=True, env=env, timeout=300)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(tmp_path)])
    assert proc.returncode != 99, "the read-only mount does not stop writes"
    assert proc.returncode == 0, proc.stderr
    for i, argv in enumerate(commands):
        rc = int((outside / f"rc-{i}").read_text())
        err = (outside / f"err-{i}").read_text()
        code, out, _err = run_main(argv)
        assert rc == code, (argv, rc, err)
        assert "Read-only file system" not in err and "Traceback" not in err, (argv, err)
        assert (outside / f"out-{i}").read_text() == out, argv


# --------------------------------------------------------------------------- full disk, no permission



def _first_swap(journal: List[tuple]) -> Optional[int]:
    """The operation index of the first .cleaned -> .swap rename (the commit point of a rewrite)."""
    for i, (kind, path) in enumerate(journal, 1):
        if kind == "rename" and ".cleaned -> " in path:
            return i
    return None


@pytest.mark.parametrize("sc", [s for s in SCENARIOS if s.name in (
    "rebuild-index-missing", "rebuild-index-truncate", "convert-v1gzip-v2zstd", "retain-time", "compact",
    "compact-multi-group", "recover")], ids=str)
def test_disk_full_and_permission_errors_at_every_operation(sc: Scenario, tmp_path: Path) -> None:
    template = tmp_path / "template"
    sc.setup(template / "data")
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    fileops.arm_crash(None)
    assert run_main(sc.argv(reference / "data"))[0] == sc.exit_code
    journal = list(fileops.journal)
    want = tree_bytes(reference / "data")
    original = tree_bytes(template / "data")
    swap_at = _first_swap(journal)
    for n, (kind, path) in enumerate(journal, 1):
        # A full disk shows when data is written; a permission error at any step.
        for err in ((errno.ENOSPC, errno.EACCES) if kind in ("write", "create") else (errno.EACCES,)):
            work = tmp_path / f"fault-{n}-{err}"
            shutil.copytree(template, work)
            data = work / "data"
            argv = sc.argv(data)
            before = tree_bytes(data)
            fileops.arm_fault(n, err)
            try:
                code, _out, stderr = run_main(argv)
            finally:
                fileops.arm_crash(None)
            where = f"{sc}: {errno.errorcode[err]} at operation {n} ({kind} {os.path.basename(path.split(' -> ')[0])})"
            # exit 3 (a file could not be written); compact reports the partition it could not
            # handle ("kstore: <partition>: <error>") and goes on with the others, then exits 3 too.
            assert code == 3, f"{where}: exit {code}: {stderr}"
            lines = stderr.strip().splitlines()
            prefix = "kstore: " if argv[0] == "compact" else "kstore: error: "
            assert len(lines) == 1 and lines[0].startswith(prefix + str(work)), f"{where}: {stderr}"
            assert os.strerror(err).lower() in lines[0].lower() or (
                err == errno.ENOSPC and "no space left on device" in lines[0]), f"{where}: {stderr}"
            tmp_left = [str(p) for p in work.rglob("*" + fileops.TMP_SUFFIX)]
            assert not tmp_left, f"{where}: temporary files left: {tmp_left}"
            state = tree_bytes(data)
            if swap_at is not None and n < swap_at:
                # A rewrite that fails before its commit point leaves the input exactly as it was.
                assert state == before, f"{where}: the input changed: {diff(state, before)}"
            if kind == "write" and path.endswith(fileops.TMP_SUFFIX):
                rel = os.path.relpath(path[: -len(fileops.TMP_SUFFIX)], str(reference / "data"))
                if rel in before:  # the file being replaced is intact
                    assert state.get(rel) == before[rel], f"{where}: {rel} changed"
            if state != before:
                assert not check_loadable(loader_view(data, tmp_path / "view")) or sc.damaged_input, where
            assert run_main(argv)[0] == sc.exit_code, f"{where}: the rerun failed"
            left = [str(p) for p in work.rglob("*") if p.name.endswith(LEFTOVER_SUFFIXES)]
            assert not left, f"{where}: leftovers after the rerun: {left}"
            state = tree_bytes(data)
            assert state == want, f"{where}: the rerun does not converge: {diff(state, want)}"
            shutil.rmtree(work)
    assert original != want


def test_compact_removes_its_cleaned_files_when_the_swap_cannot_start(tmp_path: Path) -> None:
    sc = MUTATING["compact"]
    data = setup(sc, tmp_path)
    probe = tmp_path / "probe"
    shutil.copytree(tmp_path, probe, ignore=shutil.ignore_patterns("probe"))
    fileops.arm_crash(None)
    assert run_main(sc.argv(probe / "data"))[0] == 0
    n = _first_swap(list(fileops.journal)) - 1  # the swap's first step: fsync the directory
    before = tree_bytes(data)
    fileops.arm_fault(n, errno.EACCES)
    try:
        assert run_main(sc.argv(data))[0] == 3
    finally:
        fileops.arm_crash(None)
    assert tree_bytes(data) == before


def test_a_full_disk_while_finishing_a_segment_leaves_no_new_file(tmp_path: Path) -> None:
    """Regression: a writer error while finishing a segment (its .log fsync, an index) left that
    segment's .cleaned files behind: the segment was neither current nor finished, so abort()
    did not know it."""
    from kstore_cli.errors import FileUnreadableError
    from kstore_cli.record.builder import RecordSpec, build_v2_batch
    from kstore_cli.record.reader import read_batches
    from kstore_cli.log.writer import PartitionWriter

    (batch,) = read_batches(build_v2_batch([RecordSpec(0, T0, b"k", b"v")]))
    for n in range(2, 8):  # the .log's fsync, the index files' create/fsync, ...
        d = tmp_path / f"w{n}"
        d.mkdir()
        writer = PartitionWriter(str(d))
        writer.start_segment(0)
        writer.append(batch, 0)
        fileops.arm_fault(n - 1, errno.ENOSPC)  # counted from here: the close's operations
        try:
            with pytest.raises(FileUnreadableError, match="no space left on device"):
                try:
                    writer.close()
                except BaseException:
                    writer.abort()
                    raise
        finally:
            fileops.arm_crash(None)
        assert os.listdir(d) == [], n
