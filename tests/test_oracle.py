"""The oracle harness itself: one JVM runs several Kafka calls and reports each one apart."""

from tests.conftest import CORPUS
from tests.oracle import kafka_records

def test_smoke(oracle):
    res = oracle.load_logs([CORPUS / "logs" / "idempotent-0", CORPUS / "logs" / "active-closed-0"], clean=True)
    assert all(r.rc == 0 for r in res)
    s = res[0].one("summary")
    assert s["ok"] and s["log_end_offset"] == 404
    assert len(kafka_records(res[0])) == 404
    d = oracle.run("dump-log", "--files", str(CORPUS / "logs" / "idempotent-0" / "00000000000000000000.log"))
    assert d.rc == 0 and "baseOffset: 0" in d.stdout
