import pytest

from kstore_cli.log.kafka_version import KafkaVersion, VersionRange


def test_parse_and_order():
    assert KafkaVersion.parse("3.9") == KafkaVersion(3, 9, 0)
    assert KafkaVersion.parse("4.0.0-SNAPSHOT") == KafkaVersion(4, 0, 0)
    assert KafkaVersion.parse("2.8.1") < KafkaVersion.parse("2.10") < KafkaVersion.parse("3.0")
    assert str(KafkaVersion.parse("3.9.0")) == "3.9" and str(KafkaVersion(2, 8, 1)) == "2.8.1"
    assert KafkaVersion(4, 1).at_least("4.0") and not KafkaVersion(3, 9).at_least("4.0")


@pytest.mark.parametrize("text", ["four", "4", "0.9", "", "3.x"])
def test_refuses_what_is_no_release(text):
    with pytest.raises(ValueError):
        KafkaVersion.parse(text)


def test_range():
    r = VersionRange(KafkaVersion(2, 1), KafkaVersion(2, 7))
    assert str(r) == "2.1-2.7" and KafkaVersion(2, 4) in r and KafkaVersion(2, 8) not in r
    assert str(VersionRange(KafkaVersion(3, 0))) == "3.0 or newer" and KafkaVersion(9, 0) in VersionRange(KafkaVersion(3, 0))
