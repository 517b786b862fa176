"""The transactional producer (`AsyncProducer` with a transactional_id, driven by
`odradek.client.transacting`) against a scripted fake broker: the requests of a transaction
in order, retries, coordinator moves, fatal and abortable errors, KIP-360 epoch bumps.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import AsyncConsumer, AsyncProducer, TopicPartition
from odradek.client.errors import (
    IllegalStateError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
)
from odradek.client.transaction import GroupMetadata, State
from odradek.records.codec import decode_batches

from .fakes import ALL_APIS, FakeBroker, produce_reply, sequence

TXN_APIS = {**ALL_APIS, 22: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3)}
PID = 1000


def arun(coro, timeout: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def init_reply(code: ErrorCode = ErrorCode.none, epoch: int = 0):
    def handler(fake, req):
        return {"throttle_time": 0, "error_code": code, "producer_id": PID if not code else -1,
                "producer_epoch": epoch if not code else -1}
    return handler


def bumping_init(fake, req):
    """InitProducerId as a KIP-360 coordinator answers: the epoch after the one sent."""
    sent = int(req.body.producer_epoch) if int(req.body.producer_id) >= 0 else -1
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": PID, "producer_epoch": sent + 1}


def add_partitions_reply(code: ErrorCode = ErrorCode.none):
    def handler(fake, req):
        return {"throttle_time": 0, "results_by_topic_v3_and_below": [
            {"name": t.name, "results_by_partition": [{"partition_index": p, "partition_error_code": code}
                                                      for p in t.partitions]}
            for t in req.body.v3_and_below_topics]}
    return handler


def error_reply(code: ErrorCode = ErrorCode.none):
    return lambda fake, req: {"throttle_time": 0, "error_code": code}


def txn_offset_commit_reply(code: ErrorCode = ErrorCode.none):
    def handler(fake, req):
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]} for t in req.body.topics]}
    return handler


def txn_broker(**handlers) -> FakeBroker:
    h = {22: init_reply(), 24: add_partitions_reply(), 25: error_reply(), 26: error_reply(),
         28: txn_offset_commit_reply(), 0: lambda f, r: produce_reply(r, base_offset=0)}
    h.update({int(k.lstrip("_")): v for k, v in handlers.items()})
    return FakeBroker(h, versions=TXN_APIS, topics={"t": 2})


def producer(fake: FakeBroker, **kw) -> AsyncProducer:
    kw.setdefault("linger_ms", 0)
    return AsyncProducer(fake.bootstrap, transactional_id="tx", transaction_timeout_ms=12345, **kw)


def calls(fake: FakeBroker) -> list[int]:
    """The api keys the client sent, without ApiVersions and Metadata."""
    return [r.api_key for r in fake.requests if r.api_key not in (3, 18)]


def produced_batches(fake: FakeBroker) -> list[tuple[TopicPartition, object]]:
    out = []
    for r in fake.of(0):
        for t in r.body.topic_data:
            for p in t.partition_data:
                for b in decode_batches(p.records):
                    out.append((TopicPartition(t.name, int(p.index)), b))
    return out


# ---------------------------------------------------------------- the whole sequence


def test_request_sequence_of_a_committed_transaction():
    async def main():
        async with txn_broker() as fake:
            p = await producer(fake).start()
            try:
                await p.init_transactions()
                p.begin_transaction()
                futs = [await p.send("t", b"v%d" % i, partition=i % 2) for i in range(6)]
                await asyncio.gather(*futs)
                await p.send_offsets_to_transaction({TopicPartition("in", 0): 42},
                                                    GroupMetadata("g", 5, "member-1", "static-1"))
                await p.commit_transaction()
                assert p.txn.state is State.READY
            finally:
                await p.close()
            seq = calls(fake)
            order = [10, 22, 24, 0, 25, 10, 28, 26]
            firsts = [seq.index(k, seq.index(order[i - 1]) if i else 0) for i, k in enumerate(order)]
            assert firsts == sorted(firsts), seq
            finds = fake.of(10)
            assert (int(finds[0].body.key_type), list(finds[0].body.coordinator_keys)) == (1, ["tx"])
            assert (int(finds[1].body.key_type), list(finds[1].body.coordinator_keys)) == (0, ["g"])
            init = fake.of(22)[0].body
            assert init.transactional_id == "tx" and init.transaction_timeout.total_seconds() * 1000 == 12345
            # Each partition joins the transaction once, before its first batch.
            added = [(t.name, int(x)) for r in fake.of(24) for t in r.body.v3_and_below_topics for x in t.partitions]
            assert sorted(added) == [("t", 0), ("t", 1)]
            assert seq.index(24) < seq.index(0)
            for r in fake.of(0):
                assert r.body.transactional_id == "tx"
            batches = produced_batches(fake)
            assert sum(len(b.records) for _, b in batches) == 6
            for _tp, b in batches:
                assert b.is_transactional and not b.is_control
                assert (b.header.producer_id, b.header.producer_epoch) == (PID, 0)
            assert fake.of(25)[0].body.group_id == "g"
            commit = fake.of(28)[0].body
            assert (commit.group_id, int(commit.generation_id), commit.member_id, commit.group_instance_id) == \
                ("g", 5, "member-1", "static-1")
            assert (int(commit.producer_id), int(commit.producer_epoch)) == (PID, 0)
            assert [(t.name, int(q.partition_index), int(q.committed_offset)) for t in commit.topics
                    for q in t.partitions] == [("in", 0, 42)]
            end = fake.of(26)[0].body
            assert end.committed is True and int(end.producer_id) == PID
    arun(main())


def test_second_transaction_adds_its_partitions_again_and_sequences_continue():
    async def main():
        async with txn_broker() as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                for _ in range(2):
                    p.begin_transaction()
                    await asyncio.gather(*[await p.send("t", b"x", partition=0) for _ in range(3)])
                    await p.commit_transaction()
            assert len(fake.of(24)) == 2 and len(fake.of(26)) == 2
            assert [b.header.base_sequence for _, b in produced_batches(fake)][-1] > 0
    arun(main())


def test_empty_transaction_ends_without_end_txn():
    # Java and librdkafka: nothing was added, so the coordinator knows no transaction.
    async def main():
        async with txn_broker() as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.commit_transaction()
                p.begin_transaction()
                await p.abort_transaction()
                assert p.txn.state is State.READY
            assert fake.count(26) == 0
    arun(main())


def test_context_manager_commits_or_aborts():
    async def main():
        async with txn_broker() as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                async with p.transaction():
                    await p.send("t", b"a", partition=0)
                with pytest.raises(RuntimeError):
                    async with p.transaction():
                        await (await p.send("t", b"b", partition=0))
                        raise RuntimeError("boom")
            assert [bool(r.body.committed) for r in fake.of(26)] == [True, False]
    arun(main())


# ---------------------------------------------------------------- retries


def test_concurrent_transactions_on_add_partitions_is_retried_after_a_short_backoff():
    seen: list[float] = []

    def stamp(fake, req):
        seen.append(time.monotonic())
        return add_partitions_reply(ErrorCode.concurrent_transactions)(fake, req)

    async def main():
        async with txn_broker(_24=sequence(stamp, stamp, add_partitions_reply())) as fake:
            # A retry backoff of 2 s: only the 20 ms CONCURRENT_TRANSACTIONS backoff can be this fast.
            async with producer(fake, retry_backoff_ms=2000) as p:
                await p.init_transactions()
                p.begin_transaction()
                fut = await p.send("t", b"v", partition=1)
                await fut
                await p.commit_transaction()
            assert fake.count(24) == 3
            assert seen[1] - seen[0] < 1.0
    arun(main())


@pytest.mark.parametrize("code", [ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress])
def test_retriable_init_and_end_txn_answers_are_retried(code):
    async def main():
        async with txn_broker(_22=sequence(init_reply(code), init_reply()),
                              _26=sequence(error_reply(code), error_reply())) as fake:
            async with producer(fake, retry_backoff_ms=10) as p:
                await p.init_transactions()
                p.begin_transaction()
                await (await p.send("t", b"v", partition=0))
                await p.commit_transaction()
                assert p.txn.state is State.READY
            assert fake.count(22) == 2 and fake.count(26) == 2
    arun(main())


def test_not_coordinator_finds_the_coordinator_again():
    async def main():
        async with txn_broker(_22=sequence(init_reply(ErrorCode.not_coordinator), init_reply()),
                              _26=sequence(error_reply(ErrorCode.coordinator_not_available), error_reply())) as fake:
            async with producer(fake, retry_backoff_ms=10) as p:
                await p.init_transactions()
                p.begin_transaction()
                await (await p.send("t", b"v", partition=0))
                await p.commit_transaction()
            txn_finds = [r for r in fake.of(10) if int(r.body.key_type) == 1]
            assert len(txn_finds) == 3  # at first, after NOT_COORDINATOR, after COORDINATOR_NOT_AVAILABLE
    arun(main())


def test_txn_offset_commit_retries_the_partitions_that_failed():
    partial = sequence(
        lambda f, r: {"throttle_time": 0, "topics": [{"name": "in", "partitions": [
            {"partition_index": 0, "error_code": ErrorCode.none},
            {"partition_index": 1, "error_code": ErrorCode.coordinator_load_in_progress}]}]},
        txn_offset_commit_reply())

    async def main():
        async with txn_broker(_28=partial) as fake:
            async with producer(fake, retry_backoff_ms=10) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send_offsets_to_transaction({("in", 0): 1, ("in", 1): 2}, "g")
                await p.commit_transaction()
            second = fake.of(28)[1].body
            assert [(t.name, int(q.partition_index)) for t in second.topics for q in t.partitions] == [("in", 1)]
            assert int(second.generation_id) == -1 and second.member_id == ""  # a bare group id: no fencing
    arun(main())


# ---------------------------------------------------------------- fatal errors


@pytest.mark.parametrize("code", [ErrorCode.producer_fenced, ErrorCode.transactional_id_authorization_failed])
def test_fatal_init_producer_id(code):
    async def main():
        async with txn_broker(_22=init_reply(code)) as fake:
            async with producer(fake) as p:
                with pytest.raises(TransactionFatalError) as info:
                    await p.init_transactions()
                assert info.value.code == code and p.txn.state is State.FATAL_ERROR
                with pytest.raises(TransactionFatalError):
                    p.begin_transaction()
                with pytest.raises(TransactionFatalError):
                    await p.send("t", b"v")
            assert fake.count(22) == 1  # never retried
    arun(main())


def test_producer_fenced_on_produce_is_fatal():
    async def main():
        async with txn_broker(_0=lambda f, r: produce_reply(r, ErrorCode.producer_fenced)) as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                p.begin_transaction()
                fut = await p.send("t", b"v", partition=0)
                with pytest.raises(Exception):  # noqa: B017 - the record's own error
                    await fut
                with pytest.raises(TransactionFatalError) as info:
                    await p.commit_transaction()
                assert info.value.code == ErrorCode.producer_fenced
                with pytest.raises(TransactionFatalError):
                    await p.abort_transaction()
            assert fake.count(26) == 0
    arun(main())


def test_invalid_producer_epoch_on_end_txn_is_fatal():
    async def main():
        async with txn_broker(_26=error_reply(ErrorCode.invalid_producer_epoch)) as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                p.begin_transaction()
                await (await p.send("t", b"v", partition=0))
                with pytest.raises(TransactionFatalError):
                    await p.commit_transaction()
                assert p.txn.state is State.FATAL_ERROR
    arun(main())


# ---------------------------------------------------------------- abortable errors and abort


def test_topic_authorization_failure_makes_the_transaction_abortable():
    async def main():
        handler = sequence(add_partitions_reply(ErrorCode.topic_authorization_failed), add_partitions_reply())
        async with txn_broker(_24=handler) as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                p.begin_transaction()
                fut = await p.send("t", b"v", partition=0)
                with pytest.raises(TransactionAbortableError):
                    await fut  # queued records fail with the transaction
                with pytest.raises(TransactionAbortableError) as info:
                    await p.commit_transaction()
                assert info.value.code == ErrorCode.topic_authorization_failed
                with pytest.raises(TransactionAbortableError):
                    await p.send("t", b"w", partition=0)
                await p.abort_transaction()
                assert p.txn.state is State.READY
                p.begin_transaction()  # and the producer goes on
                await (await p.send("t", b"x", partition=0))
                await p.commit_transaction()
            assert fake.count(0) == 1  # nothing of the failed transaction was produced
            # The refused AddPartitionsToTxn added nothing: the abort needs no EndTxn.
            assert [bool(r.body.committed) for r in fake.of(26)] == [True]
    arun(main())


def test_failed_batch_makes_commit_raise_abortable():
    async def main():
        async with txn_broker(_0=lambda f, r: produce_reply(r, ErrorCode.invalid_record)) as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                p.begin_transaction()
                await p.send("t", b"v", partition=0)
                with pytest.raises(TransactionAbortableError):
                    await p.commit_transaction()
                assert p.txn.state is State.ABORTABLE_ERROR
                await p.abort_transaction()
            assert [bool(r.body.committed) for r in fake.of(26)] == [False]
    arun(main())


def test_abort_drops_queued_records_and_sends_end_txn_abort():
    async def main():
        async with txn_broker() as fake:
            async with producer(fake, linger_ms=60_000) as p:
                await p.init_transactions()
                p.begin_transaction()
                futs = [await p.send("t", b"v%d" % i, partition=0) for i in range(3)]
                while not p.txn.may_send(TopicPartition("t", 0)):
                    await asyncio.sleep(0.01)  # added to the transaction; the records linger
                await p.abort_transaction()
                for f in futs:
                    with pytest.raises(TransactionAbortedError):
                        await f
            assert fake.count(0) == 0
            assert [bool(r.body.committed) for r in fake.of(26)] == [False]
    arun(main())


def test_unknown_producer_id_abort_bumps_the_epoch_kip_360():
    async def main():
        async with txn_broker(_22=bumping_init, _25=sequence(error_reply(ErrorCode.unknown_producer_id),
                                                             error_reply())) as fake:
            async with producer(fake) as p:
                await p.init_transactions()
                p.begin_transaction()
                await (await p.send("t", b"v", partition=0))
                with pytest.raises(TransactionAbortableError):
                    await p.send_offsets_to_transaction({("in", 0): 1}, "g")
                await p.abort_transaction()
                assert p.txn.state is State.READY and p.txn.producer_epoch == 1
                p.begin_transaction()
                await (await p.send("t", b"w", partition=0))
                await p.commit_transaction()
            inits = fake.of(22)
            assert [(int(r.body.producer_id), int(r.body.producer_epoch)) for r in inits] == [(-1, -1), (PID, 0)]
            (_, first), (_, second) = produced_batches(fake)
            assert (first.header.producer_epoch, first.header.base_sequence) == (0, 0)
            assert (second.header.producer_epoch, second.header.base_sequence) == (1, 0)  # sequences start again
    arun(main())


# ---------------------------------------------------------------- misuse


def test_sends_outside_a_transaction_are_refused():
    async def main():
        async with txn_broker() as fake:
            async with producer(fake) as p:
                with pytest.raises(IllegalStateError):
                    await p.send("t", b"v")  # before init_transactions
                await p.init_transactions()
                with pytest.raises(IllegalStateError):
                    await p.send("t", b"v")  # before begin_transaction
                with pytest.raises(IllegalStateError):
                    await p.send_offsets_to_transaction({("t", 0): 1}, "g")
                with pytest.raises(IllegalStateError):
                    await p.commit_transaction()
    arun(main())


def test_transactional_producer_needs_idempotence_and_acks_all():
    with pytest.raises(ValueError, match="transactional_id"):
        AsyncProducer("127.0.0.1:1", transactional_id="tx", acks=1)
    with pytest.raises(ValueError, match="transactional_id"):
        AsyncProducer("127.0.0.1:1", transactional_id="tx", enable_idempotence=False)


def test_non_transactional_producer_refuses_transactional_calls():
    async def main():
        async with txn_broker() as fake:
            async with AsyncProducer(fake.bootstrap) as p:
                with pytest.raises(IllegalStateError, match="transactional_id"):
                    p.begin_transaction()
    arun(main())


# ---------------------------------------------------------------- the consumer's group metadata


def test_group_metadata_of_a_manual_consumer_and_of_a_group_member():
    class Member:
        active = True

        def commit_identity(self):
            return 17, "member-x", "static-x"

    async def main():
        c = AsyncConsumer("127.0.0.1:1", group_id="g", group_instance_id="static-x")
        assert c.group_metadata() == GroupMetadata("g", -1, "", None)
        c.member = Member()  # a KIP-848 member: the generation is its member epoch
        assert c.group_metadata() == GroupMetadata("g", 17, "member-x", "static-x")
        with pytest.raises(IllegalStateError):
            AsyncConsumer("127.0.0.1:1").group_metadata()
    arun(main())
