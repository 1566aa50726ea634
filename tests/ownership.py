"""Helpers for the tests of issue 16 (owners, modes, links): run as root, the data dir belongs to
uid/gid 65534 ("nobody", standing for kafka:kafka), and the results are opened as that user."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator, List

import pytest

UID = GID = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="ownership and symlink attacks concern root: run as root")


@pytest.fixture
def umask077() -> Iterator[None]:
    old = os.umask(0o077)  # a root shell's umask must not decide the broker's file modes
    try:
        yield
    finally:
        os.umask(old)


def kafka_dir(path: Path, mode: int = 0o640) -> Path:
    """A dir as a broker running as UID creates it: dir 0750, files `mode`, all owned by UID:GID."""
    path.mkdir(parents=True, exist_ok=True)
    for p in [path, *path.rglob("*")]:
        os.chown(p, UID, GID, follow_symlinks=False)
        if p.is_dir():
            os.chmod(p, 0o750)
        elif not p.is_symlink():
            os.chmod(p, mode)
    return path


def owner(path: Path) -> tuple:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def unopenable_as(uid: int, paths: List[Path]) -> List[str]:
    """The paths the user `uid` (group `uid`, no other group) cannot open for reading and writing, as a
    broker running as that user opens its files: checked in a forked child that drops to that user."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            bad = []
            for p in paths:
                try:
                    with open(p, "r+b") as f:
                        f.read(1)
                except OSError as exc:
                    bad.append(f"{p}: {exc.strerror}")
            os.write(w, "\n".join(bad).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return [line for line in out.splitlines() if line]


@pytest.fixture
def world_tmp() -> Iterator[Path]:
    """A scratch dir other users can reach (pytest's own is private to root)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="kstore-fileops-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Invoked:
    """A CLI run in process: its exit code and its output (with the one-line error main would print)."""

    def __init__(self, exit_code: int, output: str) -> None:
        self.exit_code = exit_code
        self.output = output


def invoke(argv: List[str]) -> Invoked:
    """Run `kstore argv` in process (Click's runner), mapping a KstoreError as kstore's main does."""
    from click.testing import CliRunner

    from kstore_cli.cli import _register_commands, cli
    from kstore_cli.errors import KstoreError

    if "restore" not in cli.commands:
        _register_commands()
    result = CliRunner().invoke(cli, argv)
    if isinstance(result.exception, KstoreError):
        return Invoked(int(result.exception.exit_status), result.output + f"kstore: error: {result.exception}\n")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Invoked(result.exit_code, result.output)
