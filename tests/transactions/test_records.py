"""TransactionLogKey/Value: Kafka's layout, round trips, corrupt input."""

import pytest

from odradek.coordinator.records import RecordError
from odradek.transactions import records as R
from odradek.transactions.model import TxnMetadata, TxnState


def test_round_trip_and_kafka_layout():
    txn = TxnMetadata("tx-1", 42, 3, 60_000, TxnState.ONGOING, frozenset({("a", 1), ("a", 0), ("b", 2)}), 1000, 900)
    key, value = R.encode("tx-1", txn)
    assert key == b"\x00\x00\x00\x04tx-1"
    # version 0, producer id, epoch, timeout, status 1
    assert value[:2] == b"\x00\x00" and value[2:10] == (42).to_bytes(8, "big") and value[10:12] == b"\x00\x03"
    assert value[12:16] == (60_000).to_bytes(4, "big") and value[16] == 1
    assert R.decode(key, value) == ("tx-1", txn)


def test_tombstone():
    key, value = R.encode("tx", None)
    assert value is None and R.decode(key, None) == ("tx", None)


@pytest.mark.parametrize("value", [b"\x00\x00\x00", b"\x00\x09" + b"\x00" * 40, b"\x00\x00" + b"\x00" * 14 + b"\x09"])
def test_corrupt_values_raise_record_error(value):
    with pytest.raises(RecordError):
        R.decode_value("tx", value)
