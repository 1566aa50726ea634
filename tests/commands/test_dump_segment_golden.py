"""`kstore dump-segment` against every real kafka-dump-log run in fixtures/kafka-golden/dump.

Each case ran with the working directory set to the kafka-golden dir; `<RUN_DIR>/` in the goldens
stands for that dir. Checked per case:

* stdout byte for byte;
* stderr byte for byte where Kafka printed its own messages;
* where Kafka died with a Java exception: one `kstore: error:` line carrying the same meaning
  (the key words and numbers of the Java message, listed per case below) and our exit status;
* the interleaving of the two streams (`.combined`), in-process and through a real `2>&1` pipe;
* the exit status by kstore's rules: 0 when nothing is wrong, 1 when the data has problems.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import main
from tests.conftest import GOLDEN, ROOT

DUMP = GOLDEN / "dump"
CASES: List[dict] = json.loads((DUMP / "MANIFEST.json").read_text())
RUN_DIR = str(GOLDEN) + "/"

#: Cases about Kafka's own command line (usage text, --help, --version): not reproduced, tested below.
USAGE_CASES = {"no-args", "help", "version", "missing-files-value"}

#: Where Kafka's tool died: our exit status and the words of the Java message our one line must carry.
CRASHES: Dict[str, Tuple[int, List[str]]] = {
    # StringIndexOutOfBoundsException: begin -1 (no '.' in the name)
    "codecs-leader-epoch-checkpoint": (2, ["leader-epoch-checkpoint", "no '.'"]),
    # RuntimeException: Failed to decode message at offset 18 using offset topic decoder (message had a missing key)
    "codecs-offsets-decoder": (1, ["offset 18", "offset topic decoder", "missing key"]),
    # NullPointerException: Cannot invoke "java.nio.ByteBuffer.getShort()" because "buffer" is null
    "codecs-transaction-log-decoder": (1, ["getShort", "null"]),
    # RuntimeException: ... at offset 18 using share group state topic decoder (message had a missing key)
    "codecs-share-group-state-decoder": (1, ["offset 18", "share group state topic decoder", "missing key"]),
    # NoSuchFileException: inputs/codecs-0/00000000000000000999.log
    "codecs-nonexistent-file": (3, ["inputs/codecs-0/00000000000000000999.log", "no such file"]),
    # NoSuchElementException (no batch fits in 10 bytes at the first entry's position, 202)
    "multiseg-index-max-message-size-10": (1, ["position 202", "max-message-size 10", "NoSuchElementException"]),
    # IllegalStateException: Unknown transaction state id 9 from the transaction status message
    "txnstate-decoder-bad-state": (1, ["Unknown transaction state id 9"]),
    # CorruptRecordException: Found record size 5 smaller than minimum record overhead (14) in file ...
    "corrupt-badsize-shallow": (1, ["record size 5 smaller than minimum record overhead (14)", "at byte 6658"]),
    # InvalidRecordException: Found invalid record count -738714302 in magic v2 batch
    "corrupt-garbage-deep": (1, ["invalid record count -738714302", "at byte 6658"]),
    # KafkaException: Error checking for remaining bytes after reading batch (Caused by: Corrupt GZIP trailer)
    "corrupt-gzip-print": (1, ["gzip", "at byte 96"]),
    # CorruptIndexException: ... the last offset is 20 which is less than the base offset 23
    "bad-sanity-index": (1, ["last offset is 20", "less than the base offset 23"]),
    # CorruptIndexException: ... the last timestamp is 1700000211002 which is less than the first timestamp 1700000211003
    "bad-sanity-timeindex": (1, ["last timestamp is 1700000211002", "less than the first timestamp 1700000211003"]),
    "sparse-index-sanity": (1, ["last timestamp is 0", "less than the first timestamp 1700000211003"]),
    # NoSuchFileException: <RUN_DIR>/inputs/missing-log-0/00000000000000000050.log
    "missing-log-index": (3, [RUN_DIR + "inputs/missing-log-0/00000000000000000050.log", "no such file"]),
    "missing-log-timeindex": (3, [RUN_DIR + "inputs/missing-log-0/00000000000000000050.log", "no such file"]),
}

#: Kafka's own messages that mean "the data has problems" (exit status 1 by kstore's rules).
_PROBLEM_MARKS_STDOUT = [
    re.compile(rb" isvalid: false$", re.M),
    re.compile(rb"^Found \d+ invalid bytes at the end of ", re.M),
    # a record the decoder could not decode: Kafka says "skipping" (or unknown::version=N), kstore exits 1
    re.compile(rb"(key|payload): (Error at (offset )?\d+, skipping\. |Unknown record type -?\d+ at offset \d+, skipping\.)"),
    re.compile(rb" key: unknown::version=-?\d+$", re.M),
]
_PROBLEM_MARKS_STDERR = [
    b"Mismatches in :",
    b"Found timestamp mismatch in :",
    b"Found out of order timestamp in :",
    b"The following indexed offsets are not found in the log.",
    b"Snapshot is corrupt",
    b"Snapshot failed schema validation",
]


class Run(NamedTuple):
    code: int
    stdout: bytes
    stderr: bytes
    combined: bytes


def golden(case: str, ext: str) -> bytes:
    return (DUMP / f"{case}.{ext}").read_bytes().replace(b"<RUN_DIR>/", RUN_DIR.encode())


def run_in_process(args: List[str], monkeypatch: pytest.MonkeyPatch) -> Run:
    """`kstore dump-segment ARGS` through cli.main (the real error mapping), in the kafka-golden dir."""
    monkeypatch.chdir(GOLDEN)
    monkeypatch.delenv("KSTORE_TRACEBACK", raising=False)
    runner = CliRunner()
    with runner.isolation() as (out, err, mixed):
        try:
            main(["dump-segment", *args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        return Run(code, out.getvalue(), err.getvalue(), mixed.getvalue())


def run_subprocess(args: List[str], *, merge: bool = False) -> Run:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KSTORE_TRACEBACK", None)
    proc = subprocess.run(
        [sys.executable, "-m", "kstore_cli", "dump-segment", *args],
        cwd=GOLDEN,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge else subprocess.PIPE,
        timeout=120,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr or b"", proc.stdout if merge else b"")


def kafka_crashed(case: str) -> bool:
    return golden(case, "stderr").startswith(b"Exception in thread")


def expected_status(case: str) -> int:
    if case in CRASHES:
        return CRASHES[case][0]
    out, err = golden(case, "stdout"), golden(case, "stderr")
    problems = any(p.search(out) for p in _PROBLEM_MARKS_STDOUT) or any(m in err for m in _PROBLEM_MARKS_STDERR)
    return 1 if problems else 0


def expected_combined(case: str, run: Run) -> bytes:
    """The golden `.combined`, with Java's exception and stack trace replaced by our error line."""
    combined = golden(case, "combined")
    if kafka_crashed(case):
        head = combined.split(b"Exception in thread", 1)[0]
        return head + run.stderr
    return combined


DUMP_CASES = [c["case"] for c in CASES if c["case"] not in USAGE_CASES]
COMBINED_CASES = [c for c in DUMP_CASES if (DUMP / f"{c}.combined").exists()]


def test_manifest_is_complete() -> None:
    assert len(CASES) == 91
    crashed = {c for c in DUMP_CASES if kafka_crashed(c)}
    assert crashed == set(CRASHES), "every case where Kafka crashed needs its expected meaning listed"


@pytest.mark.parametrize("case", DUMP_CASES)
def test_golden_case(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    args = next(c["args"] for c in CASES if c["case"] == case)
    run = run_in_process(args, monkeypatch)
    assert run.stdout == golden(case, "stdout")
    if kafka_crashed(case):
        text = run.stderr.decode("utf-8")
        assert text.startswith("kstore: error: ") and text.endswith("\n")
        assert text.count("\n") == 1, text
        for words in CRASHES[case][1]:
            assert words in text, (words, text)
    else:
        assert run.stderr == golden(case, "stderr")
    assert b"Traceback" not in run.stderr
    assert run.code == expected_status(case), run.stderr
    if case in COMBINED_CASES:
        assert run.combined == expected_combined(case, run)


@pytest.mark.parametrize("case", COMBINED_CASES)
def test_combined_through_a_real_pipe(case: str) -> None:
    """stdout and stderr share one pipe (`2>&1`): the interleaving is Kafka's."""
    args = next(c["args"] for c in CASES if c["case"] == case)
    separate = run_subprocess(args)
    merged = run_subprocess(args, merge=True)
    assert separate.stdout == golden(case, "stdout")
    assert merged.code == separate.code == expected_status(case)
    assert merged.combined == expected_combined(case, separate)


@pytest.mark.parametrize("case", ["codecs-print", "legacy-v1-print", "metadata-checkpoint", "gaps-deep", "bad-index"])
def test_real_subprocess(case: str) -> None:
    entry = next(c for c in CASES if c["case"] == case)
    run = run_subprocess(entry["args"])
    assert run.stdout == golden(case, "stdout")
    assert run.stderr == golden(case, "stderr")
    assert run.code == expected_status(case)


# ------------------------------------------------------------------ Kafka's own command line


@pytest.mark.parametrize("case", ["no-args", "missing-files-value"])
def test_no_files_is_a_usage_error(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    args = next(c["args"] for c in CASES if c["case"] == case)
    assert golden(case, "rc").strip() == b"1" and golden(case, "stdout") == b""  # Kafka: usage text, rc 1
    run = run_in_process(args, monkeypatch)
    assert run.code == 2
    assert run.stdout == b""
    assert b'Missing required argument "[files]"' in run.stderr
    assert b"Traceback" not in run.stderr


def test_help_is_click_help_with_an_example(monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_in_process(["--help"], monkeypatch)
    assert run.code == 0
    text = run.stdout.decode()
    assert "Example:" in text and "kstore dump-segment --deep-iteration --print-data-log" in text
    assert "not reproduced" in text  # Kafka's usage text is not
    for option in ("--files", "--deep-iteration", "--print-data-log", "--key-decoder-class", "--json", "--max-bytes"):
        assert option in text
    assert "Exit status" in text


def test_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from kstore_cli import __version__

    run = run_in_process(["--version"], monkeypatch)
    assert run.code == 0
    assert run.stdout.decode().strip() == f"kstore dump-segment {__version__}"


def test_subprocess_crash_has_no_traceback() -> None:
    run = run_subprocess(["--print-data-log", "--files", "inputs/corrupt-gzip-0/00000000000000000000.log"])
    assert run.stdout == golden("corrupt-gzip-print", "stdout")
    assert run.stderr.startswith(b"kstore: error: inputs/corrupt-gzip-0/00000000000000000000.log at byte 96: ")
    assert run.stderr.count(b"\n") == 1
    assert run.code == 1


def test_positional_files_come_after_files_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--files a` plus positional `b` dumps a then b, exactly like `--files a,b`."""
    a = "inputs/txn-0/00000000000000000000.txnindex"
    b = "inputs/txn-0/00000000000000000012.txnindex"
    mixed = run_in_process([b, "--files", a], monkeypatch)
    assert mixed.stdout == golden("txn-txnindex", "stdout")
    assert mixed.code == 0
    both_positional = run_in_process([a, b], monkeypatch)
    assert both_positional.stdout == golden("txn-txnindex", "stdout")


def test_key_decoder_class_without_value_then_positional(monkeypatch: pytest.MonkeyPatch) -> None:
    """jopt's optional argument: `--key-decoder-class --files X` means the default StringDecoder."""
    run = run_in_process(["--key-decoder-class", "--files", "inputs/codecs-0/00000000000000000000.log"], monkeypatch)
    assert run.stdout == golden("codecs-key-decoder-default", "stdout")


def test_friendly_decoders_match_kafka_class_names(monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_in_process(
        ["--key-decoder", "int", "--value-decoder", "long", "inputs/numeric-0/00000000000000000000.log"], monkeypatch
    )
    assert run.stdout == golden("numeric-decoders", "stdout")
    assert run.code == 0


def test_both_decoder_spellings_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_in_process(
        ["--key-decoder", "int", "--key-decoder-class", "org.apache.kafka.tools.api.IntegerDecoder",
         "inputs/numeric-0/00000000000000000000.log"],
        monkeypatch,
    )
    assert run.code == 2
    assert run.stderr.startswith(b"kstore: error: ")


def test_deprecated_decoder_class_prints_kafkas_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_in_process(
        ["--value-decoder-class", "kafka.serializer.StringDecoder", "--files", "inputs/codecs-0/00000000000000000000.log"],
        monkeypatch,
    )
    expected = golden("codecs-value-decoder-string", "stdout").split(b"\n", 1)
    notice = b"kafka.serializer.StringDecoder is deprecated. Please use org.apache.kafka.tools.api.StringDecoder instead\n"
    assert run.stdout == expected[0] + b"\n" + notice + expected[1]


def test_negative_max_bytes_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_in_process(["--max-bytes", "-1", "inputs/codecs-0/00000000000000000000.log"], monkeypatch)
    assert run.code == 2
    assert run.stdout == b""


def test_unknown_decoder_class_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_in_process(["--value-decoder-class", "com.example.Nope", "inputs/codecs-0/00000000000000000000.log"],
                         monkeypatch)
    assert run.code == 2
    assert run.stderr.startswith(b"kstore: error: ")
    assert b"Traceback" not in run.stderr


def test_golden_dir_is_where_we_think(tmp_path: Path) -> None:
    assert (GOLDEN / "inputs" / "codecs-0" / "00000000000000000000.log").is_file()
