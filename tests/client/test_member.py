"""The group member interface (`odradek.client.member`): both cores offer it, structurally.

`GroupMember` is what the drivers (the asyncio consumer, the simulator) and the reconciler
use; the test drives each core through a `GroupMember`-typed function that touches every
member of the protocol (checked by recording the attributes it read), and compares each
method's parameters with the protocol's."""

from __future__ import annotations

import inspect
import uuid

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.assignors import RangeAssignor
from odradek.client.classic import ClassicGroupMember
from odradek.client.errors import KafkaError
from odradek.client.member import AssigningMember, GroupMember, LosesPartitions
from odradek.client.membership import ConsumerGroupMember
from odradek.protocol.messages import build, response_class

CORES = {
    "consumer": lambda: ConsumerGroupMember("g", member_id="m1", instance_id="i1"),
    "classic": lambda: ClassicGroupMember("g", assignors=[RangeAssignor()], instance_id="i1"),
}


def _protocol_members(proto) -> set[str]:
    names = set(getattr(proto, "__annotations__", {}))
    for klass in proto.__mro__:
        if klass in (object,) or klass.__name__ in ("Protocol", "Generic"):
            continue
        names |= {n for n in vars(klass) if not n.startswith("_")}
    return names


class Recorder:
    """Passes every attribute through to the core and notes its name."""

    def __init__(self, core) -> None:
        object.__setattr__(self, "_core", core)
        object.__setattr__(self, "seen", set())

    def __getattr__(self, name):
        self.seen.add(name)
        return getattr(self._core, name)

    def __setattr__(self, name, value) -> None:
        self.seen.add(name)
        setattr(self._core, name, value)


def drive(m: GroupMember) -> None:
    """Everything a driver does with a member, through the protocol only."""
    assert isinstance(m.member_id, str) and m.state is not None and m.error is None
    assert m.owned == frozenset() and not m.active and not m.fenced and not m.in_flight
    seen = m.epoch_changes
    m.subscribe(["a"], now=0)
    assert m.active
    m.next_heartbeat_ms = 0
    req = m.next_request(0)
    assert req is not None
    api, body = req
    assert isinstance(body, dict) and m.in_flight
    m.on_failure(api, _timeout(), 0)
    assert not m.in_flight
    deadline = m.next_deadline()
    assert deadline is None or deadline >= 0
    req = m.next_request(10_000)
    if req is not None:
        m.on_response(req[0], _error_response(req[0]), 10_000)
    assert m.epoch_changes >= seen
    assert m.to_revoke() == frozenset() and m.to_assign() == frozenset()
    m.assigned(frozenset(), now=0)
    m.revoked(frozenset(), now=0)
    m.lost(now=0)
    generation, member_id, instance_id = m.commit_identity()
    assert isinstance(generation, int) and isinstance(member_id, str) and instance_id in ("i1", None)
    m.error = None
    m.leave(now=0)


def _timeout() -> KafkaError:
    return KafkaError(ErrorCode.request_timed_out, "test")


def _error_response(api: int):
    if api == 68:
        return build(response_class(68, 1), {
            "throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "error_message": None,
            "member_id": None, "member_epoch": 0, "heartbeat_interval": 0, "assignment": None})
    if api == 11:
        return build(response_class(11, 9), {
            "throttle_time": 0, "error_code": ErrorCode.coordinator_not_available, "generation_id": -1,
            "protocol_type": None, "protocol_name": None, "leader": "", "skip_assignment": False,
            "member_id": "", "members": []})
    raise AssertionError(f"unexpected api {api}")


@pytest.mark.parametrize("kind", sorted(CORES))
def test_both_cores_are_group_members(kind):
    assert isinstance(CORES[kind](), GroupMember)


@pytest.mark.parametrize("kind", sorted(CORES))
def test_a_driver_can_use_every_member_of_the_protocol(kind):
    recorder = Recorder(CORES[kind]())
    drive(recorder)
    assert _protocol_members(GroupMember) <= recorder.seen, _protocol_members(GroupMember) - recorder.seen


@pytest.mark.parametrize("kind", sorted(CORES))
def test_methods_take_the_protocols_parameters(kind):
    core = CORES[kind]()
    for name in _protocol_members(GroupMember):
        spec = inspect.getattr_static(GroupMember, name, None)
        if not inspect.isfunction(spec):
            continue  # attributes and properties: presence is checked above
        want = inspect.signature(spec).parameters
        have = inspect.signature(getattr(type(core), name)).parameters
        for pname, p in want.items():
            assert pname in have, f"{kind}.{name} lacks parameter {pname}"
            assert have[pname].kind == p.kind, f"{kind}.{name}({pname}): {have[pname].kind} != {p.kind}"
            if p.default is not inspect.Parameter.empty:
                assert have[pname].default is not inspect.Parameter.empty, f"{kind}.{name}({pname}) needs a default"
        extra = [q for q in have if q not in want and have[q].default is inspect.Parameter.empty]
        assert not extra, f"{kind}.{name} requires parameters the protocol does not pass: {extra}"


def test_the_classic_capabilities_are_only_the_classic_cores():
    """`to_lose` and client-side assignment are capabilities, tested for by protocol, not by class."""
    classic, kip848 = CORES["classic"](), CORES["consumer"]()
    assert isinstance(classic, LosesPartitions) and isinstance(classic, AssigningMember)
    assert not isinstance(kip848, LosesPartitions) and not isinstance(kip848, AssigningMember)
    assert classic.to_lose() == frozenset() and classic.needs_metadata is None and not classic.is_leader
    classic.set_metadata({"a": 1}, 0)
    assert classic.group_topics == frozenset() and classic.topics is None


def test_something_else_is_not_a_group_member():
    assert not isinstance(object(), GroupMember)
    assert not isinstance(uuid.uuid4(), GroupMember)
