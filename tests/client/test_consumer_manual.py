"""The odradek consumer in manual mode (assign, no group membership) against a real broker.

Records are produced with the odradek producer (explicit partitions, known values and
timestamps) and read back with `AsyncConsumer.assign`; every test checks offsets and values
exactly: nothing lost, nothing duplicated, nothing out of order. Offsets are committed to a
group id without joining it (generation -1), as Kafka's manual offset management allows.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ConsumerRecord,
    IllegalStateError,
    KafkaError,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

from .test_producer import CODECS, TIMEOUT, arun, create_topic, raw_batches

# --------------------------------------------------------------------------- helpers


def value(partition: int, i: int) -> bytes:
    return b"p%d-%04d" % (partition, i)


async def produce(bootstrap: str, topic: str, counts: dict[int, int], *, start: int = 0,
                  timestamps=None, **config) -> list[RecordMetadata]:
    """counts[p] records on partition p, values `value(p, i)` for i from `start`;
    `timestamps(p, i)` gives each record's timestamp (default: now)."""
    config.setdefault("linger_ms", 5)
    async with AsyncProducer(bootstrap, **config) as p:
        futs = []
        for partition, n in counts.items():
            for i in range(start, start + n):
                ts = timestamps(partition, i) if timestamps else None
                futs.append(await p.send(topic, value(partition, i), b"k%d" % i, partition=partition,
                                         timestamp_ms=ts))
        return list(await asyncio.gather(*futs))


async def poll_n(consumer: AsyncConsumer, n: int, *, timeout: float = TIMEOUT,
                 max_records: int | None = None) -> list[ConsumerRecord]:
    """Poll until exactly `n` records arrived (fails on more, or on timeout)."""
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    for _ in range(10_000):
        if len(out) >= n:
            break
        assert time.monotonic() < deadline, f"{len(out)} of {n} records after {timeout}s"
        out += await consumer.poll(200, max_records)
    assert len(out) == n, f"{len(out)} records polled, {n} expected"
    return out


def offsets_by_partition(records) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in records:
        out.setdefault(r.partition, []).append(r.offset)
    return out


def check_values(records) -> None:
    for r in records:
        assert r.value == value(r.partition, r.offset), r


async def started(bootstrap: str, **config) -> AsyncConsumer:
    config.setdefault("fetch_max_wait_ms", 100)
    return await AsyncConsumer(bootstrap, **config).start()


# --------------------------------------------------------------------------- assign / poll / seek / position


def test_assign_poll_seek_position(broker, topic_name):
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)

    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        await produce(broker.bootstrap, topic_name, {0: 100, 1: 100})
        c = await started(broker.bootstrap, auto_offset_reset="earliest")
        try:
            with pytest.raises(IllegalStateError):
                await c.poll(0)  # nothing assigned
            c.assign([tp0, (topic_name, 1)])
            assert c.assignment() == {tp0, tp1}
            assert await c.position(tp0) == 0

            records = await poll_n(c, 200)
            assert offsets_by_partition(records) == {0: list(range(100)), 1: list(range(100))}
            check_values(records)
            assert {r.key for r in records} == {b"k%d" % i for i in range(100)}
            assert (await c.position(tp0), await c.position(tp1)) == (100, 100)
            assert await c.poll(200) == []

            c.seek(tp0, 42)
            assert await c.position(tp0) == 42
            records = await poll_n(c, 58)
            assert offsets_by_partition(records) == {0: list(range(42, 100))}
            check_values(records)

            c.seek_to_beginning([tp1])
            assert await c.position(tp1) == 0
            records = await poll_n(c, 100)
            assert offsets_by_partition(records) == {1: list(range(100))}

            c.seek_to_beginning()  # every assigned partition
            c.seek_to_end()
            assert (await c.position(tp0), await c.position(tp1)) == (100, 100)
            assert await c.poll(300) == []
            await produce(broker.bootstrap, topic_name, {1: 5}, start=100)
            records = await poll_n(c, 5)
            assert offsets_by_partition(records) == {1: [100, 101, 102, 103, 104]}
            check_values(records)

            # a seek while records are prefetched: the next record is exactly the sought one
            c.seek(tp0, 0)
            c.seek(tp1, 0)
            first = await poll_n(c, 10, max_records=10)
            c.seek(tp0, 5)
            c.seek(tp1, 90)
            records = await poll_n(c, 95 + 15)
            assert offsets_by_partition(records) == {0: list(range(5, 100)), 1: list(range(90, 105))}
            assert len(first) == 10

            with pytest.raises(IllegalStateError):
                c.seek((topic_name, 2), 0)
            with pytest.raises(IllegalStateError):
                await c.position((topic_name, 2))
            with pytest.raises(ValueError):
                c.seek(tp0, -1)

            # reassignment: only the new partition set is fetched
            c.assign([tp1])
            c.seek(tp1, 100)
            await produce(broker.bootstrap, topic_name, {0: 1, 1: 1}, start=200)
            records = await poll_n(c, 5 + 1)
            assert offsets_by_partition(records) == {1: list(range(100, 106))}
            assert await c.poll(200) == []
        finally:
            await c.close()
        with pytest.raises(IllegalStateError):
            await c.poll(0)  # closed

    arun(main())


def test_first_poll_after_seek_does_not_wait_out_its_timeout(broker, topic_name):
    # Regression: poll() used not to wake up when the metadata refresh it spawned for a
    # partition with an unknown leader completed, and so returned nothing after its timeout.
    tp = TopicPartition(topic_name, 0)

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        await produce(broker.bootstrap, topic_name, {0: 5})
        c = await started(broker.bootstrap)
        try:
            c.assign([tp])
            c.seek(tp, 2)  # a position without any lookup: the consumer has no metadata for the topic yet
            t0 = time.monotonic()
            records = await c.poll(3000)
            elapsed = time.monotonic() - t0
            assert [r.offset for r in records] == [2, 3, 4], f"poll(3000) returned {records} after {elapsed:.1f}s"
            assert elapsed < 2
        finally:
            await c.close()

    arun(main())


# --------------------------------------------------------------------------- auto_offset_reset


def test_auto_offset_reset_earliest_latest_none(broker, topic_name):
    tp = TopicPartition(topic_name, 0)

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        await produce(broker.bootstrap, topic_name, {0: 20})

        earliest = await started(broker.bootstrap, auto_offset_reset="earliest")
        latest = await started(broker.bootstrap, auto_offset_reset="latest")
        none = await started(broker.bootstrap, auto_offset_reset="none")
        try:
            for c in (earliest, latest, none):
                c.assign([tp])
            assert await earliest.position(tp) == 0
            assert await latest.position(tp) == 20
            with pytest.raises(KafkaError) as info:
                await none.position(tp)
            assert info.value.name == "OFFSET_OUT_OF_RANGE" and not info.value.retriable
            with pytest.raises(KafkaError, match="OFFSET_OUT_OF_RANGE"):
                await none.poll(100)
            none.seek(tp, 18)  # an explicit position is all "none" needs
            assert [r.offset for r in await poll_n(none, 2)] == [18, 19]

            assert [r.offset for r in await poll_n(earliest, 20)] == list(range(20))
            assert await latest.poll(300) == []
            await produce(broker.bootstrap, topic_name, {0: 3}, start=20)
            for c in (earliest, latest, none):
                records = await poll_n(c, 3)
                assert [r.offset for r in records] == [20, 21, 22]
                check_values(records)
        finally:
            for c in (earliest, latest, none):
                await c.close()

    arun(main())


def test_auto_offset_reset_none_uses_committed_offset(broker, topic_name):
    tp = TopicPartition(topic_name, 0)
    group = f"g-{topic_name}"

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        await produce(broker.bootstrap, topic_name, {0: 10})
        async with AsyncAdmin(broker.bootstrap) as admin:
            await admin.alter_group_offsets(group, {tp: 7})
        c = await started(broker.bootstrap, group_id=group, auto_offset_reset="none", enable_auto_commit=False)
        try:
            c.assign([tp])
            assert await c.position(tp) == 7
            assert [r.offset for r in await poll_n(c, 3)] == [7, 8, 9]
        finally:
            await c.close()

    arun(main())


@pytest.mark.parametrize("policy", ["earliest", "latest", "none"])
def test_seek_past_the_end_resets_per_policy(broker, topic_name, policy):
    tp = TopicPartition(topic_name, 0)

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        await produce(broker.bootstrap, topic_name, {0: 30})
        c = await started(broker.bootstrap, auto_offset_reset=policy)
        try:
            c.assign([tp])
            c.seek(tp, 1000)  # beyond the log end offset (30)
            if policy == "earliest":
                records = await poll_n(c, 30)
                assert [r.offset for r in records] == list(range(30))
                assert await c.position(tp) == 30
            elif policy == "latest":
                deadline = time.monotonic() + TIMEOUT
                while await c.position(tp) != 30:
                    assert time.monotonic() < deadline, f"position stayed {await c.position(tp)}"
                    assert await c.poll(100) == []
                await produce(broker.bootstrap, topic_name, {0: 2}, start=30)
                assert [r.offset for r in await poll_n(c, 2)] == [30, 31]
            else:
                deadline = time.monotonic() + TIMEOUT
                with pytest.raises(KafkaError) as info:
                    while time.monotonic() < deadline:
                        assert await c.poll(100) == []
                assert info.value.name == "OFFSET_OUT_OF_RANGE"
                assert await c.position(tp) == 1000  # not reset
                c.seek(tp, 29)
                assert [r.offset for r in await poll_n(c, 1)] == [29]
        finally:
            await c.close()

    arun(main())


# --------------------------------------------------------------------------- max_poll_records


def test_max_poll_records_bounds_every_poll(broker, topic_name):
    async def main():
        await create_topic(broker.bootstrap, topic_name, 3)
        await produce(broker.bootstrap, topic_name, {0: 30, 1: 31, 2: 32})
        c = await started(broker.bootstrap, auto_offset_reset="earliest", max_poll_records=7)
        try:
            c.assign([(topic_name, p) for p in range(3)])
            records: list[ConsumerRecord] = []
            sizes = []
            deadline = time.monotonic() + TIMEOUT
            while len(records) < 93:
                assert time.monotonic() < deadline
                batch = await c.poll(200)
                sizes.append(len(batch))
                records += batch
            assert max(sizes) == 7 and all(s <= 7 for s in sizes)
            assert offsets_by_partition(records) == {p: list(range(30 + p)) for p in range(3)}
            check_values(records)
            # the per-call bound overrides the configured one
            c.seek_to_beginning()
            assert len(await poll_n(c, 3, max_records=3)) == 3
            for _ in range(5):
                assert len(await c.poll(100, max_records=2)) <= 2
        finally:
            await c.close()

    arun(main())


# --------------------------------------------------------------------------- pause / resume


def test_pause_resume_loses_and_repeats_nothing(broker, topic_name):
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)

    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        await produce(broker.bootstrap, topic_name, {0: 60, 1: 60})
        c = await started(broker.bootstrap, auto_offset_reset="earliest", max_poll_records=10)
        try:
            c.assign([tp0, tp1])
            records: list[ConsumerRecord] = []
            deadline = time.monotonic() + TIMEOUT
            while not {0} <= set(offsets_by_partition(records)):
                assert time.monotonic() < deadline
                records += await c.poll(200)
            # more of partition 0 is now prefetched; pausing must hide it
            c.pause([tp0])
            assert c.paused() == {tp0}
            paused_at = await c.position(tp0)
            assert 0 < paused_at < 60
            during: list[ConsumerRecord] = []
            quiet = 0
            while quiet < 3:  # until partition 1 is drained and three polls came back empty
                assert time.monotonic() < deadline
                got = await c.poll(100)
                during += got
                quiet = 0 if got else quiet + 1
            assert {r.partition for r in during} <= {1}
            assert await c.position(tp0) == paused_at
            assert await c.position(tp1) == 60
            c.resume([tp0])
            assert c.paused() == set()
            after = await poll_n(c, 60 - paused_at)
            assert offsets_by_partition(after) == {0: list(range(paused_at, 60))}
            everything = records + during + after
            assert offsets_by_partition(everything) == {0: list(range(60)), 1: list(range(60))}
            check_values(everything)
            with pytest.raises(IllegalStateError):
                c.pause([(topic_name, 5)])
        finally:
            await c.close()

    arun(main())


# --------------------------------------------------------------------------- commits without membership


def test_commit_to_group_without_membership(broker, topic_name):
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    group = f"g-{topic_name}"

    async def main():
        await create_topic(broker.bootstrap, topic_name, 2)
        await produce(broker.bootstrap, topic_name, {0: 40, 1: 40})
        c = await started(broker.bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="none")
        try:
            c.assign([tp0, tp1])
            assert await c.committed([tp0, tp1]) == {tp0: None, tp1: None}
            await c.commit({tp0: 17, (topic_name, 1): OffsetAndMetadata(3, "meta")})
            assert await c.committed([tp0, tp1]) == {tp0: 17, tp1: 3}
            # the committed offsets are the starting positions (auto_offset_reset=none: no fallback)
            assert (await c.position(tp0), await c.position(tp1)) == (17, 3)
            records = await poll_n(c, 23 + 37)
            assert offsets_by_partition(records) == {0: list(range(17, 40)), 1: list(range(3, 40))}
            c.seek(tp0, 30)
            await c.commit()  # every position
            assert await c.committed([tp0, tp1]) == {tp0: 30, tp1: 40}
        finally:
            await c.close()
        async with AsyncAdmin(broker.bootstrap) as admin:
            listed = await admin.list_group_offsets(group)
            assert {tp: o.offset for tp, o in listed.items()} == {tp0: 30, tp1: 40}
            groups = {g.group_id for g in await admin.list_groups()}
            assert group in groups

        # a new consumer of the group starts at the committed offsets
        c = await started(broker.bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="none")
        try:
            c.assign([tp0, tp1])
            assert [r.offset for r in await poll_n(c, 10)] == list(range(30, 40))
        finally:
            await c.close()

        # enable_auto_commit with assign: close commits the positions
        c = await started(broker.bootstrap, group_id=group, enable_auto_commit=True, auto_offset_reset="none",
                          auto_commit_interval_ms=60_000)
        try:
            c.assign([tp0])
            c.seek(tp0, 35)
            assert len(await poll_n(c, 5)) == 5
        finally:
            await c.close()
        c = await started(broker.bootstrap, group_id=group, enable_auto_commit=False)
        try:
            assert await c.committed([tp0]) == {tp0: 40}
        finally:
            await c.close()

        # without a group id there is nothing to commit to
        c = await started(broker.bootstrap)
        try:
            c.assign([tp0])
            with pytest.raises(IllegalStateError):
                await c.commit({tp0: 1})
            with pytest.raises(IllegalStateError):
                await c.committed([tp0])
        finally:
            await c.close()

    arun(main())


# --------------------------------------------------------------------------- offset lookups


def test_end_and_beginning_offsets(broker, topic_name):
    tps = [TopicPartition(topic_name, p) for p in range(3)]

    async def main():
        await create_topic(broker.bootstrap, topic_name, 3)
        await produce(broker.bootstrap, topic_name, {0: 25, 2: 7})
        c = await started(broker.bootstrap)
        try:
            assert await c.end_offsets(tps) == {tps[0]: 25, tps[1]: 0, tps[2]: 7}
            assert await c.beginning_offsets([(topic_name, p) for p in range(3)]) == dict.fromkeys(tps, 0)
            await produce(broker.bootstrap, topic_name, {1: 4})
            assert (await c.end_offsets([tps[1]]))[tps[1]] == 4
        finally:
            await c.close()

    arun(main())


def test_offsets_for_times(broker, topic_name):
    base = int(time.time() * 1000) - 3_600_000
    tp0, tp1, tp2 = (TopicPartition(topic_name, p) for p in range(3))
    skewed = [100, 50, 200, 150, 300]  # tp2: timestamps that go back and forth

    def stamp(partition: int, i: int) -> int:
        if partition == 0:
            return base + 10 * i
        if partition == 1:
            return base + 500
        return base + skewed[i]

    async def main():
        await create_topic(broker.bootstrap, topic_name, 3)
        await produce(broker.bootstrap, topic_name, {0: 20, 1: 1, 2: 5}, timestamps=stamp)
        c = await started(broker.bootstrap)
        try:
            found = await c.offsets_for_times({tp0: base + 55, tp1: base, (topic_name, 2): base + 120})
            assert found == {tp0: OffsetAndTimestamp(6, base + 60), tp1: OffsetAndTimestamp(0, base + 500),
                             tp2: OffsetAndTimestamp(2, base + 200)}
            found = await c.offsets_for_times({tp0: base + 60, tp1: base + 501, tp2: base + 60})
            assert found == {tp0: OffsetAndTimestamp(6, base + 60), tp1: None, tp2: OffsetAndTimestamp(0, base + 100)}
            found = await c.offsets_for_times({tp0: base - 10_000, tp2: base + 301})
            assert found == {tp0: OffsetAndTimestamp(0, base), tp2: None}
            # the answer is a position: seek there and read
            c.assign([tp0])
            c.seek(tp0, (await c.offsets_for_times({tp0: base + 185}))[tp0].offset)
            records = await poll_n(c, 1, max_records=1)
            assert (records[0].offset, records[0].timestamp) == (19, base + 190)
        finally:
            await c.close()

    arun(main())


# --------------------------------------------------------------------------- compressed batches


@pytest.mark.parametrize("codec", list(CODECS))
def test_fetch_from_the_middle_of_a_compressed_batch(broker, topic_name, codec):
    tp = TopicPartition(topic_name, 0)
    n = 100

    async def main():
        await create_topic(broker.bootstrap, topic_name, 1)
        await produce(broker.bootstrap, topic_name, {0: n}, compression_type=codec, linger_ms=200)
        batches = await raw_batches(broker.bootstrap, topic_name, 0)
        assert [(b.header.base_offset, len(b.records), b.compression) for b in batches] == [(0, n, CODECS[codec])]

        c = await started(broker.bootstrap, max_poll_records=10)
        try:
            c.assign([tp])
            c.seek(tp, 37)
            first = await c.poll(TIMEOUT * 1000)
            assert [r.offset for r in first] == list(range(37, 47))  # the broker sends the whole batch
            assert await c.position(tp) == 47
            records = first + await poll_n(c, n - 47)
            assert [r.offset for r in records] == list(range(37, n))
            check_values(records)
            c.seek(tp, n - 1)  # the last record of the batch
            assert [r.offset for r in await poll_n(c, 1)] == [n - 1]
            assert await c.poll(200) == []
        finally:
            await c.close()

    arun(main())


# --------------------------------------------------------------------------- sync facade


def test_sync_consumer(broker, topic_name):
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    group = f"g-{topic_name}"
    base = int(time.time() * 1000) - 60_000
    arun(create_topic(broker.bootstrap, topic_name, 2))
    arun(produce(broker.bootstrap, topic_name, {0: 30, 1: 30}, timestamps=lambda p, i: base + i))

    def poll_sync(c: Consumer, n: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        deadline = time.monotonic() + TIMEOUT
        while len(out) < n:
            assert time.monotonic() < deadline, f"{len(out)} of {n}"
            out += c.poll(200)
        assert len(out) == n
        return out

    with Consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                  fetch_max_wait_ms=100) as c:
        c.assign([tp0, tp1])
        assert c.assignment() == {tp0, tp1}
        assert c.position(tp0) == 0
        records = poll_sync(c, 60)
        assert offsets_by_partition(records) == {0: list(range(30)), 1: list(range(30))}
        check_values(records)
        c.seek(tp0, 25)
        assert [r.offset for r in poll_sync(c, 5)] == list(range(25, 30))
        c.seek_to_beginning([tp1])
        c.pause([tp1])
        assert c.paused() == {tp1}
        assert c.poll(300) == []
        c.resume([tp1])
        assert [r.offset for r in poll_sync(c, 30)] == list(range(30))
        c.seek_to_end()
        assert c.position(tp1) == 30
        c.commit({tp0: 11})
        c.commit({tp1: 12})
        assert c.committed([tp0, tp1]) == {tp0: 11, tp1: 12}
        assert c.end_offsets([tp0, tp1]) == {tp0: 30, tp1: 30}
        assert c.beginning_offsets([tp0]) == {tp0: 0}
        assert c.offsets_for_times({tp1: base + 10}) == {tp1: OffsetAndTimestamp(10, base + 10)}
    with pytest.raises(IllegalStateError):
        c.poll(0)
