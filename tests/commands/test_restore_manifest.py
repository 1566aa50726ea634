"""Issue 29 (Critical): a quarantine manifest is the broker user's to edit (the quarantine dir takes the
partition's owner), so nothing it says may make root's `kstore restore` (or the resume of a cut, or
salvage's finish) touch a file outside the partition, its data dir and its own quarantine dir.

Each attack edits the manifest as the data dir's owner (uid 65534, in a forked child that drops to it)
and runs the command as root: exit 2, one line naming the manifest and the field, and not one byte,
owner or mode changed anywhere (also with --dry-run)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from kstore_cli.log.logdir import Partition
from tests.commands.test_restore import TRUNCATE, damaged_in_place, forked_crash
from tests.ownership import UID, as_root, invoke, kafka_dir, umask077, world_tmp  # noqa: F401
from tests.safety_data import make_data_dir

pytestmark = as_root

MANIFEST = "kstore-quarantine.json"
SECRET = b"root's secret, 0600\n"
PRECIOUS = b"precious.conf: root's, 0644\n"
STOLEN = "00000000000000000099.log"  # where a quarantined segment is "moved back" to, outside


def as_user(uid: int, fn: Callable[[], None]) -> None:
    """Run fn in a forked child that has dropped to uid (group uid, no other group), as the broker's user."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            fn()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "the edit as the data dir's owner failed"


def snapshot(root: Path) -> Dict[str, Tuple]:
    """Every entry under root: kind, owner, mode, and bytes (a link: its target)."""
    out = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            content: object = os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            content = p.read_bytes()
        else:
            content = None
        out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode),
                                         content)
    return out


class Setup:
    """A cut made by root in a data dir owned by 65534, and root's files beside it."""

    def __init__(self, world: Path) -> None:
        data = world / "data"
        make_data_dir(data)
        damaged_in_place(data)
        kafka_dir(data)
        self.partition = data / "orders-0"
        res = invoke(TRUNCATE + [str(self.partition)])
        assert res.exit_code == 0, res.output
        (self.qdir,) = (world / "kstore-quarantine" / "orders-0").iterdir()
        assert os.stat(self.qdir).st_uid == UID and os.stat(self.qdir / MANIFEST).st_uid == UID
        self.outside = world / "outside"
        self.outside.mkdir()
        os.chmod(self.outside, 0o755)
        (self.outside / "precious.conf").write_bytes(PRECIOUS)
        os.chmod(self.outside / "precious.conf", 0o644)
        (self.outside / "secret").write_bytes(SECRET)
        os.chmod(self.outside / "secret", 0o600)
        self.manifest = json.loads((self.qdir / MANIFEST).read_text())

    def edit(self, change: Callable[[dict], None]) -> None:
        """Rewrite the manifest as the data dir's owner."""
        manifest = json.loads(json.dumps(self.manifest))
        change(manifest)
        path = self.qdir / MANIFEST

        def write() -> None:
            tmp = path.with_suffix(".new")
            tmp.write_text(json.dumps(manifest))
            os.replace(tmp, path)
        as_user(UID, write)


def _sized_tail(s: Setup, m: dict, data: bytes) -> None:
    m["logSizeBefore"] = m["validBytes"] + len(data)


def _attacks() -> List[Tuple[str, Callable[[Setup, dict], None], str]]:
    """(name, edit of the manifest given the setup, the field the refusal names)."""
    def overwrite(s: Setup, m: dict) -> None:  # restore copied the "original index" over precious.conf
        m["originalIndexes"][0]["file"] = str(s.outside / "precious.conf")

    def delete(s: Setup, m: dict) -> None:  # copy null: restore deleted the file
        m["originalIndexes"][0] = {"file": str(s.outside / "precious.conf"), "copy": None}

    def move_elsewhere(s: Setup, m: dict) -> None:  # a quarantined segment moved "back" outside
        m["movedFiles"][0]["from"] = str(s.outside / STOLEN)

    def tail_append(s: Setup, m: dict) -> None:  # root's secret appended to the world-readable .log
        m["tailFile"] = str(s.outside / "secret")
        _sized_tail(s, m, SECRET)

    def dotdot(s: Setup, m: dict) -> None:
        m["movedFiles"][0]["from"] = f"{s.partition}/../../outside/{STOLEN}"

    def dotdot_to(s: Setup, m: dict) -> None:  # root's secret moved into the partition, for the broker to read
        m["movedFiles"][0]["to"] = f"{s.qdir}/../../../outside/secret"

    def absolute_to(s: Setup, m: dict) -> None:
        m["movedFiles"][0]["to"] = str(s.outside / "secret")

    def checkpoint(s: Setup, m: dict) -> None:
        m["checkpoints"][0]["file"] = str(s.outside / "precious.conf")

    def other_topic(s: Setup, m: dict) -> None:  # a checkpoint entry of another partition
        entry = next(c for c in m["checkpoints"] if "topic" in c)
        entry["topic"] = "payments"

    def other_partition(s: Setup, m: dict) -> None:  # a root-owned copy of the partition restored into
        victim = s.outside / "victim" / "orders-0"
        shutil.copytree(s.partition, victim)
        for p in [victim.parent, victim, *victim.iterdir()]:
            os.chown(p, 0, 0)
        m["partition"] = str(victim)

    return [("overwrite outside", overwrite, "originalIndexes[0].file"),
            ("delete via copy null", delete, "originalIndexes[0].file"),
            ("move elsewhere", move_elsewhere, "movedFiles[0].from"),
            ("tailFile append of a foreign file", tail_append, "tailFile"),
            ("dotdot", dotdot, "movedFiles[0].from"),
            ("dotdot into the quarantine", dotdot_to, "movedFiles[0].to"),
            ("absolute path", absolute_to, "movedFiles[0].to"),
            ("checkpoint outside", checkpoint, "checkpoints[0].file"),
            ("checkpoint of another topic", other_topic, "checkpoints["),
            ("another user's partition", other_partition, "partition")]


def _link_attacks() -> List[Tuple[str, Callable[[Setup], None], str]]:
    """Attacks on the quarantine dir's files, the manifest itself left as the cut wrote it (or only resized)."""
    def symlink_tail(s: Setup) -> None:
        tail = s.qdir / s.manifest["tailFile"]
        s.edit(lambda m: _sized_tail(s, m, SECRET))
        as_user(UID, lambda: (tail.unlink(), tail.symlink_to(s.outside / "secret")))

    def symlink_moved(s: Setup) -> None:
        moved = s.qdir / s.manifest["movedFiles"][0]["to"]
        as_user(UID, lambda: (moved.unlink(), moved.symlink_to(s.outside / "secret")))

    def hardlink_tail(s: Setup) -> None:
        # Made by root here: a system without fs.protected_hardlinks lets the broker's user do it.
        tail = s.qdir / s.manifest["tailFile"]
        tail.unlink()
        os.link(s.outside / "secret", tail)
        s.edit(lambda m: _sized_tail(s, m, SECRET))

    def swapped_tail(s: Setup) -> None:  # other bytes of the same size: only the sha256 tells
        tail = s.qdir / s.manifest["tailFile"]
        size = tail.stat().st_size
        as_user(UID, lambda: tail.write_bytes(b"X" * size))

    return [("symlink tail", symlink_tail, "tailFile"), ("symlink moved file", symlink_moved, "movedFiles[0]"),
            ("hard link tail", hardlink_tail, "tailFile"), ("swapped tail bytes", swapped_tail, "tailSha256")]


def _refused(res, field: str) -> None:
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and res.output.startswith("kstore: error: "), res.output
    assert field in res.output, res.output


@pytest.mark.parametrize("attack", _attacks(), ids=lambda a: a[0])
def test_restore_refuses_a_manifest_edited_by_the_data_dirs_owner(attack, world_tmp: Path, umask077) -> None:
    name, change, field = attack
    s = Setup(world_tmp)
    s.edit(lambda m: change(s, m))
    assert MANIFEST in str(s.qdir / MANIFEST)
    before = snapshot(world_tmp)
    for argv in (["restore", str(s.qdir)], ["restore", "--dry-run", str(s.qdir)],
                 ["restore", "--json", str(s.qdir)]):
        res = invoke(argv)
        assert snapshot(world_tmp) == before, f"{name}: {argv} changed files"
        _refused(res, field)
        assert MANIFEST in res.output, res.output


@pytest.mark.parametrize("attack", _link_attacks(), ids=lambda a: a[0])
def test_restore_refuses_links_and_swapped_bytes_in_the_quarantine_dir(attack, world_tmp: Path, umask077) -> None:
    name, change, field = attack
    s = Setup(world_tmp)
    change(s)
    before = snapshot(world_tmp)
    for argv in (["restore", str(s.qdir)], ["restore", "--dry-run", str(s.qdir)]):
        res = invoke(argv)
        assert snapshot(world_tmp) == before, f"{name}: {argv} changed files"
        _refused(res, field)


def test_an_unedited_manifest_of_the_data_dirs_owner_restores(world_tmp: Path, umask077) -> None:
    """The control: the same setup, the manifest left as the cut wrote it, restores (files keep their owner)."""
    s = Setup(world_tmp)
    assert s.manifest["version"] == 2 and "/" not in s.manifest["segment"] + s.manifest["tailFile"]
    assert all(len(e["sha256"]) == 64 and "/" not in e["from"] + e["to"] for e in s.manifest["movedFiles"])
    res = invoke(["restore", str(s.qdir)])
    assert res.exit_code == 0, res.output
    assert {os.lstat(p).st_uid for p in s.partition.iterdir()} == {UID}
    assert not (s.outside / STOLEN).exists()


def test_a_hard_link_backup_of_the_data_dir_does_not_stop_restore(world_tmp: Path, umask077) -> None:
    """A second name of a quarantined file that the quarantine dir's owner owns (e.g. `cp -al` of the data
    dir before the cut) is no attack: restore goes ahead (only links to another user's file are refused)."""
    s = Setup(world_tmp)
    moved = s.qdir / s.manifest["movedFiles"][0]["to"]
    os.link(moved, world_tmp / "backup-of-a-segment")
    res = invoke(["restore", str(s.qdir)])
    assert res.exit_code == 0, res.output
    assert (s.partition / moved.name).read_bytes() == (world_tmp / "backup-of-a-segment").read_bytes()


def test_a_version_1_manifest_restores_only_with_paths_into_its_own_dirs(world_tmp: Path, umask077) -> None:
    """A manifest written before version 2 (absolute paths, no hashes) still restores when each path is in
    the dir it belongs to; the same manifest with one path elsewhere is refused."""
    s = Setup(world_tmp)
    m = json.loads(json.dumps(s.manifest))
    part, q, data = str(s.partition), str(s.qdir), str(s.partition.parent)
    m.pop("version", None), m.pop("tailSha256", None)

    def at(directory: str, name: str) -> str:
        return name if name is None or "/" in name else f"{directory}/{name}"
    m["segment"] = at(part, m["segment"])
    m["tailFile"] = at(q, m["tailFile"])
    m["movedFiles"] = [{"from": at(part, e["from"]), "to": at(q, e["to"])} for e in m["movedFiles"]]
    m["originalIndexes"] = [{"file": at(part, e["file"]), "copy": at(q, e["copy"])} for e in m["originalIndexes"]]
    for c in m["checkpoints"]:
        c["file"] = at(part if "topic" not in c else data, c["file"])
    bad = json.loads(json.dumps(m))
    bad["movedFiles"][0]["from"] = str(s.outside / STOLEN)
    s.edit(lambda e: (e.clear(), e.update(bad)))
    before = snapshot(world_tmp)
    res = invoke(["restore", str(s.qdir)])
    assert snapshot(world_tmp) == before
    _refused(res, "movedFiles[0].from")
    s.edit(lambda e: (e.clear(), e.update(m)))
    res = invoke(["restore", str(s.qdir)])
    assert res.exit_code == 0, res.output
    assert not (s.outside / STOLEN).exists()


def test_the_resume_of_a_killed_cut_refuses_an_edited_manifest(world_tmp: Path, umask077, tmp_path: Path) -> None:
    """rebuild-index --truncate killed after writing its manifest: the rerun finishes the cut from that
    manifest; edited to copy the original index over a file outside, the rerun is refused instead."""
    data = world_tmp / "data"
    make_data_dir(data)
    damaged_in_place(data)
    kafka_dir(data)
    outside = world_tmp / "outside"
    outside.mkdir()
    (outside / "precious.conf").write_bytes(PRECIOUS)
    argv = TRUNCATE + [str(data / "orders-0")]
    assert forked_crash(argv, 11)  # killed after the manifest (3 dirs made, its 4 steps), before the first copy
    (qdir,) = (world_tmp / "kstore-quarantine" / "orders-0").iterdir()
    manifest = json.loads((qdir / MANIFEST).read_text())
    assert not (qdir / manifest["originalIndexes"][0]["copy"]).exists()
    manifest["originalIndexes"][0]["copy"] = str(outside / "precious.conf")

    def write() -> None:
        (qdir / MANIFEST).write_text(json.dumps(manifest))
    as_user(UID, write)
    before = snapshot(world_tmp)
    res = invoke(argv)
    assert snapshot(world_tmp) == before
    _refused(res, "originalIndexes[0].copy")


def test_restore_refuses_a_salvage_quarantine_dir_in_one_line(tmp_path: Path) -> None:
    """Low: restore on salvage --in-place's quarantine dir printed KeyError: 'segment'."""
    part = make_data_dir(tmp_path / "data")
    damaged_in_place(tmp_path / "data")
    assert invoke(["salvage", "--in-place", str(part)]).exit_code in (0, 1)
    (qdir,) = (tmp_path / "kstore-quarantine" / "orders-0").iterdir()
    assert qdir.name.endswith("-salvage")
    before = snapshot(tmp_path)
    for argv in (["restore", "--dry-run", str(qdir)], ["restore", str(qdir)]):
        res = invoke(argv)
        assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
        assert "salvage --in-place" in res.output and "does not undo" in res.output, res.output
    assert snapshot(tmp_path) == before


def test_salvages_finish_refuses_an_edited_manifest(tmp_path: Path) -> None:
    """Salvage's rerun reads its unfinished quarantine manifests through the same check."""
    part = make_data_dir(tmp_path / "data")
    damaged_in_place(tmp_path / "data")
    assert invoke(["salvage", "--in-place", str(part)]).exit_code in (0, 1)
    (qdir,) = (tmp_path / "kstore-quarantine" / "orders-0").iterdir()
    manifest = json.loads((qdir / MANIFEST).read_text())
    assert manifest["ranges"]
    manifest["finished"] = False
    manifest["ranges"][0]["savedAs"] = "../../../etc/passwd"
    (qdir / MANIFEST).write_text(json.dumps(manifest))
    before = snapshot(tmp_path)
    _refused(invoke(["salvage", "--in-place", str(part)]), "ranges[0].savedAs")
    assert snapshot(tmp_path) == before


def test_salvage_records_the_size_and_sha256_of_each_saved_range(tmp_path: Path) -> None:
    part = make_data_dir(tmp_path / "data")
    damaged_in_place(tmp_path / "data")
    assert invoke(["salvage", "--in-place", str(part)]).exit_code in (0, 1)
    (qdir,) = (tmp_path / "kstore-quarantine" / "orders-0").iterdir()
    ranges = json.loads((qdir / MANIFEST).read_text())["ranges"]
    assert ranges
    for r in ranges:
        saved = (qdir / r["savedAs"]).read_bytes()
        assert r["size"] == len(saved) and r["sha256"] == hashlib.sha256(saved).hexdigest()
