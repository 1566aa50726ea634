"""kstore_cli.log.fileops: files keep their owner and mode, nothing is written through a link.

Run as root (the situation of issue 16: root repairing a data dir owned by kafka), the files are
given to uid/gid 65534 ("nobody") and checked by opening them as that user.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kstore_cli.errors import FileUnreadableError, UnsafeFileError
from kstore_cli.log import fileops, locks

from tests.ownership import (  # noqa: F401 (fixtures)
    GID, UID, as_root, kafka_dir, owner, umask077, unopenable_as, world_tmp as tmp_path)


@as_root
def test_atomic_write_keeps_the_replaced_files_owner_and_mode(tmp_path: Path, umask077) -> None:
    d = kafka_dir(tmp_path / "data")
    cp = d / "recovery-point-offset-checkpoint"
    cp.write_bytes(b"0\n0\n")
    os.chown(cp, UID, GID)
    os.chmod(cp, 0o640)
    fileops.atomic_write(str(cp), b"0\n1\norders 0 5\n")
    assert owner(cp) == (UID, GID, 0o640)
    assert cp.read_bytes() == b"0\n1\norders 0 5\n"
    assert unopenable_as(UID, [cp]) == []


@as_root
def test_new_files_take_the_segment_files_owner_then_the_dirs(tmp_path: Path, umask077) -> None:
    part = tmp_path / "data" / "orders-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(b"")
    (part / "partition.metadata").write_bytes(b"x")
    kafka_dir(tmp_path / "data")
    os.chmod(part / "00000000000000000000.log", 0o644)  # the .log decides, not another file
    fileops.atomic_write(str(part / "00000000000000000000.index"), b"")
    new = fileops.create_file(str(part / "00000000000000000000.timeindex.cleaned"))
    new.write(b"abc")
    new.finish()
    assert owner(part / "00000000000000000000.index") == (UID, GID, 0o644)
    assert owner(part / "00000000000000000000.timeindex.cleaned") == (UID, GID, 0o644)
    # An empty dir: its own owner, its mode without the x bits.
    empty = tmp_path / "data" / "empty-0"
    empty.mkdir()
    os.chown(empty, UID, GID)
    os.chmod(empty, 0o750)
    fileops.atomic_write(str(empty / "leader-epoch-checkpoint"), b"0\n0\n")
    assert owner(empty / "leader-epoch-checkpoint") == (UID, GID, 0o640)
    assert unopenable_as(UID, [part / "00000000000000000000.index", empty / "leader-epoch-checkpoint"]) == []


@as_root
def test_copies_and_new_dirs_keep_the_owner(tmp_path: Path, umask077) -> None:
    part = tmp_path / "data" / "orders-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(b"0123456789")
    kafka_dir(tmp_path / "data")
    q = tmp_path / "quarantine" / "orders-0" / "run"
    fileops.make_dirs(str(q), like=str(part))
    fileops.copy_range(str(part / "00000000000000000000.log"), str(q / "tail"), 4, 10)
    assert owner(q) == (UID, GID, 0o750) and owner(q.parent) == (UID, GID, 0o750)
    assert owner(q / "tail") == (UID, GID, 0o640) and (q / "tail").read_bytes() == b"456789"


@as_root
def test_a_new_lock_file_is_the_data_dirs_and_not_through_a_link(tmp_path: Path, umask077) -> None:
    d = tmp_path / "data"
    d.mkdir()
    (d / "recovery-point-offset-checkpoint").write_bytes(b"0\n0\n")
    kafka_dir(d)
    with locks.LogDirLock(str(d)):
        pass
    assert owner(d / ".lock") == (UID, GID, 0o640)
    assert unopenable_as(UID, [d / ".lock"]) == []
    # A dangling .lock link: root would create a file wherever it points. Refused.
    (d / ".lock").unlink()
    target = tmp_path / "elsewhere" / "created-by-root"
    target.parent.mkdir()
    os.symlink(target, d / ".lock")
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        with locks.LogDirLock(str(d)):
            pass
    assert not target.exists()


@as_root
def test_a_planted_temporary_link_is_not_followed(tmp_path: Path) -> None:
    d = kafka_dir(tmp_path / "data")
    victim = tmp_path / "etc-shadow"
    victim.write_bytes(b"precious")
    cp = d / "replication-offset-checkpoint"
    cp.write_bytes(b"0\n0\n")
    os.symlink(victim, str(cp) + fileops.TMP_SUFFIX)  # planted by the data dir's owner
    fileops.atomic_write(str(cp), b"0\n1\norders 0 5\n")
    assert victim.read_bytes() == b"precious"
    assert cp.read_bytes() == b"0\n1\norders 0 5\n" and not cp.is_symlink()
    assert not os.path.lexists(str(cp) + fileops.TMP_SUFFIX)


@as_root
def test_writes_truncation_and_moves_refuse_a_link(tmp_path: Path) -> None:
    d = tmp_path / "orders-0"
    d.mkdir()
    outside = tmp_path / "outside.log"
    outside.write_bytes(b"x" * 100)
    link = d / "00000000000000000000.log"
    os.symlink(outside, link)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        fileops.truncate(str(link), 10)
    with pytest.raises(UnsafeFileError):
        fileops.atomic_write(str(link), b"")
    with pytest.raises(UnsafeFileError):
        fileops.move_file(str(link), str(tmp_path / "moved"))
    with pytest.raises(UnsafeFileError):
        fileops.copy_range(str(link), str(tmp_path / "tail"), 0, 10)
    assert outside.read_bytes() == b"x" * 100 and link.is_symlink()


def test_refused_partitions_and_fifos(tmp_path: Path) -> None:
    data = tmp_path / "data"
    part = data / "orders-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(b"")
    os.mkfifo(part / "00000000000000000000.index")
    with pytest.raises(UnsafeFileError, match="FIFO"):
        with locks.LogDirLock(str(data), force=True, partitions=[str(part)]):
            pass
    with pytest.raises(UnsafeFileError, match="FIFO"):
        fileops.truncate(str(part / "00000000000000000000.index"), 0)
    os.unlink(part / "00000000000000000000.index")
    os.symlink(tmp_path / "x", data / "log-start-offset-checkpoint")
    with pytest.raises(UnsafeFileError, match="log-start-offset-checkpoint"):
        with locks.LogDirLock(str(data), partitions=[str(part)]):
            pass
    assert isinstance(UnsafeFileError("x"), FileUnreadableError)  # exit 3


def test_the_lock_of_an_alias_is_the_real_data_dirs(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "alias")
    lock = locks.LogDirLock(str(tmp_path / "alias"))
    assert lock.path == str(real / ".lock")


def test_append_range_appends_once(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(b"abcdef")
    dst.write_bytes(b"01")
    fileops.append_range(str(src), str(dst), 2, 6, expected_size=2)
    assert dst.read_bytes() == b"01cdef"
    with pytest.raises(FileUnreadableError, match="expected 2"):
        fileops.append_range(str(src), str(dst), 2, 6, expected_size=2)
    fileops.append_range(None, str(dst), 0, 3, expected_size=6)
    assert dst.read_bytes() == b"01cdef\0\0\0"


def test_journal_records_nothing_until_a_test_arms_the_hooks(tmp_path, monkeypatch):
    # Production runs never arm the hooks: the journal must not grow with every file operation.
    monkeypatch.setattr(fileops, "_recording", False)
    monkeypatch.setattr(fileops, "journal", [])
    target = tmp_path / "a.txt"
    fileops.atomic_write(str(target), b"x")
    assert fileops.journal == []
    fileops.arm_crash(None)
    try:
        fileops.atomic_write(str(target), b"y")
        assert fileops.journal and all(isinstance(entry, tuple) for entry in fileops.journal)
    finally:
        monkeypatch.setattr(fileops, "_recording", False)


def test_copy_file_without_following_links_never_reads_through_one(tmp_path: Path) -> None:
    """restore copies a quarantined original index back with follow_links=False: a link swapped into the
    quarantine dir after its checks never makes it copy another file's bytes into the partition."""
    (tmp_path / "secret").write_bytes(b"not yours")
    (tmp_path / "copy.orig").symlink_to(tmp_path / "secret")
    with pytest.raises(FileUnreadableError):
        fileops.copy_file(str(tmp_path / "copy.orig"), str(tmp_path / "00000000000000000000.index"),
                          follow_links=False)
    assert not (tmp_path / "00000000000000000000.index").exists()
