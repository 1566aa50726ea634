"""Issue 16 end to end: root running kstore on a data dir a broker (uid 65534 here) owns, with
symlinks, FIFOs, a full stdout and an output dir inside the input.

Every mutating command runs on a data dir owned by 65534:65534 (dirs 0750, files 0640) under
umask 077; afterwards every file in the data dir and in the quarantine is still 65534:65534 0640
and opens for reading and writing as that user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from kstore_cli.log.logdir import Partition
from tests.conftest import lock_held
from tests.ownership import (  # noqa: F401
    GID, UID, as_root, invoke, kafka_dir, owner, umask077, unopenable_as, world_tmp)
from tests.safety_data import DAY, GZIP, INTERVAL, T0, make_data_dir

ROOT = Path(__file__).resolve().parent.parent
NOW = T0 + 10 * DAY


def _damaged(data: Path) -> Path:
    part = make_data_dir(data)
    seg = Partition(str(part)).segments[1]
    raw = bytearray(Path(seg.log).read_bytes())
    raw[-10] ^= 0xFF
    Path(seg.log).write_bytes(bytes(raw))
    return part


def _compactable(data: Path) -> Path:
    part = make_data_dir(data, keys=7)
    (data.parent / "topics.ini").write_text("[orders]\ncleanup.policy = compact\n")
    return part


CASES = {
    "rebuild-index-truncate": (_damaged, lambda d: ["rebuild-index", "--truncate", "--index-interval-bytes",
                                                    str(INTERVAL), str(d / "orders-0")]),
    "retain": (make_data_dir, lambda d: ["retain", "--now", str(NOW), "--retention-ms", str(5 * DAY), str(d)]),
    "compact": (_compactable, lambda d: ["compact", "--now", str(NOW), "--force-clean", "--topic-config",
                                         str(d.parent / "topics.ini"), str(d / "orders-0")]),
    "convert-format": (lambda d: make_data_dir(d, magic=1, codec=GZIP),
                       lambda d: ["convert-format", "--to-magic", "2", "--compression", "zstd", "--in-place",
                                  "--index-interval-bytes", str(INTERVAL), str(d / "orders-0")]),
}


def _files(root: Path) -> List[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@as_root
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_written_file_keeps_the_brokers_owner_and_mode(name: str, world_tmp: Path, umask077) -> None:
    setup, argv = CASES[name]
    data = world_tmp / "data"
    setup(data)
    kafka_dir(world_tmp)
    before = {p: p.read_bytes() for p in _files(data)}
    result = invoke(argv(data))
    assert result.exit_code == 0, result.output
    after = _files(world_tmp)
    assert {p: p.read_bytes() for p in _files(data)} != before, "the command changed nothing"
    if name == "rebuild-index-truncate":
        assert any(p.name.endswith(".tail") for p in after)  # the quarantine copies are checked too
    wrong = [f"{p.relative_to(world_tmp)}: {owner(p)}" for p in after if owner(p) != (UID, GID, 0o640)]
    wrong += [f"{p.relative_to(world_tmp)}/: {owner(p)}" for p in world_tmp.rglob("*")
              if p.is_dir() and owner(p) != (UID, GID, 0o750)]
    assert not wrong, f"{name}: files not as the broker made them: {wrong}"
    assert unopenable_as(UID, after) == []


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    return subprocess.run([sys.executable, "-m", "kstore_cli", *args], cwd=ROOT, timeout=60, **kw)


@as_root
def test_a_symlinked_partition_alias_takes_the_real_data_dirs_lock_and_checkpoints(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _compactable(data)
    (data / "cleaner-offset-checkpoint").unlink()
    aliases = tmp_path / "shortcuts"
    aliases.mkdir()
    os.symlink(data / "orders-0", aliases / "orders-0")
    with lock_held(data):
        res = invoke(["rebuild-index", "--index-interval-bytes", "64", str(aliases / "orders-0")])
    assert res.exit_code == 1, res.output
    assert "locked" in res.output and not (aliases / ".lock").exists()
    res = invoke(["compact", "--now", str(NOW), "--force-clean", "--topic-config",
                                   str(tmp_path / "topics.ini"), str(aliases / "orders-0")])
    assert res.exit_code == 0, res.output
    assert (data / "cleaner-offset-checkpoint").exists()
    assert sorted(os.listdir(aliases)) == ["orders-0"]  # nothing written into the alias's parent


@as_root
def test_a_symlinked_segment_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    data = tmp_path / "data"
    part = _damaged(data)
    seg = Partition(str(part)).segments[1]
    outside = tmp_path / "outside.log"
    shutil.move(seg.log, outside)
    os.symlink(outside, seg.log)
    before = outside.read_bytes()
    for argv in (["rebuild-index", "--truncate", str(part)], ["retain", "--now", str(NOW), "--retention-ms",
                                                              str(DAY), str(part)]):
        res = _cli(*argv)
        assert res.returncode == 3, res
        lines = res.stderr.decode().splitlines()
        assert len(lines) == 1 and "symbolic link" in lines[0] and seg.log in lines[0], lines
    assert outside.read_bytes() == before
    assert not (tmp_path / "kstore-quarantine").exists()


@as_root
def test_a_dangling_lock_link_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_data_dir(data)
    target = tmp_path / "anywhere" / "root-owned"
    target.parent.mkdir()
    os.symlink(target, data / ".lock")
    res = _cli("rebuild-index", str(data / "orders-0"))
    assert res.returncode == 3 and b"symbolic link" in res.stderr, res
    assert not target.exists()


def test_a_fifo_named_like_a_segment_is_refused_without_hanging(tmp_path: Path) -> None:
    part = tmp_path / "orders-0"
    part.mkdir()
    fifo = part / "00000000000000000000.log"
    os.mkfifo(fifo)
    res = _cli("dump-segment", str(fifo))  # timeout=60: the old code waited for a writer forever
    assert res.returncode == 3, res
    err = res.stderr.decode().splitlines()
    assert err == [f"kstore: error: {fifo}: is a FIFO (named pipe), not a regular file; refusing to read it"]


def test_stdout_write_errors_exit_3_and_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    part = make_data_dir(tmp_path / "data")
    log = str(Partition(str(part)).segments[0].log)
    with open("/dev/full", "wb") as full:
        res = _cli("dump-segment", "--deep-iteration", "--print-data-log", log, stdout=full, capture_output=False,
                   stderr=subprocess.PIPE)
    assert res.returncode == 3
    assert res.stderr.decode().splitlines() == [
        "kstore: error: standard output: could not write: no space left on device; the output is incomplete"]
    proc = subprocess.Popen([sys.executable, "-m", "kstore_cli", "dump-segment", "--deep-iteration",
                             "--print-data-log", log], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == b""


def test_an_output_dir_that_is_or_lies_inside_the_input_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    part = make_data_dir(data, magic=1, codec=GZIP)
    os.symlink(data, tmp_path / "alias")
    before = sorted(p.name for p in data.rglob("*"))
    for out in (part, part / "converted", data / "converted", tmp_path / "alias" / "orders-0"):
        res = invoke(["convert-format", "--to-magic", "2", "--output-dir", str(out), str(part)])
        assert res.exit_code == 2, (out, res.output)
        assert "lies inside the input" in res.output
    assert sorted(p.name for p in data.rglob("*")) == before
    res = invoke(["convert-format", "--to-magic", "2", "--output-dir", str(tmp_path / "out"),
                                   str(part)])
    assert res.exit_code == 0, res.output
