"""The transactional producer's asyncio driver: coordinators, requests, retries (KIP-98).

Theory of operation. `TransactionDriver` carries out what `transaction.TransactionCore`
decides. Every request goes through `_call`: find the coordinator (the transaction
coordinator by FindCoordinator key_type 1, cached until an answer or a broken connection
says it moved; the group coordinator through the client's own lookup for
TxnOffsetCommit), send, and hand the answer to the core, whose `Step` says: done, retry
after a backoff (20 ms for CONCURRENT_TRANSACTIONS on AddPartitionsToTxn, as Java and
librdkafka do), look the coordinator up again and retry, or fail with an error the core
has already recorded as abortable or fatal. A broken connection or a timeout is "look it
up again" (Java: a disconnect re-finds the coordinator). Calls the application makes
(init, send offsets, commit, abort) have a deadline (Java's max.block.ms); past it they
raise KafkaTimeoutError, which is retriable: the same call made again resumes.

Requests to the transaction coordinator go one at a time (`lock`), in the order they are
made, as Java's TransactionManager keeps one in flight: an EndTxn never overtakes the
AddPartitionsToTxn before it. Partitions are added by a background task (`kick`), which
the sender waits for: a batch goes out only once its partition is in the transaction.

The transaction APIs (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit) are
negotiated here, per coordinator connection, by one more ApiVersions (`ensure_versions`),
rather than in `versions.CLIENT_VERSIONS`, which every broker the client talks to is
expected to serve in full (tests/client/test_versions.py checks it against odradek's own).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from .cluster import BrokerInfo
from .errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, UnsupportedApiError
from .net import BrokerConnection, Client
from .transaction import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TRANSACTION_KEY_TYPE,
    TXN_OFFSET_COMMIT,
    Act,
    GroupMetadata,
    Input,
    Step,
    TransactionCore,
)
from .versions import Api

log = logging.getLogger(__name__)

# The pre-KIP-890 versions, which librdkafka speaks too (v4+ of AddPartitionsToTxn is
# broker-to-broker; EndTxn v5 and TxnOffsetCommit v4+ belong to transaction.version 2).
TXN_VERSIONS: dict[int, tuple[int, int]] = {
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
    TXN_OFFSET_COMMIT: (0, 3),
}
NAMES = {INIT_PRODUCER_ID: "InitProducerId", ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
         ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn", END_TXN: "EndTxn", TXN_OFFSET_COMMIT: "TxnOffsetCommit",
         FIND_COORDINATOR: "FindCoordinator"}


async def ensure_versions(conn: BrokerConnection) -> None:
    """Negotiate TXN_VERSIONS on `conn` (once per connection)."""
    if all(api in conn.versions for api in TXN_VERSIONS):
        return
    resp = await conn.request(Api.API_VERSIONS, {"client_software_name": "odradek", "client_software_version": "0.1.0"})
    if resp.error_code != ErrorCode.none:
        raise KafkaError(resp.error_code, "ApiVersions")
    spans = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}
    for api, (lo, hi) in TXN_VERSIONS.items():
        span = spans.get(api)
        if span is None:
            conn.versions[api] = UnsupportedApiError(NAMES[api], api, "not in the broker's ApiVersions")
        elif span[1] < lo or span[0] > hi:
            conn.versions[api] = UnsupportedApiError(
                NAMES[api], api, f"broker serves v{span[0]}-{span[1]}, client speaks v{lo}-{hi}")
        else:
            conn.versions[api] = min(hi, span[1])


class TransactionDriver:
    def __init__(self, client: Client, core: TransactionCore, *, on_change: Callable[[], None]) -> None:
        self.client = client
        self.core = core
        # The producer: wake the sender (partitions were added), or drop queued batches
        # (the transaction failed).
        self.on_change = on_change
        self.coordinator: Any = None  # connection key of the transaction coordinator
        self.lock = asyncio.Lock()
        self.adder: asyncio.Task | None = None

    # ------------------------------------------------------------ coordinator

    async def _find(self, deadline: float | None) -> Any:
        if self.coordinator is not None:
            return self.coordinator
        tid = self.core.transactional_id
        attempt = 0

        def body(version: int) -> dict:
            if version < 1:  # v0 has no key_type: it finds group coordinators only
                raise UnsupportedApiError("FindCoordinator", FIND_COORDINATOR,
                                          "v0 cannot find a transaction coordinator")
            return {"key": tid, "key_type": TRANSACTION_KEY_TYPE, "coordinator_keys": [tid]}

        while True:
            try:
                resp = await self.client.send_any(Api.FIND_COORDINATOR, body)
            except UnsupportedApiError:
                raise
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                step = Step(Act.RETRY)
            else:
                if getattr(resp, "coordinators", None):
                    c = resp.coordinators[0]
                    code, node, host, port = c.error_code, int(c.node_id), c.host, int(c.port)
                else:
                    code, node, host, port = resp.error_code, int(resp.node_id), resp.host, int(resp.port)
                step = self.core.on_find_coordinator(code, tid)
                if step.act is Act.DONE:
                    if node not in self.client.cluster.brokers:
                        self.client.cluster.brokers[node] = BrokerInfo(node, host, port, None)
                    # A connection of its own, as the consumer's group requests have: an
                    # EndTxn must not queue behind a Produce on the data connection.
                    self.coordinator = ("coordinator", node)
                    log.debug("transactional id %s: coordinator is node %d", tid, node)
                    return self.coordinator
            if step.error is not None:
                self.on_change()
                raise step.error
            attempt = await self._pause(step, attempt, deadline, "FindCoordinator")

    async def _pause(self, step: Step, attempt: int, deadline: float | None, what: str) -> int:
        pause = step.backoff_ms / 1000 if step.backoff_ms is not None else self.client.backoff_for(attempt)
        if deadline is not None and time.monotonic() + pause > deadline:
            raise KafkaTimeoutError(f"transactional id {self.core.transactional_id}: {what} not done in time")
        await asyncio.sleep(pause)
        return attempt + 1

    # ------------------------------------------------------------ requests

    async def _call(self, api: int, body: Callable[[int], dict], handle: Callable[[Any, int], Step], *,
                    deadline: float | None, group: str | None = None, counts: bool = False,
                    still: Callable[[], bool] | None = None) -> bool:
        """Send until the core says done (True) or `still()` says the request is moot (False).
        `counts`: the request may add to the transaction (AddPartitions/AddOffsetsToTxn)."""
        attempt = 0
        name = NAMES[api]
        while True:
            if still is not None and not still():
                return False
            try:
                if group is None:
                    node = await self._find(deadline)
                    async with self.lock:
                        step = await self._send(node, api, body, handle, counts)
                else:
                    node = await self.client.coordinator(group)
                    step = await self._send(node, api, body, handle, counts)
            except UnsupportedApiError as exc:
                # Java: a version mismatch on a transactional request is fatal.
                raise self.core.fail(Act.FATAL, ErrorCode.unsupported_version, str(exc)) from exc
            except KafkaError as exc:
                if not (exc.retriable or isinstance(exc, KafkaConnectionError)
                        or exc.code == ErrorCode.broker_not_available):
                    raise
                log.debug("%s to the %s coordinator: %s", name, "group" if group else "transaction", exc)
                step = Step(Act.REFIND)
            if step.act is Act.DONE:
                return True
            if step.error is not None:
                self.on_change()
                raise step.error
            if step.act is Act.REFIND:
                if group is None:
                    self.coordinator = None
                else:
                    self.client.forget_coordinator(group)
            attempt = await self._pause(step, attempt, deadline, name)

    async def _send(self, node: Any, api: int, body, handle, counts: bool) -> Step:
        conn = await self.client.connection(node)
        await ensure_versions(conn)
        version = conn.version(api)
        if counts:
            # Counted before the answer: a request whose answer is lost may have added to
            # the transaction, and then the transaction must be ended (librdkafka txn_req_cnt).
            self.core.added += 1
        resp = await conn.request(api, body(version))
        return handle(resp, version)

    # ------------------------------------------------------------ operations

    async def init(self, deadline: float | None) -> None:
        await self._call(INIT_PRODUCER_ID, self.core.init_body, self.core.on_init, deadline=deadline)

    def kick(self) -> None:
        """Make sure partitions waiting to join the transaction are being added."""
        if self.adder is None or self.adder.done():
            self.adder = asyncio.get_running_loop().create_task(self._add_partitions())

    async def _add_partitions(self) -> None:
        core = self.core
        try:
            while core.adding:
                # take_new() per attempt: partitions appended during a retry go along.
                done = await self._call(ADD_PARTITIONS_TO_TXN, lambda _v: core.add_partitions_body(core.take_new()),
                                        lambda resp, _v: core.on_add_partitions(resp), deadline=None, counts=True,
                                        still=lambda: core.adding)
                if done:
                    self.on_change()  # their batches may go now
        except KafkaError as exc:
            log.info("transactional id %s: adding partitions failed: %s", core.transactional_id, exc)
            self.on_change()

    async def send_offsets(self, offsets: dict, group: GroupMetadata, deadline: float | None) -> None:
        core = self.core
        # KIP-98: the group's __consumer_offsets partition joins the transaction first, so
        # that the coordinator writes a marker there too.
        await self._call(ADD_OFFSETS_TO_TXN, lambda _v: core.add_offsets_body(group.group_id),
                         lambda resp, _v: core.on_add_offsets(resp, group.group_id), deadline=deadline, counts=True)
        pending = dict(offsets)
        await self._call(TXN_OFFSET_COMMIT, lambda _v: core.txn_offset_commit_body(pending, group),
                         lambda resp, _v: core.on_txn_offset_commit(resp, pending, group.group_id),
                         deadline=deadline, group=group.group_id)

    async def end(self, commit: bool, deadline: float | None) -> None:
        """EndTxn (when anything was added), then READY, or a new epoch after an abort that
        needs one (KIP-360)."""
        core = self.core
        lost_mapping = core.error is not None and core.error.code == ErrorCode.invalid_producer_id_mapping
        if core.added > 0 and not (not commit and lost_mapping):
            # Java: with INVALID_PRODUCER_ID_MAPPING the coordinator has no transaction to
            # end; InitProducerId alone recovers.
            await self._call(END_TXN, lambda _v: core.end_body(commit), lambda resp, _v: core.on_end(resp, commit),
                             deadline=deadline)
        else:
            core.end_reset()
        if not commit and core.bump_required:
            core.fire(Input.BUMP)
            await self.init(deadline)
        else:
            core.fire(Input.COMPLETED)

    async def close(self) -> None:
        if self.adder is not None and not self.adder.done():
            self.adder.cancel()
            try:
                await self.adder
            except (asyncio.CancelledError, KafkaError):
                pass
