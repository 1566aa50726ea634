"""``kstore doctor --kafka-version``: upgrade readiness findings among doctor's own, in text and JSON."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kstore_cli.cli import cli
from tests.operations.test_upgrade import kraft_data_dir, zk_data_dir


def _doctor(*args):
    return CliRunner().invoke(cli, ["doctor", *args], catch_exceptions=False)


def test_doctor_kafka_version_lists_upgrade_findings(tmp_path):
    data = zk_data_dir(tmp_path, magic=1)
    plain = _doctor("--json", str(data))
    result = _doctor("--json", "--kafka-version", "4.0", str(data))
    assert result.exit_code == 1
    lines = [json.loads(line) for line in result.output.splitlines()]
    upgrade = sorted((f["check"], f["partition"] and f["partition"].rsplit("/", 1)[1])
                     for f in lines if f["type"] == "finding" and f["check"].startswith("upgrade-"))
    assert upgrade == [("upgrade-message-format", "__consumer_offsets-0"), ("upgrade-message-format", "orders-0"),
                       ("upgrade-zookeeper-metadata", None)]
    assert not any(f["check"].startswith("upgrade-") for f in map(json.loads, plain.output.splitlines())
                   if f["type"] == "finding")
    text = _doctor("--kafka-version", "4.0", str(data)).output
    assert "error: upgrade-zookeeper-metadata" in text and "kstore convert-format --to-magic 2 --in-place" in text


def test_doctor_kafka_version_on_a_ready_kraft_dir_adds_nothing(tmp_path):
    data = kraft_data_dir(tmp_path)
    before = [json.loads(line) for line in _doctor("--json", str(data)).output.splitlines()]
    after = [json.loads(line) for line in _doctor("--json", "--kafka-version", "4.0", str(data)).output.splitlines()]
    for line in after:  # the data dir's line says which release was asked for; nothing else differs
        if "judged_as" in line:
            assert line["judged_as"]["asked"] == "4.0"
            line["judged_as"]["asked"] = None
    assert before == after


def test_doctor_rejects_a_version_that_is_not_one(tmp_path):
    result = _doctor("--kafka-version", "four", str(kraft_data_dir(tmp_path)))
    assert result.exit_code == 2 and "is not a Kafka version" in result.output
