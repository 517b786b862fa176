"""The odradek client against brokers that misbehave: missing APIs, lost connections,
silence, error codes on every path, garbage.

Most tests run against `fakes.FakeBroker` in the test's own event loop (no broker
process). The `interop` ones put `fakes.DroppingProxy` between the client and a real
broker process that advertises the proxy's address, so every connection the client
opens goes through the proxy, which can close one right after forwarding a request.

What the client does when a connection dies mid-request (documented by these tests):
the producer retries the batch and delivers in order (at least once: the lost request
may already have been appended, so the log can hold that batch twice); the consumer
fetches again from its position, so the application sees no gap and no duplicate;
offset calls (commit, fetch committed, list offsets) retry inside `Client.call`; the
other admin calls send once and raise the retriable `KafkaConnectionError` to the
caller, whose retry reconnects (a retried CreateTopics then gets TOPIC_ALREADY_EXISTS,
because the lost request took effect).
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NewTopic,
    TopicPartition,
    UnsupportedApiError,
)
from odradek.client.net import Client
from odradek.client.versions import Api
from odradek.protocol.messages import encode_response
from odradek.records.codec import decode_batches, encode_batch
from tests.client.fakes import (
    CLOSE,
    DATA_APIS,
    HANG,
    DroppingProxy,
    FakeBroker,
    api_versions,
    coordinator_error,
    create_topics_reply,
    describe_cluster_reply,
    fetch_reply,
    find_coordinator,
    garbage_frame,
    list_offsets_reply,
    offset_commit_reply,
    produce_reply,
    sequence,
)
from tests.conftest import BrokerProcess
from tests.wire import RawClient

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000


def run(coro, timeout: float = 30.0):
    """Drive one test coroutine (pytest-asyncio is not installed), bounded."""
    async def bounded():
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(bounded())


async def eventually(predicate, timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def records(first: int, n: int) -> bytes:
    return encode_batch([(o, TS + o, None, b"v%d" % o) for o in range(first, first + n)], base_offset=first)


# ====================================================================== missing APIs


@pytest.mark.parametrize("versions,protocol,missing", [
    (DATA_APIS, "consumer", "FindCoordinator"),
    ({**DATA_APIS, 10: (0, 6), 8: (2, 9), 9: (1, 7)}, "consumer", "ConsumerGroupHeartbeat"),
    (DATA_APIS, "classic", "FindCoordinator"),
    ({**DATA_APIS, 10: (0, 6), 8: (2, 9), 9: (1, 7)}, "classic", "JoinGroup"),
], ids=["consumer-no-group-apis", "consumer-no-heartbeat", "classic-no-group-apis", "classic-no-joingroup"])
def test_subscribe_without_group_apis_names_the_missing_api(versions, protocol, missing):
    async def go():
        async with FakeBroker(versions=versions, topics={"t": 2}) as fake:
            consumer = AsyncConsumer(fake.bootstrap, group_id="g", group_protocol=protocol)
            await consumer.start()
            try:
                consumer.subscribe(["t"])
                started = time.monotonic()
                with pytest.raises(UnsupportedApiError) as info:
                    await consumer.poll(timeout_ms=10_000)
                assert time.monotonic() - started < 5  # raised, not waited out
                assert info.value.api_name == missing and missing in str(info.value)
                assert not info.value.retriable
                with pytest.raises(UnsupportedApiError, match=missing):
                    await consumer.poll(timeout_ms=100)  # and again: the member is stopped
            finally:
                await asyncio.wait_for(consumer.close(), 10)
            assert not fake.rejected  # nothing unsupported was ever sent
    run(go())


def test_admin_list_groups_without_group_apis_names_list_groups():
    async def go():
        async with (FakeBroker(versions=DATA_APIS, topics={"t": 1}) as fake,
                    AsyncAdmin(fake.bootstrap) as admin):
            with pytest.raises(UnsupportedApiError, match="ListGroups") as info:
                await admin.list_groups()
            assert info.value.api_key == 16
            with pytest.raises(UnsupportedApiError, match="FindCoordinator"):
                await admin.describe_groups(["g"])
            # The data path still works on the same connection.
            assert await admin.list_topics() == ["t"]
            assert not fake.rejected
    run(go())


def test_api_versions_fallback_to_v0_when_v3_is_not_served():
    # KIP-511: a broker serving ApiVersions v0-v2 answers the v3 request in v0 layout
    # with UNSUPPORTED_VERSION and its ranges; the client asks again with v0.
    async def go():
        async with FakeBroker(versions={**DATA_APIS, 18: (0, 2)}, topics={"t": 3}) as fake:
            client = Client(fake.bootstrap)
            try:
                await client.refresh_metadata(["t"])
                assert fake.rejected == [(18, 3)]
                assert [r.api_version for r in fake.of(18)] == [0]
                assert client.cluster.partition_count("t") == 3
                _, conn = await client.any_connection()
                assert conn.version(Api.METADATA) == 12
            finally:
                await client.close()
    run(go())


def test_api_versions_v3_unsupported_version_answer_then_v0():
    # A broker that parses v3 but answers UNSUPPORTED_VERSION in the v3 layout: the
    # client asks again with v0 and uses the ranges of that answer.
    def v3_error_then_v0(fake, req):
        if req.api_version == 3:
            return {"error_code": ErrorCode.unsupported_version, "api_keys": [], "throttle_time": 0}
        return {"error_code": ErrorCode.none, "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in fake.versions.items()]}

    async def go():
        async with FakeBroker({18: v3_error_then_v0}, versions={**DATA_APIS, 3: (1, 9)}, topics={"t": 1}) as fake:
            client = Client(fake.bootstrap)
            try:
                await client.refresh_metadata()
                assert [r.api_version for r in fake.of(18)] == [3, 0]
                _, conn = await client.any_connection()
                assert conn.version(Api.METADATA) == 9  # from the v0 answer
                assert [r.api_version for r in fake.of(3)] == [9]
            finally:
                await client.close()
    run(go())


@pytest.mark.parametrize("v3_answer", [CLOSE, garbage_frame()], ids=["closed", "unparsable"])
def test_api_versions_v3_that_kills_the_connection_is_retried_with_v0_on_a_new_one(v3_answer):
    # An old broker may close the connection on a version it does not know, or answer in
    # a layout the v3 reader cannot parse: the client reconnects and asks with v0.
    def handler(fake, req):
        return v3_answer if req.api_version == 3 else api_versions(fake, req)

    async def go():
        async with FakeBroker({18: handler}, topics={"t": 1}) as fake:
            client = Client(fake.bootstrap)
            try:
                await client.refresh_metadata(["t"])
                assert [r.api_version for r in fake.of(18)] == [3, 0]
                assert fake.connections == 2
                assert client.cluster.partition_count("t") == 1
            finally:
                await client.close()
    run(go())


def test_api_versions_error_is_raised():
    async def go():
        async with FakeBroker({18: lambda f, r: {"error_code": ErrorCode.invalid_request, "api_keys": []}}) as fake:
            client = Client(fake.bootstrap, retries=0)
            try:
                with pytest.raises(KafkaError) as info:
                    await client.refresh_metadata()
                assert info.value.name == "INVALID_REQUEST"
            finally:
                await client.close()
    run(go())


def test_failed_negotiation_closes_the_connection():
    async def go():
        async with FakeBroker({18: lambda f, r: {"error_code": ErrorCode.invalid_request, "api_keys": []}}) as fake:
            client = Client(fake.bootstrap, retries=0)
            try:
                with pytest.raises(KafkaError):
                    await client.refresh_metadata()
                await eventually(lambda: fake.client_closes == 1, 1, "the client to close its connection")
            finally:
                await client.close()
    run(go())


# ====================================================================== silence


def test_request_with_no_answer_times_out_and_closes_the_connection():
    async def go():
        async with (FakeBroker({60: sequence(HANG, describe_cluster_reply)}, topics={"t": 1}) as fake,
                    AsyncAdmin(fake.bootstrap, request_timeout_ms=300) as admin):
            _, conn = await admin.client.any_connection()
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError) as info:
                await admin.describe_cluster()
            assert 0.25 < time.monotonic() - started < 3
            assert info.value.retriable and info.value.name == "REQUEST_TIMED_OUT"
            assert conn.closed  # its one response would now be out of order
            await eventually(lambda: fake.client_closes == 1, what="the fake to see the close")
            # The next call opens a new connection and is answered.
            cluster_id, _controller, brokers = await admin.describe_cluster()
            assert cluster_id == fake.cluster_id and [b.node_id for b in brokers] == [fake.node_id]
            assert fake.connections == 2
    run(go())


def _describe_cluster(fake):
    return describe_cluster_reply(fake, None)


def test_silent_api_versions_times_out():
    async def go():
        async with FakeBroker({18: lambda f, r: HANG}) as fake:
            client = Client(fake.bootstrap, request_timeout_ms=300, retries=0)
            try:
                with pytest.raises(KafkaTimeoutError):
                    await client.refresh_metadata()
                await eventually(lambda: fake.client_closes == 1, what="the fake to see the close")
            finally:
                await client.close()
    run(go())


def test_in_flight_requests_all_fail_when_one_times_out():
    # Responses are ordered: once one times out, the others on that connection can never
    # be matched, so they fail with it rather than waiting out their own timeouts.
    async def go():
        slow = asyncio.Event()

        async def hang_then(fake, req):
            await slow.wait()
            return _describe_cluster(fake)

        async with FakeBroker({60: hang_then}) as fake:
            client = Client(fake.bootstrap, request_timeout_ms=5000)
            try:
                await client.refresh_metadata()
                _, conn = await client.any_connection()
                body = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
                first = asyncio.ensure_future(conn.request(Api.DESCRIBE_CLUSTER, body, timeout=0.2))
                second = asyncio.ensure_future(conn.request(Api.DESCRIBE_CLUSTER, body))
                with pytest.raises(KafkaTimeoutError):
                    await first
                with pytest.raises(KafkaTimeoutError):  # at once, with the first one's error
                    await asyncio.wait_for(second, 1)
                assert conn.closed
            finally:
                slow.set()
                await client.close()
    run(go())


# ====================================================================== error codes: produce


def test_produce_not_leader_is_retried_after_a_metadata_refresh():
    async def go():
        handler = sequence(lambda f, r: produce_reply(r, ErrorCode.not_leader_or_follower),
                           lambda f, r: produce_reply(r, base_offset=42))
        async with (FakeBroker({0: handler}, topics={"t": 1}) as fake,
                    AsyncProducer(fake.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer):
            metadata_before = fake.count(3)
            meta = await producer.send_and_wait("t", b"v", partition=0)
            assert (meta.topic, meta.partition, meta.offset) == ("t", 0, 42)
            assert fake.count(0) == 2
            assert fake.count(3) > metadata_before  # the leader was looked up again
            sent = [bytes(r.body.topic_data[0].partition_data[0].records) for r in fake.of(0)]
            assert sent[0] == sent[1]  # the same batch, byte for byte
    run(go())


def test_produce_message_too_large_fails_the_future_without_retry():
    async def go():
        handler = lambda f, r: produce_reply(r, ErrorCode.message_too_large, message="too big")
        async with (FakeBroker({0: handler}, topics={"t": 1}) as fake,
                    AsyncProducer(fake.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer):
            fut = await producer.send("t", b"x" * 100, partition=0)
            with pytest.raises(KafkaError) as info:
                await fut
            assert info.value.name == "MESSAGE_TOO_LARGE" and not info.value.retriable
            assert "too big" in str(info.value)
            assert fake.count(0) == 1
            # The partition is not blocked: the next record goes out (and fails the same way).
            with pytest.raises(KafkaError):
                await producer.send_and_wait("t", b"y", partition=0)
            assert fake.count(0) == 2
    run(go())


def test_produce_connection_closed_mid_request_is_retried():
    async def go():
        handler = sequence(CLOSE, lambda f, r: produce_reply(r, base_offset=7))
        async with (FakeBroker({0: handler}, topics={"t": 1}) as fake,
                    AsyncProducer(fake.bootstrap, linger_ms=0, retry_backoff_ms=10) as producer):
            meta = await producer.send_and_wait("t", b"v", partition=0)
            assert meta.offset == 7 and fake.count(0) == 2 and fake.connections >= 2
    run(go())


def test_send_to_a_topic_with_a_metadata_error_raises_it():
    def md(fake, req):
        body = {"throttle_time": 0, "brokers": fake.broker_entries(), "cluster_id": "c", "controller_id": 1,
                "topics": [{"error_code": ErrorCode.topic_authorization_failed, "name": t.name, "topic_id": None,
                            "is_internal": False, "partitions": [], "topic_authorized_operations": -(2**31)}
                           for t in (req.body.topics or [])]}
        return body

    async def go():
        async with FakeBroker({3: md}) as fake, AsyncProducer(fake.bootstrap, linger_ms=0) as producer:
            with pytest.raises(KafkaError) as info:
                await producer.send("secret", b"v")
            assert info.value.name == "TOPIC_AUTHORIZATION_FAILED"
    run(go())


# ====================================================================== error codes: fetch


def _log_fetch(first: int, end: int, errors: dict | None = None):
    """A Fetch handler over a log holding offsets first..end-1, one batch per fetch of up to
    5 records; `errors` maps a fetch number (1-based) to an error code for that fetch."""
    errors = errors or {}
    n = [0]

    async def handler(fake, req):
        n[0] += 1
        code = errors.get(n[0])

        def part(topic, index, offset):
            if code is not None:
                return {"error_code": code, "high_watermark": -1}
            if offset < first or offset > end:
                return {"error_code": ErrorCode.offset_out_of_range, "high_watermark": -1}
            if offset == end:
                return {"high_watermark": end}
            return {"records": records(offset, min(5, end - offset)), "high_watermark": end}

        reply = fetch_reply(req, part)
        if all(p["records"] is None for t in reply["responses"] for p in t["partitions"]):
            await asyncio.sleep(0.05)  # an empty fetch waits (max_wait), as a broker would
        return reply
    return handler


def _earliest_latest(first: int, end: int, errors: list | None = None):
    errors = list(errors or [])

    def handler(fake, req):
        code = errors.pop(0) if errors else ErrorCode.none
        return list_offsets_reply(req, lambda t, p, ts: (code, -1) if code else (0, first if ts == -2 else end))
    return handler


async def _poll_until(consumer, n: int, timeout: float = 10.0, max_records: int | None = None) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += await consumer.poll(timeout_ms=200, max_records=max_records)
    return got


def test_fetch_offset_out_of_range_resets_to_earliest():
    async def go():
        async with (FakeBroker({1: _log_fetch(5, 15), 2: _earliest_latest(5, 15)}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=50) as consumer):
            consumer.assign([TP])
            consumer.seek(TP, 100)
            got = await _poll_until(consumer, 10)
            assert [r.offset for r in got] == list(range(5, 15))
            assert fake.of(1)[0].body.topics[0].partitions[0].fetch_offset == 100
            assert [int(r.body.topics[0].partitions[0].timestamp) for r in fake.of(2)] == [-2]
            assert await consumer.position(TP) == 15
    run(go())


def test_fetch_offset_out_of_range_resets_to_latest():
    async def go():
        async with (FakeBroker({1: _log_fetch(5, 15), 2: _earliest_latest(5, 15)}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=50) as consumer):
            consumer.assign([TP])
            consumer.seek(TP, 100)
            assert await _poll_until(consumer, 1, timeout=0.5) == []
            assert await consumer.position(TP) == 15
            assert [int(r.body.topics[0].partitions[0].timestamp) for r in fake.of(2)] == [-1]
    run(go())


def test_fetch_offset_out_of_range_with_reset_none_raises():
    async def go():
        async with (FakeBroker({1: _log_fetch(5, 15)}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=50) as consumer):
            consumer.assign([TP])
            consumer.seek(TP, 100)
            with pytest.raises(KafkaError) as info:
                await _poll_until(consumer, 1, timeout=5)
            assert info.value.name == "OFFSET_OUT_OF_RANGE"
            assert fake.count(2) == 0
    run(go())


def test_fetch_unknown_topic_or_partition_refreshes_metadata_and_continues():
    async def go():
        handler = _log_fetch(0, 10, errors={1: ErrorCode.unknown_topic_or_partition,
                                            2: ErrorCode.not_leader_or_follower})
        async with (FakeBroker({1: handler}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, fetch_max_wait_ms=50) as consumer):
            consumer.assign([TP])
            consumer.seek(TP, 0)
            metadata_before = fake.count(3)
            got = await _poll_until(consumer, 10)
            assert [r.offset for r in got] == list(range(10))
            assert fake.count(3) >= metadata_before + 2  # one refresh per stale-metadata error
            # The failed fetches were repeated from the same offset.
            assert [r.body.topics[0].partitions[0].fetch_offset for r in fake.of(1)[:3]] == [0, 0, 0]
    run(go())


def test_persistent_fetch_partition_error_is_retried_with_backoff():
    async def go():
        handler = lambda f, r: fetch_reply(
            r, lambda t, p, o: {"error_code": ErrorCode.unknown_topic_or_partition, "high_watermark": -1})
        async with (FakeBroker({1: handler}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, fetch_max_wait_ms=500, retry_backoff_ms=100) as consumer):
            consumer.assign([TP])
            consumer.seek(TP, 0)
            started = time.monotonic()
            while time.monotonic() - started < 0.5:
                assert await consumer.poll(timeout_ms=100) == []
            # retry_backoff_ms=100 over 0.5 s: a handful of attempts, not hundreds.
            assert fake.count(1) <= 25, f"{fake.count(1)} fetches, {fake.count(3)} metadata requests in 0.5 s"
    run(go())


def test_fetch_non_retriable_partition_error_is_raised_by_poll():
    async def go():
        handler = _log_fetch(0, 10, errors={1: ErrorCode.topic_authorization_failed})
        async with (FakeBroker({1: handler}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, fetch_max_wait_ms=50) as consumer):
            consumer.assign([TP])
            consumer.seek(TP, 0)
            with pytest.raises(KafkaError) as info:
                await _poll_until(consumer, 1, timeout=5)
            assert info.value.name == "TOPIC_AUTHORIZATION_FAILED"
            # Raised once; the consumer then carries on from the same position.
            got = await _poll_until(consumer, 10)
            assert [r.offset for r in got] == list(range(10))
            assert fake.count(1) >= 2
    run(go())


def test_fetch_garbage_response_reconnects_and_continues():
    async def go():
        good = _log_fetch(0, 10)
        async with (FakeBroker({1: sequence(lambda f, r: garbage_frame(), good)}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, fetch_max_wait_ms=50, retry_backoff_ms=10) as consumer):
            consumer.assign([TP])
            consumer.seek(TP, 0)
            got = await _poll_until(consumer, 10)
            assert [r.offset for r in got] == list(range(10))
            assert fake.connections >= 2
    run(go())


# ====================================================================== error codes: offsets


def test_list_offsets_not_leader_is_retried():
    async def go():
        handler = _earliest_latest(3, 9, errors=[ErrorCode.not_leader_or_follower])
        async with (FakeBroker({2: handler}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, retry_backoff_ms=10) as consumer):
            assert await consumer.end_offsets([TP]) == {TP: 9}
            assert fake.count(2) == 2
            assert await consumer.beginning_offsets([TP]) == {TP: 3}
    run(go())


def test_list_offsets_authorization_error_is_raised():
    async def go():
        handler = _earliest_latest(3, 9, errors=[ErrorCode.topic_authorization_failed])
        async with (FakeBroker({2: handler}, topics={"t": 1}) as fake,
                    AsyncConsumer(fake.bootstrap, retry_backoff_ms=10) as consumer):
            with pytest.raises(KafkaError) as info:
                await consumer.end_offsets([TP])
            assert info.value.name == "TOPIC_AUTHORIZATION_FAILED"
            assert fake.count(2) == 1
    run(go())


def _group_consumer(fake) -> AsyncConsumer:
    return AsyncConsumer(fake.bootstrap, group_id="g", enable_auto_commit=False, retry_backoff_ms=10)


def test_offset_commit_group_authorization_failed_is_raised():
    async def go():
        handler = lambda f, r: offset_commit_reply(r, ErrorCode.group_authorization_failed)
        async with FakeBroker({8: handler}, topics={"t": 1}) as fake, _group_consumer(fake) as consumer:
            consumer.assign([TP])
            with pytest.raises(KafkaError) as info:
                await consumer.commit({TP: 5})
            assert info.value.name == "GROUP_AUTHORIZATION_FAILED" and not info.value.retriable
            assert fake.count(8) == 1
            (req,) = fake.of(8)
            assert req.body.group_id == "g" and req.body.generation_id_or_member_epoch == -1
            assert req.body.topics[0].partitions[0].committed_offset == 5
    run(go())


def test_offset_commit_not_coordinator_rediscovers_and_retries():
    async def go():
        handler = sequence(lambda f, r: offset_commit_reply(r, ErrorCode.not_coordinator),
                           lambda f, r: offset_commit_reply(r))
        async with FakeBroker({8: handler}, topics={"t": 1}) as fake, _group_consumer(fake) as consumer:
            consumer.assign([TP])
            await consumer.commit({TP: 5})
            assert fake.count(8) == 2
            assert fake.count(10) == 2  # the coordinator was looked up again
    run(go())


def test_find_coordinator_not_available_is_retried():
    async def go():
        handler = sequence(coordinator_error(ErrorCode.coordinator_not_available), find_coordinator)
        handlers = {10: handler, 8: lambda f, r: offset_commit_reply(r)}
        async with FakeBroker(handlers, topics={"t": 1}) as fake, _group_consumer(fake) as consumer:
            consumer.assign([TP])
            await consumer.commit({TP: 5})
            assert fake.count(10) == 2 and fake.count(8) == 1
            assert [r.api_version for r in fake.of(10)] == [6, 6]
    run(go())


def test_find_coordinator_fatal_error_is_raised():
    async def go():
        handler = coordinator_error(ErrorCode.group_authorization_failed)
        async with FakeBroker({10: handler}, topics={"t": 1}) as fake, _group_consumer(fake) as consumer:
            consumer.assign([TP])
            with pytest.raises(KafkaError) as info:
                await consumer.committed([TP])
            assert info.value.name == "GROUP_AUTHORIZATION_FAILED"
            assert fake.count(10) == 1
    run(go())


# ====================================================================== error codes: admin


@pytest.mark.parametrize("code", [ErrorCode.topic_already_exists, ErrorCode.invalid_replication_factor,
                                  ErrorCode.policy_violation])
def test_create_topics_error_is_raised(code):
    async def go():
        handler = lambda f, r: create_topics_reply(r, code, message="nope")
        async with FakeBroker({19: handler}) as fake, AsyncAdmin(fake.bootstrap) as admin:
            with pytest.raises(KafkaError) as info:
                await admin.create_topics([NewTopic("new-topic", 3, 1)])
            assert info.value.name == code.name.upper()
            assert "new-topic" in str(info.value) and "nope" in str(info.value)
            assert fake.count(19) == 1
    run(go())


def test_garbage_response_is_a_connection_error_and_the_next_request_reconnects():
    async def go():
        handler = sequence(lambda f, r: garbage_frame(), describe_cluster_reply)
        async with FakeBroker({60: handler}) as fake, AsyncAdmin(fake.bootstrap) as admin:
            _, conn = await admin.client.any_connection()
            with pytest.raises(KafkaConnectionError) as info:
                await admin.describe_cluster()
            assert info.value.retriable and "malformed" in str(info.value)
            assert conn.closed
            assert (await admin.describe_cluster())[0] == fake.cluster_id
            assert fake.connections == 2
    run(go())


def test_response_with_a_wrong_correlation_id_is_a_connection_error():
    def wrong_id(fake, req):
        req.correlation_id += 1000
        return encode_response(req, _describe_cluster(fake))

    async def go():
        async with (FakeBroker({60: sequence(wrong_id, describe_cluster_reply)}) as fake,
                    AsyncAdmin(fake.bootstrap) as admin):
            with pytest.raises(KafkaConnectionError, match="correlation id"):
                await admin.describe_cluster()
            assert (await admin.describe_cluster())[0] == fake.cluster_id
    run(go())


# ====================================================================== a slow coordinator


def test_close_during_an_in_flight_heartbeat_still_leaves_the_group():
    async def go():
        in_flight, release = asyncio.Event(), asyncio.Event()
        epochs: list[int] = []

        async def heartbeat(fake, req):
            epoch = req.body.member_epoch
            epochs.append(epoch)
            if epoch > 0 and len(epochs) >= 3:  # a regular heartbeat after join and acknowledgement
                in_flight.set()
                await release.wait()
            return {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": req.body.member_id,
                    "member_epoch": 1 if epoch >= 0 else epoch, "heartbeat_interval": 50,
                    "assignment": {"topic_partitions": [{"topic_id": fake.topic_id("t"), "partitions": [0]}]}
                    if epoch == 0 else None}

        handlers = {68: heartbeat, 1: _log_fetch(0, 0), 2: _earliest_latest(0, 0),
                    9: lambda f, r: {"throttle_time": 0, "error_code": 0, "topics": []}}
        async with FakeBroker(handlers, topics={"t": 1}) as fake:
            consumer = AsyncConsumer(fake.bootstrap, group_id="g", enable_auto_commit=False, fetch_max_wait_ms=50)
            await consumer.start()
            consumer.subscribe(["t"])
            deadline = time.monotonic() + 5
            while not consumer.assignment() and time.monotonic() < deadline:
                await consumer.poll(timeout_ms=50)
            assert consumer.assignment() == {TP}
            await asyncio.wait_for(in_flight.wait(), 5)
            closing = asyncio.ensure_future(consumer.close())
            await eventually(lambda: consumer.member.state.value == "leaving", what="the member to start leaving")
            release.set()
            await asyncio.wait_for(closing, 10)
            assert epochs[-1] == -1, f"heartbeat epochs sent: {epochs}"
    run(go())


# ====================================================================== a real broker behind a dropping proxy


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """A broker process that advertises the proxy's address, and the proxy in front of it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    broker = BrokerProcess(tmp_path_factory.mktemp("proxied") / "data", ["--advertise", f"127.0.0.1:{port}"]).start()
    proxy = DroppingProxy(("127.0.0.1", broker.port)).start(sock)
    try:
        yield broker, proxy, f"127.0.0.1:{port}"
    finally:
        proxy.close()
        if broker.alive():
            assert broker.stop() == 0


@pytest.fixture
def armed(proxied):
    broker, proxy, bootstrap = proxied
    proxy.disarm()
    yield broker, proxy, bootstrap
    proxy.disarm()
    _assert_broker_serves(broker)


def _assert_broker_serves(broker) -> None:
    """A fresh direct connection is answered: the dropped connections hurt nobody else."""
    assert broker.alive()
    c = RawClient(broker.bootstrap, timeout=10)
    try:
        resp = c.call(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False})
        assert resp.brokers
    finally:
        c.close()


def _create(broker, topic: str, partitions: int = 1) -> None:
    c = RawClient(broker.bootstrap, timeout=10)
    try:
        resp = c.call(19, 7, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                          "assignments": [], "configs": []}], "timeout": 5000, "validate_only": False})
        assert resp.topics[0].error_code == 0
    finally:
        c.close()


def _produce_direct(broker, topic: str, batches: list[bytes]) -> None:
    c = RawClient(broker.bootstrap, timeout=10)
    try:
        for i, b in enumerate(batches):
            resp = c.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": b}]}]}, correlation_id=i + 1)
            assert resp.responses[0].partition_responses[0].error_code == 0
    finally:
        c.close()


def _read_log(broker, topic: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of partition 0, read directly from the broker."""
    c = RawClient(broker.bootstrap, timeout=10)
    out: list[tuple[int, bytes]] = []
    try:
        while True:
            resp = c.call(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                  "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                      {"topic": topic, "partitions": [
                                          {"partition": 0, "current_leader_epoch": -1,
                                           "fetch_offset": out[-1][0] + 1 if out else 0, "last_fetched_epoch": -1,
                                           "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                  "forgotten_topics_data": [], "rack_id": ""})
            p = resp.responses[0].partitions[0]
            assert p.error_code == 0
            new = [(r.offset, r.value) for b in decode_batches(p.records or b"") for r in b.records
                   if r.offset >= (out[-1][0] + 1 if out else 0)]
            if not new:
                return out
            out += new
    finally:
        c.close()


@pytest.mark.interop
def test_producer_retries_requests_lost_with_the_connection_and_keeps_order(armed, topic_name):
    broker, proxy, bootstrap = armed
    _create(broker, topic_name)
    values = [b"%03d" % i for i in range(40)]

    async def go():
        # Small batches, so the partition sends several requests one after another.
        async with AsyncProducer(bootstrap, linger_ms=0, batch_size=64, retry_backoff_ms=20,
                                 request_timeout_ms=5000) as producer:
            await producer.send_and_wait(topic_name, b"warm-up", partition=0)
            proxy.drop(Api.PRODUCE, {1, 3})
            futs = [await producer.send(topic_name, v, partition=0) for v in values]
            return await asyncio.gather(*futs)

    metas = run(go())
    assert proxy.tripped(Api.PRODUCE) == 2
    assert proxy.seen(Api.PRODUCE) >= 5  # several batches, so later ones queued behind the lost ones
    offsets = [m.offset for m in metas]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    log = dict(_read_log(broker, topic_name))
    assert [log[m.offset] for m in metas] == values  # each future names its own record
    first_seen = []
    for _, v in sorted(log.items()):
        if v in values and v not in first_seen:
            first_seen.append(v)
    assert first_seen == values  # in order
    # The producer is idempotent by default (acks=all): the broker dropped the retried
    # copies of the batches whose responses were lost, so the log holds each record once.
    assert [v for _, v in sorted(log.items()) if v in values] == values


@pytest.mark.interop
def test_non_idempotent_producer_retries_lost_requests_at_least_once(armed, topic_name):
    broker, proxy, bootstrap = armed
    _create(broker, topic_name)
    values = [b"%03d" % i for i in range(40)]

    async def go():
        async with AsyncProducer(bootstrap, linger_ms=0, batch_size=64, retry_backoff_ms=20,
                                 request_timeout_ms=5000, enable_idempotence=False) as producer:
            await producer.send_and_wait(topic_name, b"warm-up", partition=0)
            proxy.drop(Api.PRODUCE, {1, 3})
            futs = [await producer.send(topic_name, v, partition=0) for v in values]
            return await asyncio.gather(*futs)

    metas = run(go())
    assert proxy.tripped(Api.PRODUCE) == 2
    log = dict(_read_log(broker, topic_name))
    assert [log[m.offset] for m in metas] == values
    stored = [v for _, v in sorted(log.items()) if v in values]
    # Without idempotence the lost batches were appended twice (the responses were lost,
    # not the requests): at least once, in order of first appearance.
    assert len(stored) > len(values)
    assert list(dict.fromkeys(stored)) == values


@pytest.mark.interop
def test_consumer_poll_recovers_from_lost_fetches_at_the_right_position(armed, topic_name):
    broker, proxy, bootstrap = armed
    _create(broker, topic_name)
    # Six batches of five; a produced batch has relative offsets (base offset 0).
    _produce_direct(broker, topic_name, [encode_batch([(j, TS, None, b"v%d" % (5 * i + j)) for j in range(5)])
                                         for i in range(6)])
    tp = TopicPartition(topic_name, 0)

    async def go():
        async with AsyncConsumer(bootstrap, fetch_max_wait_ms=100, max_partition_fetch_bytes=1,
                                 retry_backoff_ms=20) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            proxy.drop(Api.FETCH, {2, 4})
            got = await _poll_until(consumer, 30, timeout=20, max_records=3)
            return got, await consumer.position(tp)

    got, position = run(go())
    assert proxy.tripped(Api.FETCH) == 2
    assert proxy.seen(Api.FETCH) >= 8  # a batch per fetch: the drops hit the middle of the log
    assert [r.offset for r in got] == list(range(30))  # no gap, no duplicate
    assert [r.value for r in got] == [b"v%d" % i for i in range(30)]
    assert position == 30


@pytest.mark.interop
def test_admin_call_whose_connection_drops_raises_a_retriable_connection_error(armed, topic_name):
    _broker, proxy, bootstrap = armed

    async def go():
        async with AsyncAdmin(bootstrap, request_timeout_ms=5000) as admin, \
                AsyncAdmin(bootstrap, request_timeout_ms=5000) as bystander:
            _, other_conn = await bystander.client.any_connection()
            proxy.drop(Api.DESCRIBE_CLUSTER, {1})
            with pytest.raises(KafkaConnectionError) as info:
                await admin.describe_cluster()
            assert info.value.retriable
            assert proxy.tripped(Api.DESCRIBE_CLUSTER) == 1
            # The caller's retry reconnects and succeeds.
            cluster_id, _, brokers = await admin.describe_cluster()
            assert cluster_id and brokers[0].port == int(bootstrap.rsplit(":", 1)[1])
            # Another client's connection was not touched.
            assert not other_conn.closed
            assert (await bystander.describe_cluster())[0] == cluster_id
            _, still = await bystander.client.any_connection()
            assert still is other_conn

            # A lost CreateTopics took effect: the retry reports TOPIC_ALREADY_EXISTS.
            proxy.drop(Api.CREATE_TOPICS, {1})
            with pytest.raises(KafkaConnectionError):
                await admin.create_topics([NewTopic(topic_name, 1, 1)])
            assert topic_name in await admin.list_topics()
            with pytest.raises(KafkaError) as info:
                await admin.create_topics([NewTopic(topic_name, 1, 1)])
            assert info.value.name == "TOPIC_ALREADY_EXISTS"

    run(go())


@pytest.mark.interop
def test_admin_offset_calls_retry_lost_requests_transparently(armed, topic_name):
    broker, proxy, bootstrap = armed
    _create(broker, topic_name, partitions=2)
    tps = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
    group = f"{topic_name}-g"

    async def go():
        async with AsyncAdmin(bootstrap, request_timeout_ms=5000) as admin:
            proxy.drop(Api.OFFSET_COMMIT, {1})
            await admin.alter_group_offsets(group, {tps[0]: 0, tps[1]: 0})
            assert proxy.tripped(Api.OFFSET_COMMIT) == 1
            proxy.drop(Api.OFFSET_FETCH, {1})
            found = await admin.list_group_offsets(group)
            assert proxy.tripped(Api.OFFSET_FETCH) == 1
            assert {tp: o.offset for tp, o in found.items()} == {tps[0]: 0, tps[1]: 0}
            proxy.drop(Api.LIST_OFFSETS, {1})
            lag = await admin.group_lag(group)
            assert proxy.tripped(Api.LIST_OFFSETS) == 1
            assert lag == {tps[0]: (0, 0), tps[1]: (0, 0)}

    run(go())
