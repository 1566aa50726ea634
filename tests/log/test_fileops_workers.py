"""kstore_cli.log.fileops in a worker process (``recover --jobs``): bound to its parent, which holds
the data dir's ``.lock`` for it, a worker makes no file operation once that parent is gone -- also
when the parent died before the kernel's death signal was armed, or without that signal at all."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest

from kstore_cli.log import fileops


def _orphaned_worker(target: Path, when: str) -> bytes:
    """Fork a parent P that forks a worker W; P exits (W's parent is gone, and the lock with it), then W
    tries to write `target`. Returns what W reported on a pipe: b"" if it died without writing."""
    r, w = os.pipe()
    bound_r, bound_w = os.pipe()
    parent = os.fork()
    if parent == 0:  # P
        try:
            p_pid = os.getpid()
            worker = os.fork()
            if worker == 0:  # W: never returns into pytest
                try:
                    os.close(r)
                    bind = getattr(fileops, "bind_to_parent", None)  # absent: an unbound worker
                    if when == "between-steps":  # bound in time, but the kernel's signal not armed
                        fileops._die_with_parent = lambda: None
                        if bind is not None:
                            bind(p_pid)
                        os.write(bound_w, b"bound")
                    while os.getppid() == p_pid:
                        time.sleep(0.005)
                    if when == "before-bind" and bind is not None:  # P died before the worker's prctl
                        bind(p_pid)
                    fileops.atomic_write(str(target), b"written by an orphan\n")
                    os.write(w, b"wrote")
                finally:
                    os._exit(0)
            if when == "between-steps":
                os.read(bound_r, 5)
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(parent, 0)
    got = b""
    deadline = time.monotonic() + 10
    try:
        while True:
            assert time.monotonic() < deadline, f"the worker is still alive 10 s after its parent's end ({got!r})"
            ready, _, _ = select.select([r], [], [], 0.1)
            if ready:
                chunk = os.read(r, 64)
                if not chunk:
                    break  # every writer gone: W is dead
                got += chunk
    finally:
        os.close(r)
    os.close(bound_r)
    os.close(bound_w)
    return got


@pytest.mark.parametrize("when", ["before-bind", "between-steps"])
def test_a_worker_whose_parent_died_writes_nothing(tmp_path: Path, when: str) -> None:
    target = tmp_path / "recovery-point-offset-checkpoint"
    target.write_bytes(b"0\n0\n")
    assert _orphaned_worker(target, when) == b""
    assert target.read_bytes() == b"0\n0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # no temporary file either


def test_a_bound_worker_writes_while_its_parent_lives(tmp_path: Path) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            fileops.bind_to_parent(os.getppid())
            fileops.atomic_write(str(tmp_path / "f"), b"x")
            os.write(w, b"wrote")
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 64) == b"wrote" and (tmp_path / "f").read_bytes() == b"x"
    os.close(r)
