"""A data dir's walk held by name (PartitionDirs), sequences chained by position, and inspect's resolution."""

import os
import shutil
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kstore_cli.log.logdir import Chain, Partition, PartitionDir, PartitionDirs, resolve, resolve_partitions
from tests.conftest import CORPUS

_names = st.lists(st.from_regex(r"[a-zA-Z0-9._-]{1,20}-[0-9]{1,4}", fullmatch=True), unique=True, max_size=40)


@settings(max_examples=60, deadline=None)
@given(_names, st.data())
def test_partition_dirs_are_the_sorted_names_as_partition_dirs(found, data):
    links = data.draw(st.sets(st.sampled_from(found))) if found else set()
    dirs = PartitionDirs("/d", "/real/d", list(found), links)
    ordered = sorted(found)
    assert len(dirs) == len(ordered) and list(dirs.names()) == ordered
    for i, name in enumerate(ordered):
        one = dirs[i]
        assert isinstance(one, PartitionDir) and one.path == "/d/" + name
        assert one._data_dir == (None if name in links else "/real/d")
        assert dirs.position(one.path) == i and one.path in dirs and one in dirs
    assert [p.path for p in dirs[1:3]] == ["/d/" + n for n in ordered[1:3]]
    assert "/d/not-there-1" not in dirs and "/elsewhere/" + (ordered[0] if ordered else "x-0") not in dirs
    gone = set(ordered[::3])
    left = dirs.without("/d/" + n for n in gone)
    assert list(left.names()) == [n for n in ordered if n not in gone]
    assert all(left[i]._data_dir == (None if n in links else "/real/d") for i, n in enumerate(left.names()))
    assert dirs.without([]) is dirs and dirs.where(lambda n: True) is dirs


@settings(max_examples=60, deadline=None)
@given(_names, st.integers(1, 5))
def test_names_are_sorted_in_runs_and_merged(found, run):
    """Sorted a few at a time (no list of every name is made), then merged: the same as sorting them all."""
    from kstore_cli.log import logdir

    saved, logdir._RUN = logdir._RUN, run
    try:
        dirs = PartitionDirs("/d", "/d", iter(found))
    finally:
        logdir._RUN = saved
    assert list(dirs.names()) == sorted(found)


@given(st.lists(st.lists(st.integers(), max_size=5), max_size=6))
def test_a_chain_is_its_pieces_one_after_another(pieces):
    chain = Chain(pieces)
    flat = [x for p in pieces for x in p]
    assert len(chain) == len(flat) and list(chain) == flat
    assert [chain[i] for i in range(len(flat))] == flat
    assert [chain[-i] for i in range(1, len(flat) + 1)] == [flat[-i] for i in range(1, len(flat) + 1)]
    try:
        chain[len(flat)]
    except IndexError:
        pass
    else:
        raise AssertionError("past the end")


def _data_dir(root: Path) -> Path:
    for name in ("a-0", "a-1", "b-0"):
        shutil.copytree(CORPUS / "logs" / "v2-none-0", root / name)
    (root / "b-0.0123456789abcdef0123456789abcdef-delete").mkdir()
    (root / "remote-log-index-cache").mkdir()
    return root


def test_inspect_resolves_each_partition_once_in_the_order_first_named(tmp_path):
    """resolve_partitions holds a data dir by name, and gives what resolve gives, each partition once in the
    order first named: a partition named before its data dir, a data dir named twice, a .log of a walked one."""
    data = _data_dir(tmp_path / "data")
    segment = next((data / "a-1").glob("*.log"))
    paths = [str(data / "b-0"), str(data), str(data), str(segment)]
    skipped: list = []
    lazy = resolve_partitions(paths, skipped=skipped)
    assert [os.path.basename(p.path) for p in lazy] == ["b-0", "a-0", "a-1"]
    assert isinstance(lazy[0], Partition) and all(isinstance(p, PartitionDir) for p in list(lazy)[1:])
    eager: list = []
    for target in resolve(paths):
        if target.partition.path not in [p.path for p in eager]:
            eager.append(target.partition)
    assert [p.path for p in lazy] == [p.path for p in eager]
    assert sorted(os.path.basename(p) for p, _ in skipped) == sorted(
        ["b-0.0123456789abcdef0123456789abcdef-delete", "remote-log-index-cache"] * 2)
    assert [p.path for p in resolve_partitions([str(data)], topics="a")] == [str(data / "a-0"), str(data / "a-1")]
    assert len(resolve_partitions([str(data)], topics="zzz")) == 0
