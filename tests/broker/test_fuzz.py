"""Property tests: random and mutated frames thrown at the framing + dispatch layer.

Whatever arrives, the outcome is one of: a response frame, no response (acks=0), or a
CloseConnection / RemoteProtocolError for that connection. Never another exception, never
a logged traceback, and the broker answers a well-formed request afterwards.

The hypothesis tests below throw a few hand-written seeds; the seeded-random tests at the
end cover every (api key, version) the broker advertises, 2,000 cases per api key by
default and 6,000 with `-m slow` (`ODRADEK_FUZZ_SEED=<n>` replays a run).
"""

import asyncio
import dataclasses
import os
import random
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.broker.broker import Broker
from odradek.broker.errors import CloseConnection
from odradek.broker.registry import APIS, supported_versions
from odradek.config import BrokerConfig
from odradek.protocol.framing import NEED_DATA, FrameReader, RemoteProtocolError
from odradek.records.codec import Record, encode_batch
from tests.broker.fuzz_harness import Fuzzer
from tests.wire import parse_response, request_frame

ZERO = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    broker = Broker(BrokerConfig(data_dir=tmp_path_factory.mktemp("fuzz") / "data", listen_port=0))
    broker.create_topic("fz", 2, {})
    loop = asyncio.new_event_loop()
    yield broker, loop
    broker.close()
    loop.close()


def _seeds():
    batch = encode_batch([Record(i, 1_700_000_000_000 + i, b"k", b"v" * i) for i in range(4)], compression=0)
    zbatch = encode_batch([Record(i, 1_700_000_000_000, b"k", b"v") for i in range(4)], compression=4)
    fetch = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
             "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
             "topics": [{"topic": "fz", "topic_id": ZERO, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                         "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    return [
        request_frame(18, 3, {"client_software_name": "f", "client_software_version": "1"}),
        request_frame(18, 0, {}),
        request_frame(3, 12, {"topics": [{"name": "fz", "topic_id": None}], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": False}),
        request_frame(3, 1, {"topics": None}),
        request_frame(0, 9, {"transactional_id": None, "acks": 1, "timeout": 100,
                             "topic_data": [{"name": "fz", "partition_data": [{"index": 0, "records": batch}]}]}),
        request_frame(0, 3, {"transactional_id": None, "acks": -1, "timeout": 100,
                             "topic_data": [{"name": "fz", "partition_data": [{"index": 1, "records": zbatch}]}]}),
        request_frame(1, 12, fetch),
        request_frame(1, 4, fetch),
        request_frame(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "fz", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -3}]}]}),
        request_frame(32, 4, {"resources": [{"resource_type": 2, "resource_name": "fz", "configuration_keys": None}],
                              "include_synonyms": True, "include_documentation": False}),
        request_frame(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1}),
    ]


SEEDS = _seeds()


def _dispatch(broker, loop, payload: bytes):
    try:
        return loop.run_until_complete(asyncio.wait_for(broker.handle_frame(payload), 0.5))
    except CloseConnection:
        return "closed"
    except asyncio.TimeoutError:
        return "parked"  # a long-poll fetch waiting for data is a legitimate outcome


def _still_serves(broker, loop):
    assert broker.internal_errors == 0, "a handler raised: see the log for the traceback"
    frame = request_frame(3, 12, {"topics": [{"name": "fz", "topic_id": None}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False}, correlation_id=9)
    _, md = parse_response(3, 12, loop.run_until_complete(broker.handle_frame(frame[4:])))
    assert md.topics[0].name == "fz" and len(md.topics[0].partitions) == 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SEEDS), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
       st.one_of(st.none(), st.integers(4, 400)))
def test_mutated_requests(fuzz_broker, seed, flips, cut):
    broker, loop = fuzz_broker
    payload = bytearray(seed[4:])
    for pos, value in flips:
        payload[pos % len(payload)] = value
    if cut is not None:
        payload = payload[: cut % len(payload)]
    result = _dispatch(broker, loop, bytes(payload))
    assert result is None or result in ("closed", "parked") or isinstance(result, bytes)
    _still_serves(broker, loop)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_random_frames(fuzz_broker, payload):
    broker, loop = fuzz_broker
    result = _dispatch(broker, loop, payload)
    assert result is None or result in ("closed", "parked") or isinstance(result, bytes)
    _still_serves(broker, loop)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=2000), st.integers(1, 64))
def test_random_streams_through_framing(fuzz_broker, stream, chunk):
    broker, loop = fuzz_broker
    reader = FrameReader(1024)
    try:
        for i in range(0, len(stream), chunk):
            reader.receive_data(stream[i : i + chunk])
            while (frame := reader.next_frame()) is not NEED_DATA:
                if _dispatch(broker, loop, frame) == "closed":
                    raise RemoteProtocolError("closed")
    except RemoteProtocolError:
        pass
    _still_serves(broker, loop)



# --- every API and version the broker advertises, mutated thousands of times ------------
#
# Seeds come from kio's schemas (fuzz_frames.py): for each (api key, version) a body with
# every field filled, one with every nullable field null, one with nullable lists filled
# but nullable strings null (plus a steady-state heartbeat and an acks=0 produce), naming
# live groups the harness forms with well-formed requests. Each case mutates a seed at
# the field level (a null where the schema allows or forbids one, a length prefix that
# lies, an int at the edge of its range, a string that is no valid name, an array emptied
# or repeated), at the byte level (flips, cuts, inserted and deleted bytes), or both, and
# dispatches it through one in-process broker that lives for the whole module, so group
# state built by one API's cases meets the next API's. fuzz_harness.py says what fails.

FUZZ_SEED = int(os.environ.get("ODRADEK_FUZZ_SEED", "848"))
CASES, CASES_LONG = 2_000, 6_000  # per API key, over all its versions
SUPPORTED = supported_versions()
API_KEYS = sorted(SUPPORTED)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-apis")


@pytest.fixture(scope="module")
def fuzzer_box(fuzz_dir):
    box = [Fuzzer(fuzz_dir / "data-0")]
    yield box
    box[0].close()


@pytest.fixture
def fuzzer(fuzzer_box, fuzz_dir):
    """The module's fuzzer, replaced by a fresh one when an earlier test broke it."""
    if not fuzzer_box[0].healthy():
        fuzzer_box[0].close()
        fuzzer_box[0] = Fuzzer(fuzz_dir / f"data-{time.monotonic_ns()}")
    f = fuzzer_box[0]
    f.broker.internal_errors = 0  # one API's failure must not fail the next one's test
    f.tracebacks.records.clear()
    return f


def _fuzz(fuzzer, api_key: int, cases: int, seed: int) -> None:
    started = time.perf_counter()
    outcomes = fuzzer.run(api_key, cases, seed)
    print(f"api {api_key}: {cases} cases in {time.perf_counter() - started:.1f}s, {dict(outcomes)}")
    # Enough mutations must still parse, or the fuzzer only exercises the parser (requests
    # with an empty body, ListGroups v0-2 say, leave only byte-level damage to the header).
    assert outcomes["response"] + outcomes["parked"] + outcomes["no response"] > cases // 6, outcomes


@pytest.mark.parametrize("api_key", API_KEYS)
def test_every_api_survives_mutated_requests(fuzzer, api_key):
    _fuzz(fuzzer, api_key, CASES, FUZZ_SEED)


@pytest.mark.slow
@pytest.mark.parametrize("api_key", API_KEYS)
def test_every_api_survives_mutated_requests_long(fuzzer, api_key):
    seed = int(os.environ.get("ODRADEK_FUZZ_SEED", random.randrange(1 << 30)))
    print(f"ODRADEK_FUZZ_SEED={seed}")
    _fuzz(fuzzer, api_key, CASES_LONG, seed)


def test_the_fuzzer_reports_a_logged_traceback_with_its_case(tmp_path, monkeypatch):
    """The harness's own check: a handler that raises on some inputs fails the run, and the
    failure names the seed, the case and the frame."""
    api = APIS[60]

    def planted(broker, request):
        if request.field("endpoint_type", 1) != 1:
            raise ValueError("planted bug")
        return api.fn(broker, request)

    monkeypatch.setitem(APIS, 60, dataclasses.replace(api, fn=planted))
    fuzzer = Fuzzer(tmp_path / "data")
    try:
        with pytest.raises(pytest.fail.Exception,
                           match=r"(?s)traceback logged.*ODRADEK_FUZZ_SEED=1 api 60 case \d+: v[12].*frame 003c.*planted bug"):
            fuzzer.run(60, 500, seed=1)
    finally:
        fuzzer.close()
