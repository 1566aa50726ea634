"""`kstore metadata`: output modes, secrets never shown, --format commands as Kafka's tools parse it, errors."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import pytest
from click.testing import CliRunner

from kstore_cli.cli import cli, _register_commands
from kstore_cli.record.builder import RecordSpec, build_v2_batch
from kstore_cli.record.reader import read_batches
from tests.make_metadata_cluster import (
    BASE_TS, DIR_A, SCRAM_SALT, SCRAM_SERVER_KEY, SCRAM_STORED_KEY, partition, rec, uid,
)

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "fixtures" / "kraft-cluster"
LOG = "00000000000000000000.log"
SNAPSHOT_END = int((CASES / "SPANS.txt").read_text().splitlines()[0].split("=")[1])
SNAPSHOT = f"{SNAPSHOT_END:020d}-{1:010d}.checkpoint"


@pytest.fixture(scope="module")
def runner():
    _register_commands()
    return CliRunner()


def run(runner, *args):
    return runner.invoke(cli, ["metadata", *map(str, args)], catch_exceptions=False)


def kstore(*args, env=None):
    return subprocess.run([sys.executable, "-m", "kstore_cli", "metadata", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, env=env)


def _copy(tmp_path: Path, case: str = "full") -> Path:
    dst = tmp_path / case
    shutil.copytree(CASES / case, dst)
    return dst


def _append(data_dir: Path, pairs, offset: int = 69) -> None:
    """A batch of metadata records at ``offset`` appended to the log of a copied case (after an
    EndTransactionRecord closing the transaction the fixture leaves open)."""
    log = data_dir / "__cluster_metadata-0" / LOG
    pairs = [rec("EndTransactionRecord", 0)] + list(pairs)
    specs = [RecordSpec(offset + i, BASE_TS + offset * 1000, k, v) for i, (k, v) in enumerate(pairs)]
    with open(log, "ab") as f:
        f.write(build_v2_batch(specs, partition_leader_epoch=1))


# ---- secrets -----------------------------------------------------------------------------------

SECRETS = [SCRAM_SALT, SCRAM_STORED_KEY, SCRAM_SERVER_KEY]


def _secret_forms():
    for s in SECRETS:
        for variant in (s, s + b"b"):
            yield variant.decode("latin-1")
            yield base64.b64encode(variant).decode()
            yield variant.hex()
            yield variant.hex().upper()
        yield s[:12].decode("latin-1")  # any recognisable piece
        yield base64.b64encode(s)[:12].decode()


@pytest.mark.parametrize("mode", [[], ["--json"], ["--format", "commands"]])
@pytest.mark.parametrize("case", ["full", "trimmed"])
@pytest.mark.parametrize("as_of", [None, str(SNAPSHOT_END), "60"])
def test_no_output_mode_shows_a_scram_secret(runner, mode, case, as_of):
    extra = ["--as-of", as_of] if as_of else []
    res = run(runner, *mode, *extra, CASES / case)
    assert res.exit_code == 0, res.output
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "alice" in out or mode == ["--format", "commands"]
    for form in _secret_forms():
        assert form not in out, f"secret {form!r} in {mode} output"


def test_as_of_before_a_trimmed_log_is_a_problem(runner):
    """No snapshot at or before the offset and the log starts later: said, exit 1 (not an empty cluster)."""
    res = run(runner, "--as-of", "20", CASES / "trimmed")
    assert res.exit_code == 1
    assert "the records before it are missing from the image" in res.stderr


def test_the_secrets_are_really_in_the_fixture():
    """Guards the test above: the salts and keys are on disk, so an output that carried them would show them."""
    data = (CASES / "full" / "__cluster_metadata-0" / LOG).read_bytes()
    assert all(s in data for s in SECRETS)


# ---- output ------------------------------------------------------------------------------------

def test_table_lists_the_cluster(runner):
    res = run(runner, CASES / "full")
    assert res.exit_code == 0
    out = res.output
    assert "cluster id: kstoreClusterIdTest0001" in out
    assert "metadata.version: 4.0-IV0 (level 22)" in out
    assert re.search(r"^  3  epoch 12  fenced", out, re.M)
    assert "in controlled shutdown" in out
    assert "0: leader 2 (epoch 1)  replicas 1,2,3  isr 1,2" in out and "elr 3" in out
    assert "broker (cluster default): log.retention.hours=100" in out
    assert "topic legacy" not in out and "aborted" not in out.split("notes")[0].replace("aborted metadata", "")
    assert "scram users (2): alice (SCRAM_SHA_256), bob (SCRAM_SHA_512)" in out
    assert "delegation tokens (1): token-one (owner User:alice)" in out
    assert "not finished" in res.stderr and "1 aborted metadata transaction(s)" in res.stderr


def test_json_source_line_and_notes(runner):
    res = run(runner, "--json", CASES / "trimmed")
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    src = lines[0]
    assert src["type"] == "source" and src["snapshot"] == SNAPSHOT
    assert src["open_transaction_start"] == 67 and src["end_offset"] == 69 and src["problems"] == []
    assert [e["type"] for e in lines[1:]].count("topic") == 3


def test_as_of_before_the_snapshot_replays_the_log(runner):
    res = run(runner, "--json", "--as-of", "18", CASES / "full")
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[0]["snapshot"] is None
    assert [e["name"] for e in lines if e["type"] == "topic"] == ["orders"]


def test_as_of_time_iso(runner):
    when = "2023-11-14T22:13:30Z"  # BASE_TS + 10 s: the batches up to offset 10
    res = run(runner, "--json", "--as-of", when, CASES / "full")
    src = json.loads(res.stdout.splitlines()[0])
    assert src["as_of_time"] == BASE_TS + 10_000 and src["as_of_offset"] is not None


def test_as_of_garbage_is_a_usage_error():
    proc = kstore("--as-of", "yesterday", CASES / "full")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--as-of" in proc.stderr


def test_bootstrap_checkpoint_where_there_is_nothing_else(runner):
    res = run(runner, "--json", CASES / "bootstrap")
    assert res.exit_code == 0
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[0]["bootstrap"] == str(CASES / "bootstrap" / "bootstrap.checkpoint")
    assert lines[1]["metadata_version"] == "3.9-IV0"
    assert "bootstrap.checkpoint" in res.stderr


def test_bootstrap_checkpoint_is_not_used_when_there_is_a_log(tmp_path, runner):
    d = _copy(tmp_path)
    shutil.copy(CASES / "bootstrap" / "bootstrap.checkpoint", d / "bootstrap.checkpoint")
    res = run(runner, "--json", d)
    assert res.exit_code == 0 and "bootstrap" not in json.loads(res.stdout.splitlines()[0])
    assert json.loads(res.stdout.splitlines()[1])["metadata_version"] == "4.0-IV0"


def test_data_dirs_are_searched_for_the_metadata_log(tmp_path, runner):
    other = tmp_path / "other"
    (other / "orders-0").mkdir(parents=True)
    res = run(runner, "--json", other, CASES / "full")
    assert res.exit_code == 0 and json.loads(res.stdout.splitlines()[0])["metadata_dir"].endswith("__cluster_metadata-0")
    two = _copy(tmp_path)
    proc = kstore(two, CASES / "full")
    assert proc.returncode == 2 and "more than one __cluster_metadata-0" in proc.stderr


def test_a_checkpoint_file_on_its_own(runner):
    snap = CASES / "full" / "__cluster_metadata-0" / SNAPSHOT
    res = run(runner, "--json", snap)
    assert res.exit_code == 0
    topics = [json.loads(x)["name"] for x in res.stdout.splitlines() if '"topic"' in x]
    assert topics == ["__consumer_offsets", "legacy", "orders"]


def test_read_only(tmp_path):
    d = _copy(tmp_path)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in d.rglob("*") if p.is_file()}
    for mode in ([], ["--json"], ["--format", "commands"]):
        assert kstore(*mode, d).returncode == 0
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in d.rglob("*") if p.is_file()}
    assert before == after


# ---- errors ------------------------------------------------------------------------------------

def test_damage_before_intact_batches_stops_the_image_there_and_is_a_problem(tmp_path):
    # Kafka's recovery cuts the log at the first invalid batch whatever follows (KafkaMetadataLog recovers
    # from offset 0 at every start); intact batches after it make it damage, not a torn write: exit 1.
    d = _copy(tmp_path)
    log = d / "__cluster_metadata-0" / LOG
    data = bytearray(log.read_bytes())
    data[700] ^= 0xFF
    log.write_bytes(bytes(data))
    proc = kstore("--json", d)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert re.fullmatch(rf"kstore: problem: {re.escape(str(log))} at byte \d+: .*crc.*: damage, not a torn write "
                        rf".* \(the image is as of offset {SNAPSHOT_END}\)", lines[0], re.I)
    src = json.loads(proc.stdout.splitlines()[0])
    # the damage is below the snapshot's end: the image is the snapshot's, as Kafka loads it
    assert src["end_offset"] == SNAPSHOT_END and src["cut"]["torn"] is False and src["cut"]["bytes"] > 0


def test_damaged_snapshot_one_line(tmp_path):
    d = _copy(tmp_path)
    snap = d / "__cluster_metadata-0" / SNAPSHOT
    data = bytearray(snap.read_bytes())
    data[200] ^= 0x01
    snap.write_bytes(bytes(data))
    proc = kstore("--json", d)
    assert proc.returncode == 1 and proc.stdout == ""
    assert re.fullmatch(rf"kstore: error: {re.escape(str(snap))} at byte \d+: .*\n", proc.stderr)


def _torn(tmp_path: Path, how: str) -> Tuple[Path, Path, int]:
    """A copy of the "full" case whose log ends as a crash leaves it: a write cut short after its first 30
    bytes, the last batch short of its last 5 bytes, or the last batch failing its CRC."""
    d = _copy(tmp_path)
    log = d / "__cluster_metadata-0" / LOG
    data = log.read_bytes()
    last = list(read_batches(str(log)))[-1].position
    if how == "partial-write":
        log.write_bytes(data + data[:30])
        return d, log, len(data)
    if how == "last-batch-short":
        log.write_bytes(data[:-5])
    else:
        log.write_bytes(data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:])
    return d, log, last


@pytest.mark.parametrize("how", ["partial-write", "last-batch-short", "last-batch-crc"])
def test_torn_tail_is_left_out_as_kafka_cuts_it_with_a_warning(tmp_path, how):
    d, log, cut_at = _torn(tmp_path, how)
    before = log.read_bytes()
    proc = kstore(d)
    assert proc.returncode == 0, proc.stderr
    assert "topics (3):" in proc.stdout and "  orders  id" in proc.stdout
    (line,) = [x for x in proc.stderr.splitlines() if not x.startswith("kstore: note:")]
    assert line.startswith(f"kstore: warning: {log} at byte {cut_at}: ") and "a torn tail" in line
    assert log.read_bytes() == before  # read-only
    src = json.loads(kstore("--json", d).stdout.splitlines()[0])
    assert src["cut"]["torn"] is True and src["cut"]["position"] == cut_at and src["problems"] == []
    assert len(src["warnings"]) == 1
    # the image is the one of the log without its last batch (or with all of it, for a partial write)
    full = json.loads(kstore("--json", CASES / "full").stdout.splitlines()[0])
    assert src["end_offset"] == full["end_offset"] if how == "partial-write" else src["end_offset"] < full["end_offset"]


def test_newer_record_version_is_reported_not_skipped(runner):
    res = run(runner, "--json", CASES / "newer")
    assert res.exit_code == 1
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert lines[1]["finalized_versions"] == {"x.feature": 1}  # read as Kafka 4.0 reads it
    assert "FeatureLevelRecord record(s) of version 1" in res.stderr and "kstore: problem:" in res.stderr


def test_unknown_record_type_is_skipped_and_named(tmp_path):
    # a record of a type kstore does not know (a newer Kafka's) is skipped, not the rest of the log: the records
    # after it apply, and the skip is named in text, JSON and the exit status
    d = _copy(tmp_path)
    _append(d, [(None, b"\x01\x63\x00\x00"),  # api key 99
                rec("TopicRecord", 0, Name="after-unknown", TopicId=uid(77))])
    proc = kstore("--json", d)
    assert proc.returncode == 1
    assert re.search(r"kstore: problem: 1 record\(s\) of type 99 \(version 0\) in the log \(first at offset 70\) "
                     r"skipped: a record type newer than kstore knows \(newest: ClearElrRecord = type 28\)", proc.stderr)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    src = lines[0]
    assert src["skipped_records"] == 1 and len(src["newer"]) == 1 and src["newer"][0] in src["problems"]
    assert src["end_offset"] == 72
    assert "after-unknown" in {o["name"] for o in lines if o["type"] == "topic"}


#: a TopicRecord's frame (frame version 1, api key 2) with the record version as the unsigned varint 0xFFFFFFFF,
#: which Java's readUnsignedVarint returns as the int -1
_VERSION_MINUS_ONE = bytes([1, 2, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F])


def test_version_varint_0xffffffff_with_no_body_stops_there(tmp_path):
    # Kafka reads version -1 as the lowest version (the generated read has no version check): the empty body
    # does not parse ("Failed to deserialize record with type 2") and the load stops. kstore used to read
    # nothing at version -1 and add a topic with an empty name.
    d = _copy(tmp_path)
    _append(d, [(None, _VERSION_MINUS_ONE)])
    proc = kstore("--json", d)
    assert proc.returncode == 1 and proc.stdout == ""
    assert re.fullmatch(r"kstore: error: .* at byte \d+: metadata record at offset 70: TopicRecord v-1 does not "
                        r"parse: .*\n", proc.stderr)


def test_version_varint_0xffffffff_reads_as_the_lowest_version(tmp_path):
    # A body that parses as version 0 is applied, as Kafka's loader applies it (the oracle shows the topic),
    # and the odd version is a problem.
    d = _copy(tmp_path)
    _key, value = rec("TopicRecord", 0, Name="minus-one", TopicId=uid(77))
    _append(d, [(None, _VERSION_MINUS_ONE + value[3:])])
    proc = kstore("--json", d)
    assert proc.returncode == 1
    topics = [json.loads(line) for line in proc.stdout.splitlines() if '"topic"' in line]
    assert {"name": "minus-one", "id": uid(77)}.items() <= next(t for t in topics if t["name"] == "minus-one").items()
    assert "" not in {t["name"] for t in topics}
    assert "1 TopicRecord record(s) of version -1 in the log (first at offset 70)" in proc.stderr


def test_record_that_does_not_apply_is_a_problem(tmp_path):
    d = _copy(tmp_path)
    _append(d, [rec("FenceBrokerRecord", 0, Id=9, Epoch=1)])
    proc = kstore(d)
    assert proc.returncode == 1 and "record at offset 70 does not apply: no broker 9" in proc.stderr


def test_no_metadata_log_is_a_usage_error(tmp_path):
    proc = kstore(tmp_path)
    assert proc.returncode == 2 and "no __cluster_metadata-0" in proc.stderr


def test_unlistable_metadata_dir_exit_3(capsys):
    """A dir that cannot be listed (permissions; root reads anything, so the refusal is simulated)."""
    from unittest import mock

    from kstore_cli.cli import main

    denied = PermissionError(13, "Permission denied")
    with mock.patch("kstore_cli.cluster.metadata_loader.os.listdir", side_effect=denied), pytest.raises(SystemExit) as e:
        main(["metadata", str(CASES / "full")])
    err = capsys.readouterr().err
    assert e.value.code == 3 and err.count("\n") == 1 and "could not list: Permission denied" in err


def test_missing_path_exit_3(tmp_path):
    proc = kstore(tmp_path / "nope")
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1


# ---- --format commands, run through the tools' own argument rules ---------------------------------

#: TopicCommand.TopicCommandOptions / ConfigCommand.ConfigCommandOptions (Kafka 4.0): options and whether
#: they take an argument
TOPIC_OPTS = {"bootstrap-server": True, "command-config": True, "list": False, "create": False, "delete": False,
              "alter": False, "describe": False, "topic": True, "topic-id": True, "config": True,
              "delete-config": True, "partitions": True, "replication-factor": True, "replica-assignment": True,
              "under-replicated-partitions": False, "unavailable-partitions": False,
              "under-min-isr-partitions": False, "at-min-isr-partitions": False, "topics-with-overrides": False,
              "if-exists": False, "if-not-exists": False, "exclude-internal": False,
              "partition-size-limit-per-response": True, "help": False, "version": False}
CONFIG_OPTS = {"bootstrap-server": True, "bootstrap-controller": True, "command-config": True, "alter": False,
               "describe": False, "all": False, "entity-type": True, "entity-name": True, "entity-default": False,
               "add-config": True, "add-config-file": True, "delete-config": True, "force": False, "topic": True,
               "client": True, "user": True, "broker": True, "broker-logger": True, "ip": True, "group": True,
               "client-defaults": False, "user-defaults": False, "broker-defaults": False, "ip-defaults": False,
               "help": False, "version": False}

FAKE_TOOL = r'''#!{python}
import json, os, re, sys
OPTS = {opts}
args, parsed = sys.argv[1:], {{}}
i = 0
while i < len(args):
    a = args[i]
    assert a.startswith("--"), "not an option: " + a
    name = a[2:]
    assert name in OPTS, "unknown option " + a
    if OPTS[name]:
        i += 1
        assert i < len(args), "option " + a + " requires an argument"
        parsed.setdefault(name, []).append(args[i])
    else:
        parsed.setdefault(name, []).append(None)
    i += 1
tool = os.path.basename(sys.argv[0])
if tool == "kafka-topics.sh":
    # TopicCommandOptions.checkArgs for --create
    assert sum(k in parsed for k in ("create", "list", "alter", "describe", "delete")) == 1
    assert "bootstrap-server" in parsed and "topic" in parsed
    if "replica-assignment" in parsed:
        assert "partitions" not in parsed and "replication-factor" not in parsed
        for part in parsed["replica-assignment"][0].split(","):
            assert all(x.strip().isdigit() for x in part.split(":")), part
    for k in ("partitions", "replication-factor"):
        if k in parsed:
            int(parsed[k][0])
    for c in parsed.get("config", []):
        assert len(re.split(r"\s*=\s*", c)) == 2, "--config " + c
else:
    assert sum(k in parsed for k in ("alter", "describe")) == 1
    assert parsed["entity-type"][0] in ("topics", "clients", "users", "brokers", "broker-loggers", "ips",
                                         "client-metrics", "groups")
    assert ("entity-name" in parsed) != ("entity-default" in parsed)
    pat = r"(?=[^\]]*(?:\[|$))"
    for kv in re.split("," + pat, parsed["add-config"][0]):
        assert len(re.split(r"\s*=\s*" + pat, kv)) == 2, "--add-config " + kv
with open(os.environ["CALLS"], "a") as f:
    f.write(json.dumps([tool, parsed]) + "\n")
'''


@pytest.fixture()
def fake_tools(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, opts in (("kafka-topics.sh", TOPIC_OPTS), ("kafka-configs.sh", CONFIG_OPTS)):
        p = bin_dir / name
        p.write_text(FAKE_TOOL.format(python=sys.executable, opts=repr(opts)))
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _run_script(script: str, bin_dir: Path, tmp_path: Path, bootstrap: str = "new-cluster:9092"):
    calls = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls)}
    if bootstrap is not None:
        env["BOOTSTRAP_SERVER"] = bootstrap
    else:
        env.pop("BOOTSTRAP_SERVER", None)
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)
    return proc, [json.loads(x) for x in calls.read_text().splitlines()] if calls.exists() else []


def _properties_value(v: str) -> str:
    return re.sub(r"\[?\]?", "", v).strip()  # ConfigCommand.parseConfigsToBeAdded


def test_commands_recreate_topics_and_configs(fake_tools, tmp_path):
    proc = kstore("--format", "commands", CASES / "full")
    assert proc.returncode == 0, proc.stderr
    run_, calls = _run_script(proc.stdout, fake_tools, tmp_path)
    assert run_.returncode == 0, run_.stderr
    topics = {c[1]["topic"][0]: c[1] for c in calls if c[0] == "kafka-topics.sh"}
    assert set(topics) == {"orders", "txn-topic"}  # __consumer_offsets: a comment, Kafka makes it
    assert topics["orders"]["replica-assignment"] == ["1:2:3,2:3:1,3:1"]
    assert sorted(topics["orders"]["config"]) == ["cleanup.policy=compact,delete", "min.insync.replicas=2"]
    assert topics["txn-topic"]["partitions"] == ["1"] and topics["txn-topic"]["replication-factor"] == ["1"]
    assert all(c[1]["bootstrap-server"] == ["new-cluster:9092"] for c in calls)
    configs = {(c[1].get("entity-name", [""])[0]): c[1]["add-config"][0] for c in calls if c[0] == "kafka-configs.sh"}
    assert configs == {"": "log.retention.hours=100", "1": "log.cleaner.threads=2"}


def test_commands_refuse_to_run_without_a_bootstrap_server(fake_tools, tmp_path):
    proc = kstore("--format", "commands", CASES / "full")
    run_, calls = _run_script(proc.stdout, fake_tools, tmp_path, bootstrap=None)
    assert run_.returncode != 0 and calls == [] and "set BOOTSTRAP_SERVER" in run_.stderr


def test_commands_values_that_need_quoting_or_brackets(fake_tools, tmp_path):
    d = _copy(tmp_path)
    _append(d, [rec("ConfigRecord", 0, ResourceType=2, ResourceName="orders", Name="message.timestamp.type",
                    Value="Create Time; $(touch /tmp/x)"),
                rec("ConfigRecord", 0, ResourceType=4, ResourceName="", Name="listener.security.protocol.map",
                    Value="A:PLAINTEXT,B:SSL"),
                rec("ConfigRecord", 0, ResourceType=4, ResourceName="2", Name="sasl.jaas.config",
                    Value="x required user=\"a\";"),
                rec("ConfigRecord", 0, ResourceType=2, ResourceName="orders", Name="empty", Value="")])
    proc = kstore("--format", "commands", "--bootstrap-server", "h:1", d)
    assert proc.returncode == 1  # three things cannot be carried: said on stderr and in the script
    assert proc.stdout.count("# NOT RECREATED:") == 3
    assert "topic unfinished: no partitions" in proc.stderr
    assert "sasl.jaas.config" in proc.stderr and "empty=''" in proc.stderr
    run_, calls = _run_script(proc.stdout, fake_tools, tmp_path)
    assert run_.returncode == 0, run_.stderr
    orders = [c[1] for c in calls if c[0] == "kafka-topics.sh" and c[1]["topic"] == ["orders"]][0]
    assert "message.timestamp.type=Create Time; $(touch /tmp/x)" in orders["config"]
    default = [c[1] for c in calls if c[0] == "kafka-configs.sh" and "entity-default" in c[1]][0]
    kv = dict(re.split(r"\s*=\s*(?=[^\]]*(?:\[|$))", x) for x in
              re.split(r",(?=[^\]]*(?:\[|$))", default["add-config"][0]))
    assert _properties_value(kv["listener.security.protocol.map"]) == "A:PLAINTEXT,B:SSL"
    assert all(c[1]["bootstrap-server"] == ["h:1"] for c in calls)


# ---- --topics and Kafka's reserved directory ids -------------------------------------------------

def _json_lines(text: str):
    return [json.loads(line) for line in text.splitlines()]


def test_topics_filters_topics_partitions_and_topic_configs_in_text(runner):
    res = run(runner, "--topics", "ord*,nothing-matches", CASES / "full")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "topics (1):" in out and "  orders  id" in out and "txn-topic" not in out and "__consumer_offsets" not in out
    assert "topic orders: min.insync.replicas=2" in out and "topic txn-topic" not in out
    # the other sections are the whole cluster's
    assert "broker (cluster default): log.retention.hours=100" in out and "brokers (3):" in out
    assert "ALLOW User:alice READ on TOPIC LITERAL orders" in out and "acls (2):" in out


def test_topics_filters_json(runner):
    everything = _json_lines(run(runner, "--json", CASES / "full").stdout)
    res = run(runner, "--json", "--topics", "txn-*", CASES / "full")
    assert res.exit_code == 0
    lines = _json_lines(res.stdout)
    assert [e["name"] for e in lines if e["type"] == "topic"] == ["txn-topic"]
    assert {e["name"] for e in lines if e["type"] == "config" and e["resource_type"] == "TOPIC"} <= {"txn-topic"}
    assert "orders" in {e["name"] for e in everything if e["type"] == "config" and e["resource_type"] == "TOPIC"}
    assert [e for e in lines if e["type"] not in ("topic", "config")] == \
        [e for e in everything if e["type"] not in ("topic", "config")]


def test_topics_filters_commands(runner):
    res = run(runner, "--format", "commands", "--topics", "orders", CASES / "full")
    assert res.exit_code == 0
    creates = [line for line in res.stdout.splitlines() if "--create" in line]
    assert len(creates) == 1 and "--topic orders" in creates[0] and "min.insync.replicas=2" in creates[0]
    assert "kafka-configs.sh" in res.stdout  # broker configs are not topic-scoped: still there


def test_topics_matching_nothing_lists_no_topic(runner):
    res = run(runner, "--json", "--topics", "no-such-*", CASES / "full")
    assert res.exit_code == 0
    lines = _json_lines(res.stdout)
    assert not [e for e in lines if e["type"] == "topic" or (e["type"] == "config" and e["resource_type"] == "TOPIC")]


MIGRATING, UNASSIGNED, LOST = "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"


def _reserved_case(tmp_path: Path) -> Path:
    data_dir = _copy(tmp_path)
    _append(data_dir, [rec("TopicRecord", 0, Name="reserved", TopicId=uid(90)),
                       partition(uid(90), 0, [1, 2, 3, 1], [UNASSIGNED, LOST, MIGRATING, DIR_A]),
                       partition(uid(90), 1, [2, 3], [], version=0)])
    return data_dir


def test_reserved_directory_ids_are_named(tmp_path, runner):
    """DirectoryId.MIGRATING / UNASSIGNED / LOST are Uuid(0, 0/1/2) (checked against the oracle's Kafka in
    test_metadata_image_oracle); a PartitionRecord without directories is every replica MIGRATING
    (PartitionRegistration.defaultToMigrating)."""
    assert base64.urlsafe_b64decode(LOST + "==") == bytes(15) + b"\x02"
    data_dir = _reserved_case(tmp_path)
    out = run(runner, "--topics", "reserved", data_dir).stdout
    assert f"dirs UNASSIGNED,LOST,MIGRATING,{DIR_A}" in out
    assert "replicas 2,3  isr 2,3  dirs MIGRATING,MIGRATING" in out
    assert "AAAAAAAAAAAAAAAAAAAA" not in out.split("topics (")[1].split("configs (")[0]
    topic = [e for e in _json_lines(run(runner, "--json", "--topics", "reserved", data_dir).stdout)
             if e["type"] == "topic"][0]
    p0, p1 = topic["partitions"]
    assert p0["directories"] == [UNASSIGNED, LOST, MIGRATING, DIR_A]  # the raw ids stay
    assert p0["directoryNames"] == ["UNASSIGNED", "LOST", "MIGRATING", None]
    assert p1["directories"] == [MIGRATING, MIGRATING] and p1["directoryNames"] == ["MIGRATING", "MIGRATING"]


def test_directories_all_migrating_follow_the_replicas_and_a_record_of_unequal_lengths_stops(tmp_path, runner):
    """PartitionRegistration.merge: directories that are all MIGRATING (a partition from before directory
    assignment) default to one MIGRATING per replica when a PartitionChangeRecord changes the replicas;
    checkDirectories: a record whose own replicas and directories differ in length stops the load."""
    data_dir = _copy(tmp_path / "grow")
    _append(data_dir, [rec("TopicRecord", 0, Name="grown", TopicId=uid(91)),
                       partition(uid(91), 0, [1, 2], [MIGRATING, MIGRATING]),
                       rec("PartitionChangeRecord", 1, PartitionId=0, TopicId=uid(91), Replicas=[1, 2, 3],
                           Isr=[1, 2, 3])])
    res = run(runner, "--json", "--topics", "grown", data_dir)
    assert res.exit_code == 0, res.stderr
    (topic,) = [e for e in _json_lines(res.stdout) if e["type"] == "topic"]
    assert topic["partitions"][0]["directories"] == [MIGRATING] * 3
    data_dir = _copy(tmp_path / "unequal")
    _append(data_dir, [rec("TopicRecord", 0, Name="unequal", TopicId=uid(92)),
                       partition(uid(92), 0, [1, 2], [MIGRATING, MIGRATING, MIGRATING])])
    res = run(runner, data_dir)
    assert res.exit_code == 1 and "InvalidReplicaDirectoriesException" in res.stderr, (res.stdout, res.stderr)
