"""The classic group protocol over the wire: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and
OffsetCommit/DescribeGroups/ListGroups/DeleteGroups for classic groups.

Requests go through `Broker.handle_frame` of an in-process broker whose clock moves only
when a test says so (`Wire.advance`, which also runs the coordinator's due timers). A
JoinGroup or SyncGroup may be parked until a rebalance completes, so each request is its
own asyncio task, like a request on its own connection: several can be in flight at once,
and `settle` lets the event loop deliver what the coordinator answered. The unparseable
frame test uses a loopback server, since closing the connection is the point there.

Expected codes are Kafka's (GroupCoordinatorService / GroupMetadataManager /
ClassicGroup of the new group coordinator). Every bad request must also leave the broker
serving everyone else: `_still_serving` forms an unrelated group afterwards, and the
fixture checks that no handler failed (internal_errors).
"""

from __future__ import annotations

import asyncio
import struct
import threading
from dataclasses import dataclass

import pytest
from kio.schema.errors import ErrorCode as E

from odradek.broker.broker import Broker
from odradek.broker.errors import CloseConnection
from odradek.broker.server import BrokerServer
from odradek.config import BrokerConfig
from tests.broker.conftest import InProcess
from tests.wire import RawClient, parse_response, request_frame

JOIN, HEARTBEAT, LEAVE, SYNC = 11, 12, 13, 14
COMMIT, FETCH, DESCRIBE, LIST, DELETE = 8, 9, 15, 16, 42
PROTOCOLS = (("range", b"range-meta"), ("roundrobin", b"rr-meta"))


# --- harness -------------------------------------------------------------------------------


@dataclass
class Pending:
    task: asyncio.Task
    api: int
    version: int
    cid: int


class Wire:
    """An in-process broker with a hand-driven clock; requests run as concurrent tasks."""

    def __init__(self, data_dir, **extra: str) -> None:
        config = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1", **extra}
        self.proc = InProcess(data_dir, extra=config)
        self.broker = self.proc.broker
        self.loop = self.proc.loop
        self.now = 1_700_000_000_000
        self.broker.clock = lambda: self.now
        self._cid = 0

    def send(self, api: int, version: int, body: dict) -> Pending:
        self._cid += 1
        frame = request_frame(api, version, body, correlation_id=self._cid)
        return Pending(self.loop.create_task(self.broker.handle_frame(frame[4:])), api, version, self._cid)

    def settle(self) -> None:
        for _ in range(10):
            self.loop.run_until_complete(asyncio.sleep(0))

    def parked(self, p: Pending) -> bool:
        self.settle()
        return not p.task.done()

    def answer(self, p: Pending):
        self.settle()
        assert p.task.done(), f"api {p.api} v{p.version} is still parked"
        cid, body = parse_response(p.api, p.version, p.task.result())
        assert cid == p.cid
        return body

    def call(self, api: int, version: int, body: dict):
        return self.answer(self.send(api, version, body))

    def advance(self, ms: int) -> None:
        """Move the clock and run the coordinator's due timers (session, join and sync deadlines)."""
        self.now += ms
        self.broker.coordinator_tick(self.now)
        self.settle()

    def close(self) -> None:
        left = asyncio.all_tasks(self.loop)
        for t in left:
            t.cancel()
        if left:
            self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        self.proc.close()


@pytest.fixture
def make_wire(tmp_path):
    made: list[Wire] = []

    def make(**extra: str) -> Wire:
        w = Wire(tmp_path / f"data{len(made)}", **extra)
        made.append(w)
        return w

    yield make
    for w in made:
        errors = w.broker.internal_errors
        w.close()
        assert errors == 0, "a handler failed (see the log)"


@pytest.fixture
def w(make_wire):
    return make_wire()


# --- request bodies (a superset of every version's fields; `build` drops the rest) --------------


def join_body(group, member="", *, session=30_000, rebalance=30_000, ptype="consumer", protocols=PROTOCOLS,
              instance=None, reason=None):
    return {"group_id": group, "session_timeout": session, "rebalance_timeout": rebalance, "member_id": member,
            "group_instance_id": instance, "protocol_type": ptype,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": reason}


def sync_body(group, member, generation, *, assignments=(), instance=None, ptype=None, pname=None):
    return {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": instance,
            "protocol_type": ptype, "protocol_name": pname,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]}


def hb_body(group, member, generation, instance=None):
    return {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": instance}


def leave_body(group, *members):
    """`members`: (member id, instance id) pairs; v0-2 use the first member id."""
    return {"group_id": group, "member_id": members[0][0] if members else "",
            "members": [{"member_id": m, "group_instance_id": i, "reason": None} for m, i in members]}


def commit_body(group, member, generation, topic="ct", offset=5, instance=None):
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": instance, "retention_time": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def commit_code(w: Wire, version: int, body: dict):
    r = w.call(COMMIT, version, body)
    [topic] = r.topics
    [part] = topic.partitions
    return part.error_code


def fetched_offset(w: Wire, group: str, topic: str = "ct") -> int:
    r = w.call(FETCH, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                          "require_stable": False})
    assert r.error_code == E.none
    return r.topics[0].partitions[0].committed_offset


def describe(w: Wire, group: str, version: int = 5):
    [g] = w.call(DESCRIBE, version, {"groups": [group], "include_authorized_operations": False}).groups
    return g


def listed(w: Wire, **filters):
    body = {"states_filter": filters.get("states", []), "types_filter": filters.get("types", [])}
    return {g.group_id: g for g in w.call(LIST, 5, body).groups}


# --- forming groups --------------------------------------------------------------------------


class Group:
    """A classic group driven through full rebalances: `add` joins a member, has everyone
    rejoin and sync, and returns once the group is Stable again."""

    def __init__(self, w: Wire, group_id: str, version: int = 5) -> None:
        self.w, self.id, self.v = w, group_id, version
        self.sync_v = min(version, 5)  # SyncGroup's newest is v5
        self.specs: dict[str, dict] = {}  # member id -> join_body keywords
        self.generation = -1
        self.leader = ""
        self.protocol = ""

    def add(self, **spec) -> str:
        w = self.w
        first = w.send(JOIN, self.v, join_body(self.id, "", **spec))
        if not w.parked(first) and w.answer(first).error_code == E.member_id_required:
            mid = w.answer(first).member_id
            first = w.send(JOIN, self.v, join_body(self.id, mid, **spec))
        rejoins = [w.send(JOIN, self.v, join_body(self.id, mid, **s)) for mid, s in self.specs.items()]
        answers = [w.answer(p) for p in [first, *rejoins]]
        assert all(a.error_code == E.none for a in answers), answers
        new_id = answers[0].member_id
        self.specs[new_id] = spec
        self._sync(answers)
        return new_id

    def _sync(self, answers) -> None:
        w = self.w
        self.generation, self.leader = answers[0].generation_id, answers[0].leader
        self.protocol = answers[0].protocol_name
        assert all(a.generation_id == self.generation and a.leader == self.leader for a in answers)
        [leader_view] = [a for a in answers if a.member_id == self.leader]
        assert sorted(m.member_id for m in leader_view.members) == sorted(self.specs)
        followers = [w.send(SYNC, self.sync_v, sync_body(self.id, a.member_id, self.generation))
                     for a in answers if a.member_id != self.leader]
        assert all(w.parked(p) for p in followers), "followers wait for the leader's assignment"
        assignments = [(m.member_id, b"assigned:" + m.member_id.encode()) for m in leader_view.members]
        lead = w.send(SYNC, self.sync_v, sync_body(self.id, self.leader, self.generation, assignments=assignments))
        for p in [lead, *followers]:
            r = w.answer(p)
            assert r.error_code == E.none and r.assignment.startswith(b"assigned:"), r

    def heartbeat(self, member: str, instance=None):
        return self.w.call(HEARTBEAT, 4, hb_body(self.id, member, self.generation, instance)).error_code


def _still_serving(w: Wire, group_id: str = "bystander") -> None:
    """An unrelated group forms, syncs and heartbeats: the broker kept serving."""
    g = Group(w, group_id)
    mid = g.add()
    assert g.heartbeat(mid) == E.none


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 5, 9])
@pytest.mark.parametrize("ptype,protocols", [("", PROTOCOLS), ("consumer", ())], ids=["empty-type", "no-protocols"])
def test_new_group_needs_a_protocol_type_and_protocols(w, version, ptype, protocols):
    r = w.call(JOIN, version, join_body("g", ptype=ptype, protocols=protocols))
    assert r.error_code == E.inconsistent_group_protocol
    assert r.generation_id == -1 and r.member_id == "" and r.members == ()
    # The same group forms normally afterwards, and so does another.
    g = Group(w, "g", version)
    assert g.heartbeat(g.add()) == E.none
    _still_serving(w)


@pytest.mark.parametrize("version", [3, 5])
@pytest.mark.parametrize("over", [
    {"ptype": "connect"},                                      # another protocol type
    {"protocols": (("sticky", b"s"),)},                        # no protocol in common
    {"protocols": ()},                                         # no protocol at all
], ids=["other-type", "nothing-in-common", "no-protocols"])
def test_joiner_must_speak_the_groups_protocol(w, version, over):
    g = Group(w, "g", version)
    a = g.add()
    r = w.call(JOIN, version, join_body("g", **over))
    assert r.error_code == E.inconsistent_group_protocol and r.generation_id == -1
    # A known member changing to an incompatible protocol is refused the same way, and keeps its id.
    r = w.call(JOIN, version, join_body("g", a, **over))
    assert r.error_code == E.inconsistent_group_protocol and r.member_id == a
    # The group did not rebalance: the member's generation is still current.
    assert g.heartbeat(a) == E.none
    assert describe(w, "g").group_state == "Stable"
    _still_serving(w)


@pytest.mark.parametrize("version", [0, 1, 5, 9])
def test_session_timeout_bounds(make_wire, version):
    w = make_wire(**{"group.min.session.timeout.ms": "10000", "group.max.session.timeout.ms": "20000"})
    for session in (9_999, 20_001, 0, -1):
        r = w.call(JOIN, version, join_body("g", session=session, rebalance=15_000))
        assert r.error_code == E.invalid_session_timeout, session
    g = Group(w, "g", version)
    assert g.heartbeat(g.add(session=10_000)) == E.none          # both bounds are inclusive
    g2 = Group(w, "g2", version)
    a = g2.add(session=20_000)
    # A known member is held to the same bounds, with its member id echoed.
    r = w.call(JOIN, version, join_body("g2", a, session=20_001))
    assert r.error_code == E.invalid_session_timeout and r.member_id == a
    assert g2.heartbeat(a) == E.none


@pytest.mark.parametrize("version", [0, 4, 9])
def test_join_with_empty_group_id(w, version):
    r = w.call(JOIN, version, join_body(""))
    assert r.error_code == E.invalid_group_id
    assert listed(w) == {}
    _still_serving(w)


@pytest.mark.parametrize("api,version,body", [
    (SYNC, 5, sync_body("", "m", 1)),
    (HEARTBEAT, 4, hb_body("", "m", 1)),
    (LEAVE, 2, leave_body("", ("m", None))),
    (LEAVE, 5, leave_body("", ("m", None))),
], ids=["sync", "heartbeat", "leave-v2", "leave-v5"])
def test_other_classic_apis_with_empty_group_id(w, api, version, body):
    r = w.call(api, version, body)
    assert r.error_code == E.invalid_group_id


@pytest.mark.parametrize("version", [1, 5])
def test_join_with_unknown_member_id(w, version):
    # A member id for a group that does not exist: refused, and no group is created.
    r = w.call(JOIN, version, join_body("nowhere", "ghost"))
    assert r.error_code == E.unknown_member_id and r.member_id == "ghost"
    assert "nowhere" not in listed(w)
    # A member id the group does not know.
    g = Group(w, "g", version)
    a = g.add()
    r = w.call(JOIN, version, join_body("g", "ghost"))
    assert r.error_code == E.unknown_member_id and r.member_id == "ghost"
    assert g.heartbeat(a) == E.none and describe(w, "g").group_state == "Stable"


def test_sync_from_a_non_member(w):
    assert w.call(SYNC, 5, sync_body("nowhere", "ghost", 1)).error_code == E.unknown_member_id
    g = Group(w, "g")
    a = g.add()
    for v in (0, 3, 5):
        r = w.call(SYNC, v, sync_body("g", "ghost", g.generation, assignments=[("ghost", b"x")]))
        assert r.error_code == E.unknown_member_id and r.assignment == b""
    # The real member still gets its assignment.
    r = w.call(SYNC, 5, sync_body("g", a, g.generation))
    assert r.error_code == E.none and r.assignment == b"assigned:" + a.encode()


def test_heartbeat_and_sync_with_a_stale_generation(w):
    g = Group(w, "g")
    a = g.add()
    b = g.add()
    assert g.generation == 2
    for gen in (1, 3, -1):
        assert w.call(HEARTBEAT, 4, hb_body("g", b, gen)).error_code == E.illegal_generation
        assert w.call(SYNC, 5, sync_body("g", b, gen)).error_code == E.illegal_generation
        assert w.call(HEARTBEAT, 0, hb_body("g", a, gen)).error_code == E.illegal_generation
    assert g.heartbeat(a) == E.none and g.heartbeat(b) == E.none


def test_heartbeat_and_sync_during_a_rebalance(w):
    g = Group(w, "g")
    a = g.add()
    # A new member arrives: the group waits for the leader to rejoin.
    first = w.call(JOIN, 5, join_body("g"))
    newcomer = w.send(JOIN, 5, join_body("g", first.member_id))
    assert w.parked(newcomer)
    assert describe(w, "g").group_state == "PreparingRebalance"
    for v in (0, 4):
        assert w.call(HEARTBEAT, v, hb_body("g", a, g.generation)).error_code == E.rebalance_in_progress
    assert w.call(SYNC, 5, sync_body("g", a, g.generation)).error_code == E.rebalance_in_progress
    # The leader rejoins: both get generation 2.
    rejoin = w.send(JOIN, 5, join_body("g", a))
    assert [w.answer(p).generation_id for p in (rejoin, newcomer)] == [2, 2]
    assert w.call(HEARTBEAT, 4, hb_body("g", a, 2)).error_code == E.none  # CompletingRebalance: fine


def test_static_member_with_a_stale_member_id_is_fenced(w):
    w.broker.create_topic("ct", 1, {})
    g = Group(w, "g")
    old = g.add(instance="i-1")
    assert old.startswith("i-1-")
    # The instance restarts: same group.instance.id, no member id. No rebalance (KIP-345).
    r = w.call(JOIN, 5, join_body("g", instance="i-1"))
    assert r.error_code == E.none and r.generation_id == g.generation
    new = r.member_id
    assert new != old and new.startswith("i-1-")
    assert describe(w, "g").group_state == "Stable"
    assert w.call(HEARTBEAT, 4, hb_body("g", old, g.generation, "i-1")).error_code == E.fenced_instance_id
    assert w.call(SYNC, 5, sync_body("g", old, g.generation, instance="i-1")).error_code == E.fenced_instance_id
    r = w.call(JOIN, 5, join_body("g", old, instance="i-1"))
    assert r.error_code == E.fenced_instance_id and r.member_id == old
    assert commit_code(w, 8, commit_body("g", old, g.generation, instance="i-1")) == E.fenced_instance_id
    # The new incarnation is the member, with the old one's assignment.
    assert w.call(HEARTBEAT, 4, hb_body("g", new, g.generation, "i-1")).error_code == E.none
    r = w.call(SYNC, 5, sync_body("g", new, g.generation, instance="i-1"))
    assert r.error_code == E.none and r.assignment == b"assigned:" + old.encode()
    assert [m.member_id for m in describe(w, "g").members] == [new]


def test_unknown_instance_id_is_unknown_member(w):
    """Kafka's ClassicGroup.validateMember: an instance id the group does not know is UNKNOWN_MEMBER_ID,
    even with the member id of a (dynamic) member."""
    g = Group(w, "g")
    a = g.add()
    assert w.call(HEARTBEAT, 4, hb_body("g", a, g.generation, "never-joined")).error_code == E.unknown_member_id
    r = w.call(SYNC, 5, sync_body("g", a, g.generation, instance="never-joined"))
    assert r.error_code == E.unknown_member_id
    r = w.call(LEAVE, 5, leave_body("g", (a, "never-joined")))
    assert r.error_code == E.none and [m.error_code for m in r.members] == [E.unknown_member_id]
    assert g.heartbeat(a) == E.none and describe(w, "g").group_state == "Stable"


@pytest.mark.parametrize("api", ["join", "commit"])
def test_unknown_instance_id_is_unknown_member_on_join_and_commit(w, api):
    w.broker.create_topic("ct", 1, {})
    g = Group(w, "g")
    a = g.add()
    if api == "join":
        r = w.call(JOIN, 5, join_body("g", a, instance="never-joined"))
        assert r.error_code == E.unknown_member_id and r.member_id == a
    else:
        assert commit_code(w, 8, commit_body("g", a, g.generation, instance="never-joined")) == E.unknown_member_id
    assert describe(w, "g").group_state == "Stable"


@pytest.mark.parametrize("version", [3, 5])
def test_group_max_size(make_wire, version):
    w = make_wire(**{"group.max.size": "2"})
    g = Group(w, "g", version)
    a = g.add()
    b = g.add()
    r = w.call(JOIN, version, join_body("g"))
    assert r.error_code == E.group_max_size_reached and r.member_id == "" and r.generation_id == -1
    # The full group was not disturbed; its members still rejoin; other groups still form.
    assert g.heartbeat(a) == E.none and g.heartbeat(b) == E.none
    assert describe(w, "g").group_state == "Stable"
    follower = b if g.leader == a else a
    r = w.call(JOIN, version, join_body("g", follower))  # an unchanged follower: current generation at once
    assert r.error_code == E.none and r.generation_id == g.generation
    _still_serving(w)


def test_sync_v5_checks_protocol_type_and_name(w):
    g = Group(w, "g")
    a = g.add()
    assert g.protocol == "range"
    for ptype, pname in (("consumer", "roundrobin"), ("connect", "range"), (None, "sticky"), ("connect", None)):
        r = w.call(SYNC, 5, sync_body("g", a, g.generation, ptype=ptype, pname=pname))
        assert r.error_code == E.inconsistent_group_protocol, (ptype, pname)
        assert r.assignment == b""
    for ptype, pname in (("consumer", "range"), (None, None)):
        r = w.call(SYNC, 5, sync_body("g", a, g.generation, ptype=ptype, pname=pname))
        assert r.error_code == E.none and r.protocol_type == "consumer" and r.protocol_name == "range"
        assert r.assignment == b"assigned:" + a.encode()


# --- an unparseable frame, over real connections --------------------------------------------------


@pytest.fixture
def loopback(tmp_path):
    """A BrokerServer on 127.0.0.1 in a background thread (real connections, real clock)."""
    config = BrokerConfig(data_dir=tmp_path / "lb", listen_port=0, extra={
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"})
    broker = Broker(config)
    server = BrokerServer(broker)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"127.0.0.1:{server.port}", broker
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def _truncated_join() -> bytes:
    payload = request_frame(JOIN, 5, join_body("g"), correlation_id=9)[4:]
    cut = payload[:-7]  # the protocols array promises more than the frame holds
    return struct.pack(">i", len(cut)) + cut


def _null_protocols_join() -> bytes:
    # JoinGroup v5 by hand: header, then group_id, session, rebalance, member_id,
    # group_instance_id (null), protocol_type, and protocols with length -1 (null, not nullable).
    def s(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    payload = (struct.pack(">hhi", JOIN, 5, 9) + s("test") + s("g") + struct.pack(">ii", 30_000, 30_000)
               + s("") + struct.pack(">h", -1) + s("consumer") + struct.pack(">i", -1))
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("garbage", [_truncated_join, _null_protocols_join], ids=["truncated", "null-protocols"])
def test_unparseable_join_frame_closes_only_its_connection(loopback, garbage):
    bootstrap, broker = loopback
    leader = RawClient(bootstrap)
    r = leader.call(JOIN, 3, join_body("g"))
    a = r.member_id
    assert r.error_code == E.none
    assert leader.call(SYNC, 3, sync_body("g", a, r.generation_id, assignments=[(a, b"x")])).error_code == E.none
    # A second member joins and is parked on its connection until the leader rejoins.
    joiner = RawClient(bootstrap)
    joiner.send(request_frame(JOIN, 3, join_body("g"), correlation_id=5))
    bad = RawClient(bootstrap)
    bad.send(garbage())
    assert bad.is_closed()
    # Everyone else is fine: the leader rejoins, and both get the new generation.
    r = leader.call(JOIN, 3, join_body("g", a))
    assert r.error_code == E.none and r.generation_id == 2
    cid, parked = parse_response(JOIN, 3, joiner.recv_frame())
    assert cid == 5 and parked.error_code == E.none and parked.generation_id == 2
    other = RawClient(bootstrap)
    assert other.call(JOIN, 3, join_body("other")).error_code == E.none
    assert broker.internal_errors == 0
    for c in (leader, joiner, bad, other):
        c.close()


def test_unparseable_join_frame_in_process_raises_close_connection(w):
    with pytest.raises(CloseConnection):
        w.loop.run_until_complete(w.broker.handle_frame(_truncated_join()[4:]))
    _still_serving(w)


# --- version behaviour -------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(4, 10))
def test_v4_plus_dynamic_member_must_come_back_with_its_member_id(w, version):
    r = w.call(JOIN, version, join_body("g"))
    assert r.error_code == E.member_id_required
    mid = r.member_id
    assert mid.startswith("test-") and len(mid) > len("test-")     # client id, then a unique suffix
    assert r.generation_id == -1 and r.members == ()
    r = w.call(JOIN, version, join_body("g", mid))
    assert r.error_code == E.none and r.member_id == mid and r.generation_id == 1 and r.leader == mid
    assert [(m.member_id, m.metadata) for m in r.members] == [(mid, b"range-meta")]
    assert r.protocol_name == "range"
    # Another join without an id gets a different one.
    assert w.call(JOIN, version, join_body("g")).member_id not in ("", mid)


@pytest.mark.parametrize("version", range(4))
def test_v0_to_v3_join_directly(w, version):
    r = w.call(JOIN, version, join_body("g"))
    assert r.error_code == E.none and r.member_id.startswith("test-") and r.generation_id == 1
    assert r.leader == r.member_id and r.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in r.members] == [(r.member_id, b"range-meta")]


@pytest.mark.parametrize("version", range(5, 10))
def test_static_member_gets_no_member_id_required(w, version):
    r = w.call(JOIN, version, join_body("g", instance="inst-a"))
    assert r.error_code == E.none and r.member_id.startswith("inst-a-") and r.generation_id == 1
    [m] = r.members
    assert m.member_id == r.member_id and m.group_instance_id == "inst-a"


@pytest.mark.parametrize("version,session,rebalance,deadline", [
    (0, 30_000, None, 30_000),     # v0 has no rebalance timeout: the session timeout is both
    (1, 30_000, 5_000, 5_000),     # v1+: the rebalance timeout of its own
])
def test_v0_uses_the_session_timeout_as_rebalance_timeout(w, version, session, rebalance, deadline):
    """The join phase waits for the group's largest rebalance timeout for a member that does not rejoin."""
    r = w.call(JOIN, version, join_body("g", session=session, rebalance=rebalance or 1))
    a, gen = r.member_id, r.generation_id
    assert w.call(SYNC, 0, sync_body("g", a, gen, assignments=[(a, b"x")])).error_code == E.none
    # A newcomer with a tiny rebalance timeout: only the first member's timeout keeps the phase open.
    b = w.send(JOIN, 1, join_body("g", session=60_000, rebalance=1))
    assert w.parked(b)
    # `a` stays alive (heartbeats are answered REBALANCE_IN_PROGRESS) but never rejoins.
    w.advance(deadline // 2)
    assert w.call(HEARTBEAT, 0, hb_body("g", a, gen)).error_code == E.rebalance_in_progress
    w.advance(deadline // 2 - 1)
    assert w.parked(b), "the join phase ended before the rebalance timeout"
    w.advance(2)
    r = w.answer(b)
    assert r.error_code == E.none and r.generation_id == gen + 1 and [m.member_id for m in r.members] == [r.member_id]
    assert w.call(HEARTBEAT, 0, hb_body("g", a, gen)).error_code == E.unknown_member_id


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_v0_to_v2_single_member(w, version):
    g = Group(w, "g")
    a = g.add()
    b = g.add()
    r = w.call(LEAVE, version, leave_body("g", ("ghost", None)))
    assert r.error_code == E.unknown_member_id
    assert w.call(LEAVE, version, leave_body("nowhere", (a, None))).error_code == E.unknown_member_id
    assert w.call(LEAVE, version, leave_body("g", (b, None))).error_code == E.none
    assert w.call(HEARTBEAT, 4, hb_body("g", b, g.generation)).error_code == E.unknown_member_id
    # The remaining member is told to rejoin, and gets a generation of its own.
    assert g.heartbeat(a) == E.rebalance_in_progress
    r = w.call(JOIN, 5, join_body("g", a))
    assert r.error_code == E.none and r.generation_id == g.generation + 1
    assert w.call(LEAVE, version, leave_body("g", (a, None))).error_code == E.none
    assert describe(w, "g").group_state == "Empty"


@pytest.mark.parametrize("version", [3, 4, 5])
def test_leave_v3_plus_batch_with_per_member_errors(w, version):
    g = Group(w, "g")
    dyn = g.add()
    static = g.add(instance="i-s")
    other_static = g.add(instance="i-t")
    r = w.call(LEAVE, version, leave_body(
        "g",
        (dyn, None),                  # a dynamic member by id
        ("", "i-s"),                  # admin removal of a static member: instance id, no member id
        ("", "i-unknown"),            # an instance id the group does not know
        ("ghost", None),              # a member id the group does not know
        ("wrong-id", "i-t"),          # a known instance with another member id: fenced
    ))
    assert r.error_code == E.none
    rows = [(m.member_id, m.group_instance_id, m.error_code) for m in r.members]
    assert rows == [
        (dyn, None, E.none),
        ("", "i-s", E.none),
        ("", "i-unknown", E.unknown_member_id),
        ("ghost", None, E.unknown_member_id),
        ("wrong-id", "i-t", E.fenced_instance_id),
    ]
    assert [m.member_id for m in describe(w, "g").members] == [other_static]
    assert w.call(HEARTBEAT, 4, hb_body("g", static, g.generation, "i-s")).error_code == E.unknown_member_id
    # The last one leaves with its own member id and instance id: the group is empty.
    r = w.call(LEAVE, version, leave_body("g", (other_static, "i-t")))
    assert r.error_code == E.none and [m.error_code for m in r.members] == [E.none]
    assert describe(w, "g").group_state == "Empty"


def test_leave_v3_plus_unknown_group_is_per_member(w):
    """Kafka (GroupCoordinatorService.leaveGroup): a group that does not exist makes every named
    member UNKNOWN_MEMBER_ID; the request itself succeeds."""
    r = w.call(LEAVE, 5, leave_body("nowhere", ("m1", None), ("", "i-1")))
    assert r.error_code == E.none
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in r.members] == [
        ("m1", None, E.unknown_member_id), ("", "i-1", E.unknown_member_id)]


@pytest.mark.parametrize("version", range(10))
def test_join_response_protocol_fields_by_version(w, version):
    r = w.call(JOIN, version, join_body("g", instance="i" if version >= 5 else None))
    if r.error_code == E.member_id_required:
        r = w.call(JOIN, version, join_body("g", r.member_id))
    assert r.error_code == E.none and r.protocol_name == "range"
    if version >= 7:
        assert r.protocol_type == "consumer"
        err = w.call(JOIN, version, join_body("g", "ghost"))
        assert err.error_code == E.unknown_member_id
        assert err.protocol_type is None and err.protocol_name is None
    else:
        assert not hasattr(r, "protocol_type")
        err = w.call(JOIN, version, join_body("g", "ghost"))
        assert err.error_code == E.unknown_member_id and err.protocol_name == ""


@pytest.mark.parametrize("version", range(6))
def test_sync_response_protocol_fields_by_version(w, version):
    g = Group(w, "g")
    a = g.add()
    r = w.call(SYNC, version, sync_body("g", a, g.generation))
    assert r.error_code == E.none and r.assignment == b"assigned:" + a.encode()
    if version >= 5:
        assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
    else:
        assert not hasattr(r, "protocol_name")


# --- OffsetCommit from classic members -----------------------------------------------------------


@pytest.mark.parametrize("version", [2, 5, 8, 9])
def test_offset_commit_generation_checks(w, version):
    w.broker.create_topic("ct", 1, {})
    r = w.call(JOIN, 3, join_body("g"))
    a, gen = r.member_id, r.generation_id
    # CompletingRebalance: the member knows its generation but not its assignment yet.
    assert commit_code(w, version, commit_body("g", a, gen)) == E.rebalance_in_progress
    assert w.call(SYNC, 3, sync_body("g", a, gen, assignments=[(a, b"x")])).error_code == E.none
    assert commit_code(w, version, commit_body("g", a, gen, offset=7)) == E.none
    assert commit_code(w, version, commit_body("g", a, gen + 1)) == E.illegal_generation
    assert commit_code(w, version, commit_body("g", a, gen - 1)) == E.illegal_generation
    assert commit_code(w, version, commit_body("g", "ghost", gen)) == E.unknown_member_id
    # Without membership (generation -1, no member id) into a group with members.
    assert commit_code(w, version, commit_body("g", "", -1, offset=99)) == E.unknown_member_id
    assert fetched_offset(w, "g") == 7
    # Once the group is empty, a membership-free commit is accepted.
    assert w.call(LEAVE, 1, leave_body("g", (a, None))).error_code == E.none
    assert describe(w, "g").group_state == "Empty"
    assert commit_code(w, version, commit_body("g", "", -1, offset=11)) == E.none
    assert fetched_offset(w, "g") == 11
    # ...but the departed member's generation no longer counts.
    assert commit_code(w, version, commit_body("g", a, gen)) == E.unknown_member_id


def test_offset_commit_during_preparing_rebalance(w):
    w.broker.create_topic("ct", 1, {})
    g = Group(w, "g")
    a = g.add()
    newcomer = w.send(JOIN, 3, join_body("g"))
    assert w.parked(newcomer)
    # Kafka lets a current member commit while the group prepares a rebalance (it still owns its partitions).
    assert commit_code(w, 8, commit_body("g", a, g.generation)) == E.none
    assert commit_code(w, 8, commit_body("g", "", -1)) == E.unknown_member_id
    w.send(JOIN, 5, join_body("g", a))
    assert w.answer(newcomer).error_code == E.none


# --- DescribeGroups, ListGroups, DeleteGroups ----------------------------------------------------


@pytest.mark.parametrize("version", [0, 4, 5, 6])
def test_describe_stable_classic_group(w, version):
    g = Group(w, "g")
    a = g.add(protocols=(("range", b"meta-a"), ("roundrobin", b"rr-a")))
    b = g.add(protocols=(("roundrobin", b"rr-b"), ("range", b"meta-b")), instance="i-b")
    d = describe(w, "g", version)
    assert d.error_code == E.none and d.group_id == "g" and d.group_state == "Stable"
    assert d.protocol_type == "consumer" and d.protocol_data == g.protocol
    chosen = {"range": {a: b"meta-a", b: b"meta-b"}, "roundrobin": {a: b"rr-a", b: b"rr-b"}}[g.protocol]
    members = {m.member_id: m for m in d.members}
    assert set(members) == {a, b}
    for mid, m in members.items():
        assert m.member_metadata == chosen[mid]
        assert m.member_assignment == b"assigned:" + mid.encode()
        assert m.client_id == "test"
    if version >= 4:
        assert members[b].group_instance_id == "i-b" and members[a].group_instance_id is None


def test_describe_rebalancing_group_hides_protocol_and_assignments(w):
    r = w.call(JOIN, 3, join_body("g"))
    d = describe(w, "g")
    assert d.group_state == "CompletingRebalance" and d.protocol_type == "consumer" and d.protocol_data == ""
    [m] = d.members
    assert m.member_id == r.member_id and m.member_metadata == b"" and m.member_assignment == b""


def test_list_groups_shows_classic_groups(w):
    g = Group(w, "g")
    g.add()
    w.call(JOIN, 3, join_body("h"))  # h: CompletingRebalance
    rows = listed(w)
    assert (rows["g"].group_type, rows["g"].group_state, rows["g"].protocol_type) == ("classic", "Stable", "consumer")
    assert (rows["h"].group_type, rows["h"].group_state) == ("classic", "CompletingRebalance")
    assert set(listed(w, types=["classic"])) == {"g", "h"}
    assert set(listed(w, types=["Classic"], states=["stable"])) == {"g"}
    assert listed(w, types=["consumer"]) == {}
    v0 = {x.group_id: x.protocol_type for x in w.call(LIST, 0, {}).groups}
    assert v0 == {"g": "consumer", "h": "consumer"}


def test_delete_groups_of_classic_groups(w):
    w.broker.create_topic("ct", 1, {})
    g = Group(w, "g")
    a = g.add()
    assert commit_code(w, 8, commit_body("g", a, g.generation)) == E.none
    res = w.call(DELETE, 2, {"groups_names": ["g", "nowhere"]}).results
    assert [(x.group_id, x.error_code) for x in res] == [("g", E.non_empty_group), ("nowhere", E.group_id_not_found)]
    assert g.heartbeat(a) == E.none
    assert w.call(LEAVE, 3, leave_body("g", (a, None))).error_code == E.none
    assert describe(w, "g").group_state == "Empty"
    res = w.call(DELETE, 2, {"groups_names": ["g"]}).results
    assert [(x.group_id, x.error_code) for x in res] == [("g", E.none)]
    assert "g" not in listed(w)
    assert describe(w, "g", 5).group_state == "Dead"
    assert describe(w, "g", 6).error_code == E.group_id_not_found
    assert fetched_offset(w, "g") == -1
    # The id is free again.
    g2 = Group(w, "g")
    assert g2.heartbeat(g2.add()) == E.none and g2.generation == 1


# --- timeouts (the clock only moves when told) ---------------------------------------------------


def test_pending_member_holds_the_join_phase_until_it_expires(w):
    """KIP-394: a member told MEMBER_ID_REQUIRED is pending; the join phase waits for it, and it is
    forgotten after its session timeout if it never comes back."""
    g = Group(w, "g")
    a = g.add()
    pending = w.call(JOIN, 5, join_body("g", session=10_000))
    assert pending.error_code == E.member_id_required
    assert describe(w, "g").group_state == "Stable"          # no rebalance for a pending member
    rejoin = w.send(JOIN, 5, join_body("g", a))             # the leader asks for a rebalance
    assert w.parked(rejoin)
    w.advance(9_999)
    assert w.parked(rejoin)
    w.advance(2)
    r = w.answer(rejoin)
    assert r.error_code == E.none and r.generation_id == g.generation + 1 and [m.member_id for m in r.members] == [a]
    r = w.call(JOIN, 5, join_body("g", pending.member_id))
    assert r.error_code == E.unknown_member_id


def test_session_expiry_removes_a_silent_member(w):
    g = Group(w, "g")
    a = g.add(session=10_000)
    b = g.add(session=20_000)
    w.advance(10_001)
    assert describe(w, "g").group_state == "PreparingRebalance"
    assert g.heartbeat(b) == E.rebalance_in_progress
    assert g.heartbeat(a) == E.unknown_member_id
    r = w.call(JOIN, 5, join_body("g", b, session=20_000))
    assert r.error_code == E.none and r.generation_id == g.generation + 1 and [m.member_id for m in r.members] == [b]
