"""Every record of every decoder golden: our parser's key/payload texts must be exactly Kafka's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from kstore_cli.errors import RecordParseError
from kstore_cli.parsers import make_parser, render_control
from kstore_cli.record.reader import read_batches

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "kafka-golden"

CASES = [
    "offsets-decoder", "offsets-decoder-skip-metadata", "offsets-print-string", "offsets-share-group-state-decoder",
    "txnstate-decoder", "txnstate-decoder-bad-state", "txnstate-offsets-decoder",
    "metadata-print", "metadata-decoder", "metadata-checkpoint",
    "metadata-bootstrap-checkpoint",
    "codecs-offsets-decoder", "codecs-transaction-log-decoder", "codecs-cluster-metadata-decoder",
    "codecs-remote-log-metadata-decoder", "codecs-share-group-state-decoder",
    "numeric-decoders", "numeric-string", "codecs-key-decoder-default", "codecs-value-decoder-string",
    "codecs-print", "codecs-print-skip-metadata", "txn-print", "multiseg-print-all",
    "legacy-v1-print", "logappend-print",
]

_FLAGS = {
    "--offsets-decoder": "offsets", "--transaction-log-decoder": "transaction_log",
    "--cluster-metadata-decoder": "cluster_metadata", "--remote-log-metadata-decoder": "remote_log_metadata",
    "--share-group-state-decoder": "share_group_state",
}


def _options(args: List[str]) -> Tuple[Dict[str, object], bool, bool, List[str], bool]:
    opts: Dict[str, object] = {}
    print_data = "--print-data-log" in args
    for i, arg in enumerate(args):
        if arg in _FLAGS:
            opts[_FLAGS[arg]] = True
            print_data = True
        if arg in ("--key-decoder-class", "--value-decoder-class"):
            print_data = True
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                opts["key_decoder" if arg.startswith("--key") else "value_decoder"] = args[i + 1]
    files = args[args.index("--files") + 1].split(",")
    deep = print_data or "--deep-iteration" in args
    return opts, print_data and deep, "--skip-record-metadata" in args, files, deep


def _sections(stdout: str) -> Dict[str, str]:
    """stdout split by ``Dumping <file>`` header."""
    parts = re.split(r"^Dumping (.*)$", stdout, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def _record_text(key: Optional[str], payload: Optional[str], prefix: str) -> str:
    text = ""
    if key is not None:
        text += f"{prefix}key: {key}"
    if payload is not None:
        text += f" payload: {payload}"
    return text


@pytest.mark.parametrize("case", CASES)
def test_golden_case(case: str) -> None:
    args = shlex.split((GOLDEN / "dump" / f"{case}.cmd").read_text())[1:]
    stdout = (GOLDEN / "dump" / f"{case}.stdout").read_bytes().decode("utf-8")
    stderr = (GOLDEN / "dump" / f"{case}.stderr").read_bytes().decode("utf-8")
    opts, print_data, skip_metadata, files, deep = _options(args)
    if not deep:
        pytest.skip("no record lines without deep iteration")
    parser = make_parser(**opts)
    checked = 0
    for name in files:
        section = _sections(stdout)[name]
        cursor = 1  # (after the header's newline) where the previous record's text ended (for --skip-record-metadata cases)
        for batch in read_batches(str(GOLDEN / name)):
            for record in batch.records():
                if not skip_metadata:
                    m = re.search(r"^\| offset: %d .*?(?:headerKeys: \[[^\]\n]*\]|isValid: \w+ crc: \d+\})" % record.offset, section, re.M)
                    assert m, f"offset {record.offset} not in golden"
                    cursor = m.end()
                if batch.is_control:
                    if skip_metadata:
                        continue
                    type_id = int.from_bytes(record.key[2:4], "big", signed=True)
                    text = render_control(type_id, record.key, record.value)
                    assert section[cursor:].startswith(text + "\n"), (record.offset, text)
                    checked += 1
                    continue
                if not print_data:
                    continue
                try:
                    key, payload = parser.parse(record.offset, record.key, record.value)
                except RecordParseError as e:
                    # Kafka printed the partial line, then died with this exception message.
                    assert section[cursor:] == "", "Kafka printed more after the abort"
                    first = stderr.splitlines()[0]
                    assert first.startswith('Exception in thread "main" ') and first.endswith(": " + str(e))
                    checked += 1
                    return
                if skip_metadata:
                    while section.startswith(("baseOffset", "Log starting", "Snapshot end", "KRaft"), cursor):
                        cursor = section.index("\n", cursor) + 1
                    if key is None:
                        expected = _record_text(None, payload, "")
                    else:
                        expected = _record_text(key, payload, "| ")
                    assert section[cursor:].startswith(expected + "\n"), (record.offset, expected)
                    cursor += len(expected) + 1
                else:
                    expected = _record_text(key, payload, " ")
                    assert section[cursor:].startswith(expected + "\n"), (record.offset, expected)
                checked += 1
    if print_data or "isControl: true" in stdout:
        assert checked > 0
