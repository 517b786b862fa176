"""The Spark source's isolation level (`kafka.isolation.level`, KIP-98), without Spark: the
option, the executor's Fetch (aborted transactions cut out, markers skipped, the range ending
at the last stable offset) and the driver's ListOffsets, against a scripted fake broker
running on the client's sync loop."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import TopicPartition
from odradek.client.sync import run
from odradek.records.codec import encode_batch
from odradek.records.control import Marker, encode_marker
from odradek.spark import offsets as OFF
from odradek.spark.fetch import drop_aborted, read_range
from odradek.spark.options import parse_source_options

from ..client.fakes import FakeBroker, list_offsets_reply

TS = 1_700_000_000_000


def data(first: int, n: int, *, pid: int = -1, txn: bool = False) -> bytes:
    return encode_batch([(o, TS + o, None, b"v%d" % o) for o in range(first, first + n)], base_offset=first,
                        producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                        is_transactional=txn)


def marker(offset: int, pid: int, commit: bool) -> bytes:
    return encode_marker(Marker(pid, 0, commit, 0), TS, base_offset=offset)


# aborted 0..2 (marker 3), committed 4..5 (marker 6), plain 7
LOG = b"".join([data(0, 3, pid=5, txn=True), marker(3, 5, False), data(4, 2, pid=5, txn=True), marker(6, 5, True),
                data(7, 1)])


def options(**kw):
    return parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **kw}, streaming=False)


# ---------------------------------------------------------------- the option


def test_isolation_defaults_to_read_committed():
    # Unlike Spark's own Kafka source (a Java consumer: read_uncommitted).
    assert options().isolation_level == 1


@pytest.mark.parametrize("value,level", [("read_uncommitted", 0), ("read_committed", 1), ("READ_Committed", 1)])
def test_isolation_option(value, level):
    assert options(**{"kafka.isolation.level": value}).isolation_level == level


def test_bad_isolation_option():
    with pytest.raises(ValueError, match="kafka.isolation.level"):
        options(**{"kafka.isolation.level": "serializable"})


def test_input_partitions_carry_the_isolation_level():
    from odradek.spark.source import _partitions

    o = options(**{"kafka.isolation.level": "read_uncommitted"})
    (part,) = _partitions(o, {"t": {0: 0}}, {"t": {0: 8}})
    assert part.isolation_level == 0


# ---------------------------------------------------------------- cutting aborted batches


def test_drop_aborted_cuts_only_the_aborted_batches():
    out = drop_aborted(LOG, [(5, 0)])
    assert out == b"".join([marker(3, 5, False), data(4, 2, pid=5, txn=True), marker(6, 5, True), data(7, 1)])


def test_drop_aborted_returns_the_same_bytes_when_nothing_is_aborted_there():
    assert drop_aborted(LOG, [(9, 0)]) is LOG


def test_drop_aborted_keeps_a_trailing_partial_batch():
    tail = data(8, 3)[:20]
    out = drop_aborted(LOG + tail, [(5, 0)])
    assert out.endswith(tail) and not out.startswith(data(0, 3, pid=5, txn=True))


# ---------------------------------------------------------------- the executor and the driver on the wire


def fetch_handler(lso: int):
    def handler(fake, req):
        responses = []
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                committed = int(req.body.isolation_level) == 1
                first = int(p.fetch_offset) == 0
                parts.append({"partition_index": p.partition, "error_code": ErrorCode.none, "high_watermark": 8,
                              "last_stable_offset": lso, "log_start_offset": 0,
                              "aborted_transactions": [{"producer_id": 5, "first_offset": 0}]
                              if committed and first else None,
                              "preferred_read_replica": -1, "records": LOG if first else None})
            responses.append({"topic": t.topic, "partitions": parts})
        return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}
    return handler


@pytest.fixture
def fake():
    f = run(FakeBroker({1: fetch_handler(8), 2: lambda f, r: list_offsets_reply(
        r, lambda t, p, ts: (ErrorCode.none, 6 if int(r.body.isolation_level) == 1 else 8))},
        topics={"t": 1}).start())
    yield f
    run(f.stop())


@pytest.mark.parametrize("level,offsets", [(1, [4, 5, 7]), (0, [0, 1, 2, 4, 5, 7])])
def test_read_range_drops_aborted_records_for_read_committed(fake, level, offsets):
    batches = list(read_range(fake.bootstrap, "t", 0, 0, 8, fail_on_data_loss=True, include_headers=False,
                              isolation_level=level))
    got = [o for b in batches for o in b.column("offset").to_pylist()]
    assert got == offsets
    assert {int(r.body.isolation_level) for r in fake.of(1)} == {level}


def test_driver_latest_offsets_are_the_last_stable_offset(fake):
    from odradek.spark.source import _BrokerView

    view = _BrokerView(options(**{"kafka.bootstrap.servers": fake.bootstrap}))
    try:
        assert view.offsets([TopicPartition("t", 0)], OFF.LATEST) == {"t": {0: 6}}
    finally:
        view.admin.close()
    assert {int(r.body.isolation_level) for r in fake.of(2)} == {1}
