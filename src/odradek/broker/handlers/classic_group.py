"""JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4, LeaveGroup v0-5: the classic group protocol.

These translate between kio entities and the coordinator's plain request values. A
JoinGroup or SyncGroup may be answered long after it arrives (when the join phase
completes or the leader's assignment comes): the coordinator answers through a reply
callback, which resolves a future this handler awaits. The connection is muted
meanwhile, as Kafka mutes it.
"""

from __future__ import annotations

import asyncio
import logging

from ...coordinator import dispatch
from ...coordinator.classic.join import JoinRequest
from ...coordinator.classic.leave import LeaveIdentity
from ...coordinator.classic.rebalance import error_join, sync_error
from ...coordinator.classic.sync import ClassicHeartbeat, SyncRequest
from ...coordinator.errors import error_code_for
from ...protocol.errors import GROUP_AUTHORIZATION_FAILED
from ...security.acl import Operation
from ..coordinated import answer
from ..registry import api
from .consumer_group import _ms

log = logging.getLogger(__name__)


def _run_parked(broker, group_id: str, op, on_error, queued_at: float | None = None) -> asyncio.Future:
    """Run `op(shard, reply, now)` and return the future its reply resolves. If the
    operation fails (the shard is not served here, its write failed) and nothing answered
    the request, `on_error(code)` does."""
    fut = asyncio.get_running_loop().create_future()

    def reply(response: dict) -> None:
        if not fut.done():
            fut.set_result(response)

    deferred = broker.coordinator.runtime.submit(group_id, lambda shard, now: op(shard, reply, now), broker.clock(),
                                                 queued_at)
    deferred.add_done_callback(lambda d: d.error is None or reply(on_error(error_code_for(d.error))))
    return fut


def join_request(request) -> JoinRequest:
    """The coordinator's view of a JoinGroup (shared with the simulator, which parks it itself)."""
    b = request.body
    v = request.api_version
    session = _ms(b.session_timeout)
    return JoinRequest(
        group_id=b.group_id, member_id=b.member_id, session_timeout_ms=session,
        # v0 has no rebalance timeout: the session timeout served as both.
        rebalance_timeout_ms=_ms(b.rebalance_timeout) if v >= 1 else session,
        protocol_type=b.protocol_type, protocols=tuple((p.name, p.metadata) for p in b.protocols),
        instance_id=request.field("group_instance_id"), client_id=request.client_id or "",
        client_host=request.client_host, reason=request.field("reason"), version=v,
    )


def join_response(request, response: dict) -> dict:
    if request.api_version < 7:  # protocol_name became nullable in v7
        response = {**response, "protocol_name": response["protocol_name"] or ""}
    return {"throttle_time": 0, **response}


def sync_request(request) -> SyncRequest:
    b = request.body
    return SyncRequest(
        group_id=b.group_id, member_id=b.member_id, generation=b.generation_id,
        instance_id=request.field("group_instance_id"), protocol_type=request.field("protocol_type"),
        protocol_name=request.field("protocol_name"),
        assignments=tuple((a.member_id, a.assignment) for a in b.assignments),
    )


def _may_read(broker, request, group_id: str) -> bool:
    # Kafka's KafkaApis: READ on the group for JoinGroup, SyncGroup, Heartbeat and LeaveGroup.
    return broker.access(request).group(Operation.READ, group_id)


@api(11, "JoinGroup", 0, 9)
async def join_group(broker, request):
    req = join_request(request)
    if not _may_read(broker, request, req.group_id):
        return join_response(request, error_join(GROUP_AUTHORIZATION_FAILED, req.member_id))
    if req.reason:  # KIP-800: clients say why they (re)join; Kafka logs it with the rebalance
        log.info("group %s: member %r joins (reason: %s)", req.group_id, req.member_id, req.reason)
    response = await _run_parked(broker, req.group_id,
                                 lambda shard, reply, now: dispatch.join_group(shard, req, reply, now),
                                 lambda code: error_join(code, req.member_id), request.started)
    return join_response(request, response)


@api(14, "SyncGroup", 0, 5)
async def sync_group(broker, request):
    req = sync_request(request)
    if not _may_read(broker, request, req.group_id):
        return {"throttle_time": 0, **sync_error(GROUP_AUTHORIZATION_FAILED)}
    response = await _run_parked(broker, req.group_id,
                                 lambda shard, reply, now: dispatch.sync_group(shard, req, reply, now),
                                 sync_error, request.started)
    return {"throttle_time": 0, **response}


@api(12, "Heartbeat", 0, 4)
def heartbeat_api(broker, request):
    b = request.body
    if not _may_read(broker, request, b.group_id):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED}
    req = ClassicHeartbeat(b.group_id, b.member_id, b.generation_id, request.field("group_instance_id"))
    deferred = broker.coordinator.runtime.submit(b.group_id, lambda shard, now: dispatch.heartbeat(shard, req, now),
                                                 broker.clock(), request.started)
    return answer(deferred, lambda code: {"throttle_time": 0, "error_code": code},
                  lambda response: {"throttle_time": 0, **response})


@api(13, "LeaveGroup", 0, 5)
def leave_group(broker, request):
    b = request.body
    v = request.api_version
    if not _may_read(broker, request, b.group_id):
        return {"throttle_time": 0, "error_code": GROUP_AUTHORIZATION_FAILED, "members": []}
    if v < 3:
        identities = (LeaveIdentity(b.member_id),)
    else:
        identities = tuple(LeaveIdentity(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in b.members)
    for ident in identities:
        if ident.reason:
            log.info("group %s: member %r (instance %r) leaves (reason: %s)", b.group_id, ident.member_id,
                     ident.instance_id, ident.reason)
    deferred = broker.coordinator.runtime.submit(
        b.group_id, lambda shard, now: dispatch.leave_group(shard, b.group_id, identities, now), broker.clock(),
        request.started)

    def shape(response: dict) -> dict:
        if v < 3:
            # One member: its own error is the answer.
            code = response["error_code"] or (response["members"][0]["error_code"] if response["members"] else 0)
            return {"throttle_time": 0, "error_code": code}
        return {"throttle_time": 0, **response}

    return answer(deferred, lambda code: {"throttle_time": 0, "error_code": code, "members": []}, shape)
