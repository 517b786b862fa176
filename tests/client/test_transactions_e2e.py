"""Transactions end to end (KIP-98, KIP-447): odradek's transactional producer and
read_committed consumer against a real odradek broker process.

These need the broker's side of transactions (transaction coordinator, markers, the last
stable offset and aborted-transaction index, TxnOffsetCommit). A broker without it answers
a transactional InitProducerId with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and every test
here then fails at init_transactions(); they are deliberately not skipped.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.client import AsyncConsumer, AsyncProducer, ConsumerRecord, TopicPartition
from odradek.client import offsets as O
from odradek.client.errors import KafkaError, TransactionFatalError
from odradek.client.transaction import State

from .test_producer import arun, create_topic

TIMEOUT = 30.0


def txn_id() -> str:
    return f"tx-{uuid.uuid4()}"


async def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[ConsumerRecord]:
    """Everything a consumer with `isolation` can read now: from the beginning up to the end
    offsets it is given (the last stable offset for read_committed)."""
    c = AsyncConsumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100, isolation_level=isolation)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        ends = await c.end_offsets(tps)
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + TIMEOUT
        for _ in range(10_000):
            positions = [await c.position(tp) for tp in tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, tps)):
                break
            assert time.monotonic() < deadline, f"positions {positions}, ends {ends}"
            out += await c.poll(200)
        out += await c.poll(300)  # nothing more may come
        return out
    finally:
        await c.close()


def values(records: list[ConsumerRecord]) -> list[bytes]:
    return sorted(r.value for r in records)


def test_committed_and_aborted_transactions_per_isolation_level(broker, topic_name):
    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        async with AsyncProducer(broker.bootstrap, transactional_id=txn_id(), linger_ms=2) as p:
            await p.init_transactions()
            for name, n, commit in (("a", 5, True), ("b", 4, False), ("c", 3, True)):
                p.begin_transaction()
                futs = [await p.send(topic_name, f"{name}{i}".encode(), partition=i % 2) for i in range(n)]
                await asyncio.gather(*futs)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
            assert p.txn.state is State.READY
        committed = await read_all(broker.bootstrap, topic_name, 2, "read_committed")
        everything = await read_all(broker.bootstrap, topic_name, 2, "read_uncommitted")
        assert values(committed) == sorted([b"a%d" % i for i in range(5)] + [b"c%d" % i for i in range(3)])
        # read_uncommitted sees the aborted records too, and neither sees a marker.
        assert values(everything) == sorted([b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(4)]
                                            + [b"c%d" % i for i in range(3)])
        # Markers take offsets: 3 transactions x 2 partitions.
        async with AsyncConsumer(broker.bootstrap) as c:
            ends = await c.end_offsets([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        assert sum(ends.values()) == 12 + 6
    arun(main())


def test_an_open_transaction_is_invisible_to_read_committed_until_it_commits(broker, topic_name):
    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        tp = TopicPartition(topic_name, 0)
        async with AsyncProducer(broker.bootstrap, transactional_id=txn_id(), linger_ms=0) as p:
            await p.init_transactions()
            p.begin_transaction()
            await asyncio.gather(*[await p.send(topic_name, b"open%d" % i, partition=0) for i in range(3)])
            async with (AsyncConsumer(broker.bootstrap, isolation_level="read_committed") as rc,
                        AsyncConsumer(broker.bootstrap, isolation_level="read_uncommitted") as ru):
                assert (await rc.end_offsets([tp]))[tp] == 0  # the last stable offset
                assert (await ru.end_offsets([tp]))[tp] == 3  # the high watermark
            assert await read_all(broker.bootstrap, topic_name, 1, "read_committed") == []
            await p.commit_transaction()
        got = await read_all(broker.bootstrap, topic_name, 1, "read_committed")
        assert values(got) == [b"open0", b"open1", b"open2"]
    arun(main())


async def stable_committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    """The group's committed offset once no transaction holds it back (require_stable)."""
    async with AsyncConsumer(bootstrap, group_id=group) as c:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                found = await O.fetch_committed(c.client, group, [tp], require_stable=True)
                return found[tp].offset if tp in found else None
            except KafkaError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


def test_send_offsets_to_transaction_commits_offsets_only_when_the_transaction_commits(broker, topic_name):
    async def main():
        source, sink = f"{topic_name}-in", f"{topic_name}-out"
        await create_topic(broker.bootstrap, source, 1)
        await create_topic(broker.bootstrap, sink, 1)
        group = f"g-{uuid.uuid4()}"
        tp = TopicPartition(source, 0)
        async with (AsyncConsumer(broker.bootstrap, group_id=group, enable_auto_commit=False) as consumer,
                    AsyncProducer(broker.bootstrap, transactional_id=txn_id()) as p):
            consumer.assign([tp])
            await p.init_transactions()
            p.begin_transaction()
            await (await p.send(sink, b"x"))
            await p.send_offsets_to_transaction({tp: 5}, consumer.group_metadata())
            await p.abort_transaction()
            assert await stable_committed(broker.bootstrap, group, tp) is None
            p.begin_transaction()
            await (await p.send(sink, b"y"))
            await p.send_offsets_to_transaction({tp: 7}, consumer.group_metadata())
            await p.commit_transaction()
        assert await stable_committed(broker.bootstrap, group, tp) == 7
        assert values(await read_all(broker.bootstrap, sink, 1, "read_committed")) == [b"y"]
    arun(main())


def test_consume_transform_produce_with_a_group_member(broker, topic_name):
    """KIP-447: the offsets carry the member's epoch, which the coordinator checks."""
    async def main():
        source, sink = f"{topic_name}-in", f"{topic_name}-out"
        await create_topic(broker.bootstrap, source, 1)
        await create_topic(broker.bootstrap, sink, 1)
        group = f"g-{uuid.uuid4()}"
        async with AsyncProducer(broker.bootstrap) as plain:
            await asyncio.gather(*[await plain.send(source, b"%d" % i) for i in range(10)])
        async with (AsyncConsumer(broker.bootstrap, group_id=group, enable_auto_commit=False,
                                  auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer,
                    AsyncProducer(broker.bootstrap, transactional_id=txn_id()) as p):
            consumer.subscribe([source])
            await p.init_transactions()
            seen: list[ConsumerRecord] = []
            deadline = time.monotonic() + TIMEOUT
            while len(seen) < 10:
                assert time.monotonic() < deadline, f"{len(seen)} of 10 records"
                records = await consumer.poll(200)
                if not records:
                    continue
                p.begin_transaction()
                for r in records:
                    await p.send(sink, r.value.upper() + b"!")
                tp = TopicPartition(source, 0)
                metadata = consumer.group_metadata()
                assert metadata.generation_id > 0 and metadata.member_id
                await p.send_offsets_to_transaction({tp: records[-1].offset + 1}, metadata)
                await p.commit_transaction()
                seen += records
        assert await stable_committed(broker.bootstrap, group, TopicPartition(source, 0)) == 10
        assert len(await read_all(broker.bootstrap, sink, 1, "read_committed")) == 10
    arun(main())


def test_a_new_producer_with_the_same_transactional_id_fences_the_old_one(broker, topic_name):
    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        tid = txn_id()
        async with (AsyncProducer(broker.bootstrap, transactional_id=tid) as old,
                    AsyncProducer(broker.bootstrap, transactional_id=tid) as new):
            await old.init_transactions()
            old.begin_transaction()
            await (await old.send(topic_name, b"zombie", partition=0))
            await new.init_transactions()  # bumps the epoch and aborts the old one's transaction
            with pytest.raises(TransactionFatalError):
                await old.commit_transaction()
            assert old.txn.state is State.FATAL_ERROR
            new.begin_transaction()
            await (await new.send(topic_name, b"alive", partition=0))
            await new.commit_transaction()
        assert values(await read_all(broker.bootstrap, topic_name, 1, "read_committed")) == [b"alive"]
    arun(main())


def test_the_synchronous_facade_commits_and_aborts(broker, topic_name):
    from odradek.client import Consumer, Producer

    arun(create_topic(broker.bootstrap, topic_name, 1))
    p = Producer(broker.bootstrap, transactional_id=txn_id())
    try:
        p.init_transactions(TIMEOUT)
        p.begin_transaction()
        for i in range(5):
            p.send(topic_name, b"kept-%d" % i, partition=0)
        p.commit_transaction(TIMEOUT)  # records queued by send() belong to the transaction
        p.begin_transaction()
        p.send(topic_name, b"dropped", partition=0)
        p.abort_transaction(TIMEOUT)
    finally:
        p.close()
    assert values(arun(read_all(broker.bootstrap, topic_name, 1, "read_committed"))) == [
        b"kept-%d" % i for i in range(5)]
    c = Consumer(broker.bootstrap, group_id=f"g-{topic_name}")
    try:
        md = c.group_metadata()
        assert md.group_id == f"g-{topic_name}" and md.generation_id == -1
    finally:
        c.close()
