"""``kstore dump-segment`` against Kafka's dump-log output stored in fixtures/kraft-metadata (no Kafka needed).

Every KRaft metadata record type and version (log and snapshot), and every coordinator / transaction-log /
remote-log-metadata record type and version; fixtures/kraft-metadata/README.md says how they were made.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.parsers.test_metadata_dump_oracle import _as_oracle_lines, run_kstore

GOLDEN = ROOT / "fixtures" / "kraft-metadata"
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text())


@pytest.mark.parametrize("case", sorted(MANIFEST))
def test_dump_matches_kafkas_stored_output(case: str) -> None:
    spec = MANIFEST[case]
    code, out, err = run_kstore([*spec["options"], "--files", str(GOLDEN / spec["file"])])
    expected = (GOLDEN / f"{case}.stdout").read_text(encoding="utf-8").replace("<DIR>/", str(GOLDEN) + "/")
    assert _as_oracle_lines(out) == expected.splitlines()
    assert code == (1 if "skipping." in expected or "unknown::version=" in expected else 0)
    assert b"Traceback" not in err


def test_the_golden_covers_every_metadata_record_type_and_version() -> None:
    from tests.parsers.metadata_factory import ORACLE_RECORD_TYPES

    text = (GOLDEN / "metadata-snapshot.stdout").read_text(encoding="utf-8")
    for t in ORACLE_RECORD_TYPES.values():  # the golden is Kafka 4.0's output: the types it knows
        for version in range(t.lowest_supported_version, t.highest_supported_version + 1):
            assert f'"type":"{t.name}","version":{version},' in text
