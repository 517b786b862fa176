"""Fetch semantics, driven in-process: long poll without busy-waiting, byte limits, KIP-74."""

import asyncio
import uuid

from odradek.broker.handlers import fetch as fetch_module
from odradek.records.codec import Record, decode_batches, encode_batch
from tests.wire import parse_response, request_frame

ZERO = uuid.UUID(int=0)


def _fetch_frame(topic, partitions, max_wait=0, min_bytes=1, max_bytes=1 << 20, version=12, topic_id=ZERO):
    return request_frame(1, version, {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": off, "log_start_offset": -1,
             "partition_max_bytes": pmax} for p, off, pmax in partitions]}]})


def _produce(inproc, topic, partition, values, compression=0):
    batch = encode_batch([Record(i, 1_700_000_000_000 + i, None, v) for i, v in enumerate(values)], compression=compression)
    plog = inproc.broker.logs.get(topic, partition)
    from odradek.records.batch import validate_batches

    return plog.append(bytearray(batch), validate_batches(batch), inproc.broker.clock())


def test_long_poll_parks_then_wakes_on_append_without_busy_waiting(inproc, monkeypatch):
    inproc.broker.create_topic("lp", 2, {})
    reads = []
    real = fetch_module._read_all
    monkeypatch.setattr(fetch_module, "_read_all", lambda *a: reads.append(1) or real(*a))

    async def scenario():
        task = asyncio.ensure_future(inproc.broker.handle_frame(_fetch_frame("lp", [(0, 0, 1 << 20), (1, 0, 1 << 20)], max_wait=10_000)[4:]))
        await asyncio.sleep(0.3)
        assert not task.done(), "fetch answered before any data arrived"
        parked_reads = len(reads)
        _produce(inproc, "lp", 1, [b"hello"])
        response = await asyncio.wait_for(task, 2)
        return parked_reads, response

    parked_reads, response = inproc.loop.run_until_complete(scenario())
    assert parked_reads == 1, "the parked fetch re-read the log while waiting (busy-wait)"
    assert len(reads) == 2
    _, body = parse_response(1, 12, response)
    p1 = body.responses[0].partitions[1]
    assert [r.value for b in decode_batches(p1.records) for r in b.records] == [b"hello"]
    assert p1.high_watermark == 1


def test_long_poll_times_out_with_empty_response(inproc):
    inproc.broker.create_topic("idle", 1, {})

    async def scenario():
        loop = asyncio.get_running_loop()
        start = loop.time()
        response = await inproc.broker.handle_frame(_fetch_frame("idle", [(0, 0, 1 << 20)], max_wait=200)[4:])
        return loop.time() - start, response

    elapsed, response = inproc.loop.run_until_complete(scenario())
    assert elapsed >= 0.19
    _, body = parse_response(1, 12, response)
    assert body.responses[0].partitions[0].records in (b"", None)


def test_min_bytes_waits_for_enough_data(inproc):
    inproc.broker.create_topic("mb", 1, {})

    async def scenario():
        task = asyncio.ensure_future(inproc.broker.handle_frame(_fetch_frame("mb", [(0, 0, 1 << 20)], max_wait=5000, min_bytes=500)[4:]))
        await asyncio.sleep(0.05)
        _produce(inproc, "mb", 0, [b"x" * 10])
        await asyncio.sleep(0.05)
        assert not task.done(), "answered with fewer than min_bytes"
        _produce(inproc, "mb", 0, [b"y" * 600])
        return await asyncio.wait_for(task, 2)

    _, body = parse_response(1, 12, inproc.loop.run_until_complete(scenario()))
    values = [r.value for b in decode_batches(body.responses[0].partitions[0].records) for r in b.records]
    assert values == [b"x" * 10, b"y" * 600]


def test_partition_max_bytes_and_first_batch_always_whole(inproc):
    inproc.broker.create_topic("kip74", 2, {})
    for i in range(5):
        _produce(inproc, "kip74", 0, [b"a" * 1000])
        _produce(inproc, "kip74", 1, [b"b" * 1000])
    # partition_max_bytes smaller than one batch: the first partition still gets one whole batch
    response = inproc.handle(_fetch_frame("kip74", [(0, 0, 100), (1, 0, 100)]))
    _, body = parse_response(1, 12, response)
    p0, p1 = body.responses[0].partitions
    assert [len(b.records) for b in decode_batches(p0.records)] == [1]
    # the second partition is held to its limit: at most 100 bytes, i.e. no whole batch
    assert len(p1.records or b"") <= 100 and decode_batches(p1.records or b"") == []
    # max_bytes across the response
    response = inproc.handle(_fetch_frame("kip74", [(0, 0, 1 << 20), (1, 0, 1 << 20)], max_bytes=2500))
    _, body = parse_response(1, 12, response)
    total = sum(len(p.records or b"") for p in body.responses[0].partitions)
    assert total <= 2500


def test_fetch_by_topic_id_v13_plus(inproc):
    topic = inproc.broker.create_topic("byid", 1, {})
    _produce(inproc, "byid", 0, [b"v"])
    response = inproc.handle(_fetch_frame(None, [(0, 0, 1 << 20)], version=16, topic_id=topic.topic_id))
    _, body = parse_response(1, 16, response)
    assert body.responses[0].topic_id == topic.topic_id
    assert [r.value for b in decode_batches(body.responses[0].partitions[0].records) for r in b.records] == [b"v"]


def test_stored_bytes_are_served_unchanged_for_compressed_batches(inproc):
    inproc.broker.create_topic("zz", 1, {})
    batch = encode_batch([Record(i, 1_700_000_000_000, b"k", b"v" * 50) for i in range(20)], compression=4)
    from odradek.records.batch import validate_batches

    inproc.broker.logs.get("zz", 0).append(bytearray(batch), validate_batches(batch), 0)
    _, body = parse_response(1, 12, inproc.handle(_fetch_frame("zz", [(0, 0, 1 << 20)])))
    served = body.responses[0].partitions[0].records
    # Only the base offset (0 here) and the partition leader epoch (set to 0) are patched;
    # everything from the magic byte on, the CRC'd compressed payload included, is as sent.
    assert served[:12] == batch[:12] and served[12:16] == b"\x00\x00\x00\x00" and served[16:] == batch[16:]


def test_nonzero_fetch_session_id_is_not_found(inproc):
    inproc.broker.create_topic("s", 1, {})
    frame = request_frame(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 1234, "session_epoch": 3, "forgotten_topics_data": [], "rack_id": "", "topics": []})
    _, body = parse_response(1, 12, inproc.handle(frame))
    assert int(body.error_code) == 70  # FETCH_SESSION_ID_NOT_FOUND


def test_a_zstd_topic_is_not_served_to_fetch_before_v10(inproc):
    # KafkaApis.maybeConvertFetchedData: compression.type=zstd and a Fetch older than v10
    # (KIP-110) is UNSUPPORTED_COMPRESSION_TYPE; the others are served as usual.
    inproc.broker.create_topic("z", 1, {"compression.type": "zstd"})
    inproc.broker.create_topic("plain", 1, {})
    _produce(inproc, "z", 0, [b"a"])
    _produce(inproc, "plain", 0, [b"b"])
    for version, expected in ((9, 76), (10, 0)):
        _, body = parse_response(1, version, inproc.handle(_fetch_frame("z", [(0, 0, 1 << 20)], version=version)))
        assert int(body.responses[0].partitions[0].error_code) == expected, version
    _, body = parse_response(1, 9, inproc.handle(_fetch_frame("plain", [(0, 0, 1 << 20)], version=9)))
    p = body.responses[0].partitions[0]
    assert int(p.error_code) == 0 and [r.value for b in decode_batches(p.records) for r in b.records] == [b"b"]
