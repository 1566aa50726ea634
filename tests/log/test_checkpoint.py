"""log/checkpoint.py: an OffsetCheckpointFile's entries, as a dict and as the survey's compact mapping."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstore_cli.errors import CorruptCheckpointError
from kstore_cli.log.checkpoint import OffsetCheckpointEntries, format_offset_checkpoint, read_offset_checkpoint

_ENTRY = st.tuples(st.sampled_from(["orders", "payments", "a.b_c-d"]), st.integers(0, 2**31 - 1),
                   st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(_ENTRY, max_size=40))
def test_compact_entries_equal_the_dict(tmp_path_factory: pytest.TempPathFactory, entries: list) -> None:
    """Every lookup, the length and the keys of the compact mapping are the dict's, a partition named twice
    included (its last offset in both)."""
    path = tmp_path_factory.mktemp("cp") / "recovery-point-offset-checkpoint"
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for t, p, o in entries]
    path.write_text("\n".join(lines) + "\n")
    want = read_offset_checkpoint(path)
    got = OffsetCheckpointEntries.read(path)
    assert dict(got) == want and len(got) == len(want) and set(got) == set(want)
    for topic, partition, _ in entries:
        assert got[(topic, partition)] == want[(topic, partition)]
        assert got.get((topic, partition + 1)) == want.get((topic, partition + 1))
    assert ("absent", 0) not in got


def test_compact_entries_round_trip_and_refuse_what_kafka_refuses(tmp_path: Path) -> None:
    path = tmp_path / "log-start-offset-checkpoint"
    entries = {("t", i): i * 10 for i in range(1000)}
    path.write_text(format_offset_checkpoint(entries))
    assert dict(OffsetCheckpointEntries.read(path)) == entries
    path.write_text("0\n1\nt 0 notanumber\n")
    with pytest.raises(CorruptCheckpointError, match="NumberFormatException"):
        OffsetCheckpointEntries.read(path)
