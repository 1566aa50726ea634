"""``kstore recover --jobs``: the worker processes and the data dir's ``.lock`` (issue 29).

The parent holds the ``.lock``; its forked workers do not (an fcntl lock is not inherited) and must die
with it: killed (SIGKILL, the parent alone, not its process group) while its workers are mid-work, no
worker remains, nothing in the data dir changes afterwards, and a second recover takes the lock and ends
where an uninterrupted run does. Workers lowering the data dir's checkpoints at the same time lose none
of each other's entries.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

from kstore_cli.log import fileops, locks
from kstore_cli.log.checkpoint import read_offset_checkpoint
from kstore_cli.operations.loader import recover_partition
from tests.conftest import ROOT
from tests.safety_data import PAUSED_RUN, alive, check_loadable, child_pids, diff, make_partitions_to_recover, tree_bytes

ENV = dict(os.environ, PYTHONPATH=str(ROOT))
ENV.pop(fileops.CRASH_ENV, None)


def _kstore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kstore_cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=120)


def _state(root: Path) -> Dict[str, Tuple[int, int, bytes]]:
    """{relative path: (size, mtime ns, bytes)} of every file under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, p.read_bytes())
    return out


def _wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_workers_die_with_a_sigkilled_parent_and_write_nothing_more(tmp_path: Path) -> None:
    template = make_partitions_to_recover(tmp_path / "template" / "data")
    reference = tmp_path / "reference"
    shutil.copytree(template.parent, reference)
    done = _kstore("recover", "--jobs", "2", str(reference / "data"))
    assert done.returncode == 0, done.stderr
    want = tree_bytes(reference / "data")

    run = tmp_path / "run"
    shutil.copytree(template.parent, run)
    ready, go = tmp_path / "ready", tmp_path / "go"
    # Every worker pauses at its first file operation (the plan made, the cut about to start) until `go`.
    parent = subprocess.Popen([sys.executable, "-c", PAUSED_RUN, str(ready), str(go), "recover", "--jobs", "2",
                               str(run / "data")], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: List[int] = []
    try:
        assert _wait_until(lambda: ready.exists() and len(child_pids(parent.pid)) == 2, 60), "no worker at work"
        workers = child_pids(parent.pid)
        assert locks.is_locked(str(run / "data"))
        os.kill(parent.pid, signal.SIGKILL)  # the parent alone
        assert parent.wait(10) == -signal.SIGKILL
        before = _state(run)
        go.touch()  # a worker still alive would go on now
        survivors = [pid for pid in workers if alive(pid)]
        assert _wait_until(lambda: not any(alive(pid) for pid in workers), 2), (
            f"workers {[pid for pid in workers if alive(pid)]} outlived their SIGKILLed parent")
        time.sleep(0.3)
        after = _state(run)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        assert not changed, f"written after the parent's death: {changed} (survivors at first: {survivors})"
    finally:
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert not locks.is_locked(str(run / "data"))
    again = _kstore("recover", "--jobs", "2", str(run / "data"))
    assert again.returncode == 0, again.stderr
    assert tree_bytes(run / "data") == want, diff(tree_bytes(run / "data"), want)


def test_partitions_cut_at_once_keep_each_others_checkpoint_entries(tmp_path: Path) -> None:
    """Two workers plan their cuts from the same data dir checkpoints: orders-1's whole recovery runs
    between orders-0's plan and its first checkpoint write (as a worker beside it may). Each lowers its
    own entry of replication-offset-checkpoint; neither may put the other's back past its log end."""
    data = make_partitions_to_recover(tmp_path / "journal" / "data", copies=2)
    fileops.arm_crash(None)
    recover_partition(str(data / "orders-0"))
    checkpoint = str(data / "replication-offset-checkpoint")
    # The operation before orders-0's first write of it (outside the read-modify-write of the file).
    before_write = next(i for i, (kind, path) in enumerate(fileops.journal, 1)
                        if kind == "write" and path.startswith(checkpoint)) - 1

    data = make_partitions_to_recover(tmp_path / "run" / "data", copies=2)
    beside = []
    fileops.arm_crash(before_write, lambda *_: beside.append(recover_partition(str(data / "orders-1"))))
    try:
        result = recover_partition(str(data / "orders-0"))
    finally:
        fileops.arm_crash(None)
    assert result.problem is None and beside and beside[0].problem is None
    entries = read_offset_checkpoint(str(data / "replication-offset-checkpoint"))
    assert entries[("orders", 0)] == entries[("orders", 1)] == 30, entries
    assert check_loadable(data) == []
