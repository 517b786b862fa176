"""An in-process broker that takes mutated requests and says when one did harm.

Theory of operation: `Fuzzer.run(api_key, cases, seed)` draws a version and a seed body
(fuzz_frames.seeds), mutates it, dispatches it through `Broker.handle_frame` and checks,
after every case, that nothing was logged with a traceback or at ERROR, that no handler
raised (`broker.internal_errors`), that only an acks=0 Produce went unanswered and that
`__consumer_offsets` is still whole. Every 64 cases time jumps 3 s and the coordinator's
timers run (sessions expire, joins complete), deleted fixture topics come back, a
well-formed ApiVersions and a Metadata for a topic no mutation names must be answered,
and a fresh classic group and consumer group are formed with well-formed requests (they
must work) for the next cases' seeds to name.
Every 1024 cases and at the end, what the coordinator wrote must load again into a fresh
coordinator runtime, as it would after a restart.

A failure names the seed, the case number, the mutation and the frame in hex: the run
is deterministic, so `ODRADEK_FUZZ_SEED=<seed>` replays it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections import Counter

import pytest

from odradek.broker.broker import Broker
from odradek.broker.errors import CloseConnection
from odradek.cluster.names import CONSUMER_OFFSETS
from odradek.config import BrokerConfig
from odradek.coordinator.consumer_protocol import encode_assignment, encode_subscription
from odradek.coordinator.runtime import CoordinatorRuntime, discarding_writer
from odradek.protocol.errors import MEMBER_ID_REQUIRED
from odradek.protocol.messages import request_class
from odradek.records.codec import Record, encode_batch
from tests.broker import fuzz_frames as F
from tests.wire import parse_response, request_frame

SENTINEL = "sentinel-never-fuzzed"  # no seed or mutation names it: the "still serves" check reads it
FIXED_TOPICS = {"fz": 2, "fz-doomed": 1, "fz-grow": 1, SENTINEL: 1}



class Tracebacks(logging.Handler):
    """Collects every record that carries a traceback or is logged at ERROR or above."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


class Fuzzer:
    def __init__(self, data_dir) -> None:
        self.now = 1_700_000_000_000
        # No initial rebalance delay: a classic join completes at the next timer run.
        config = BrokerConfig(data_dir=data_dir, listen_port=0, extra={"group.initial.rebalance.delay.ms": "0"})
        self.broker = Broker(config, clock=lambda: self.now)
        ids = itertools.count(1)
        def new_member_id() -> str:
            return f"m{next(ids)}"  # classic member ids become "fuzz-m1", "fuzz-m2", ...

        self.broker.coordinator.runtime.new_member_id = new_member_id
        for shard in self.broker.coordinator.runtime.shards.values():
            shard.new_member_id = new_member_id
        self.loop = asyncio.new_event_loop()
        self.ensure_topics()
        batch = encode_batch([Record(i, 1_700_000_000_000 + i, b"k", b"v" * i) for i in range(3)], compression=0)
        md = self.broker.metadata
        self.world = F.World("fz", md.get("fz").topic_id, "fz-created", "fz-doomed", md.get("fz-doomed").topic_id,
                             "fz-grow", batch, encode_subscription(["fz"]), encode_assignment({"fz": [0, 1]}))
        self.seeds = {(k, v): F.seeds(k, v, self.world)
                      for k, (lo, hi) in self.broker.supported.items() for v in range(lo, hi + 1)}
        self.groups = itertools.count(1)
        self.loaded: dict[int, int] = {}  # __consumer_offsets partition -> end offset last reloaded
        self.tracebacks = Tracebacks()
        logging.getLogger().addHandler(self.tracebacks)

    def close(self) -> None:
        logging.getLogger().removeHandler(self.tracebacks)
        self.broker.close()
        self.loop.close()

    # --- the broker's side ------------------------------------------------------------------

    def ensure_topics(self) -> None:
        """Re-create what a fuzzed DeleteTopics removed, and shrink what CreatePartitions grew."""
        for name, partitions in FIXED_TOPICS.items():
            topic = self.broker.metadata.get(name)
            if topic is not None and topic.partitions > 64:
                self.broker.delete_topic(topic)
                topic = None
            if topic is None:
                self.broker.create_topic(name, partitions, {})

    def intact(self) -> str | None:
        """What is wrong with the coordinator's topic, or None."""
        topic = self.broker.metadata.get(CONSUMER_OFFSETS)
        want = self.broker.coordinator.config.offsets_topic_partitions
        if topic is None:
            return f"{CONSUMER_OFFSETS} was deleted"
        if topic.partitions != want:
            # A restart would refuse to start (GroupCoordinator.ensure_topic).
            return f"{CONSUMER_OFFSETS} has {topic.partitions} partitions, not {want}"
        return None

    def healthy(self) -> bool:
        """False when an earlier run left harm behind (the next run starts afresh)."""
        try:
            self.reload()
        except Exception:  # noqa: BLE001  (any failure to load is the harm we look for)
            return False
        return self.intact() is None

    def reload(self) -> None:
        """Load what the coordinator wrote into a fresh runtime, as a restart would (only the
        partitions written since the last time: replaying all of them each time grows
        quadratically with the run)."""
        coordinator = self.broker.coordinator
        runtime = CoordinatorRuntime(coordinator.config, discarding_writer(), coordinator.build_image())
        for p in range(coordinator.config.offsets_topic_partitions):
            end = self.broker.logs.get(CONSUMER_OFFSETS, p).log_end_offset
            if self.loaded.get(p) != end:
                runtime.load_bytes(p, coordinator.read_partition(p), self.now)
                self.loaded[p] = end

    def dispatch(self, payload: bytes):
        try:
            # Handlers only yield where they wait (the purgatory, a join): 5 ms tells "parked".
            return self.loop.run_until_complete(asyncio.wait_for(self.broker.handle_frame(payload), 0.005))
        except CloseConnection:
            return "closed"
        except TimeoutError:
            return "parked"  # a long-poll fetch or a JoinGroup waiting for its rebalance: legitimate

    def still_serves(self) -> None:
        frame = request_frame(18, 3, {"client_software_name": "check", "client_software_version": "1"}, 99)
        _, av = parse_response(18, 3, self.dispatch(frame[4:]))
        assert av.error_code == 0
        frame = request_frame(3, 12, {"topics": [{"name": SENTINEL, "topic_id": None}],
                                      "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False}, 98)
        _, md = parse_response(3, 12, self.dispatch(frame[4:]))
        assert [(t.name, t.error_code, len(t.partitions)) for t in md.topics] == [(SENTINEL, 0, 1)]

    def call(self, api_key: int, version: int, body: dict):
        """A well-formed request's response entity; timers run while it is parked."""
        frame = request_frame(api_key, version, body, correlation_id=97, client_id="fuzz")
        task = self.loop.create_task(self.broker.handle_frame(frame[4:]))
        for _ in range(50):
            self.loop.run_until_complete(asyncio.sleep(0))
            if task.done():
                return parse_response(api_key, version, task.result())[1]
            self.now += 100
            self.broker.coordinator_tick()
        task.cancel()
        pytest.fail(f"a well-formed request (api {api_key} v{version}) got no answer: {body}", pytrace=False)

    def prepare_groups(self) -> None:
        """A fresh stable classic group and a consumer group member, for the seeds to name:
        without them a Heartbeat or SyncGroup would rarely get past UNKNOWN_MEMBER_ID."""
        w, n = self.world, next(self.groups)
        join = {"group_id": f"fj{n}", "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": w.subscription}], "reason": None}
        r = self.call(11, 5, join)
        if r.error_code == MEMBER_ID_REQUIRED:  # KIP-394: the first join only hands out the id
            r = self.call(11, 5, {**join, "member_id": r.member_id})
        assert r.error_code == 0, f"a well-formed JoinGroup failed: {r}"
        s = self.call(14, 3, {"group_id": f"fj{n}", "generation_id": r.generation_id, "member_id": r.member_id,
                              "group_instance_id": None,
                              "assignments": [{"member_id": r.member_id, "assignment": w.assignment}]})
        assert s.error_code == 0, f"a well-formed SyncGroup failed: {s}"
        w.classic_group, w.classic_member, w.classic_generation = f"fj{n}", r.member_id, r.generation_id
        h = self.call(68, 1, {"group_id": f"fc{n}", "member_id": w.consumer_member, "member_epoch": 0,
                              "instance_id": None, "rack_id": None, "rebalance_timeout": 30_000,
                              "subscribed_topic_names": ["fz"], "subscribed_topic_regex": None,
                              "server_assignor": None, "topic_partitions": []})
        assert h.error_code == 0, f"a well-formed ConsumerGroupHeartbeat failed: {h}"
        owned = h.assignment.topic_partitions if h.assignment is not None else ()
        w.consumer_group, w.consumer_epoch = f"fc{n}", h.member_epoch
        w.consumer_owned = tuple({"topic_id": tp.topic_id, "partitions": list(tp.partitions)} for tp in owned)
        # Mutations try these too: a classic request naming the consumer group is an online
        # upgrade (KIP-848 "Online Migration"), a consumer heartbeat naming the classic one too.
        self.names = (w.classic_group, w.consumer_group, w.classic_member, w.consumer_member)
        for key in self.seeds:
            if key[0] in F.CLASSIC_APIS + F.CONSUMER_APIS + (44,):
                self.seeds[key] = F.seeds(*key, w)

    # --- cases ----------------------------------------------------------------------------------

    def case(self, rng: random.Random, api_key: int) -> tuple[int, str, str, bytes]:
        """(version, seed name, what was mutated, frame) of one mutated request."""
        lo, hi = self.broker.supported[api_key]
        version = rng.randint(lo, hi)
        name, tree = rng.choice(self.seeds[(api_key, version)])
        cls = request_class(api_key, version)
        how = []
        # Most cases change fields (they reach the handlers); byte-level damage mostly
        # exercises the parser, for which a third of the cases is plenty.
        style = rng.random()
        if style < 0.8:
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                mutated = F.mutate_tree(rng, cls, tree, self.names)
                if mutated is not None:
                    tree, what = mutated
                    how.append(what)
        payload = F.encode_request(api_key, version, tree, correlation_id=rng.randrange(1 << 31))
        if style >= 0.7 or not how:
            payload, what = F.mutate_bytes(rng, payload)
            how.append(what)
        return version, name, "; ".join(how), payload

    def run(self, api_key: int, cases: int, seed: int) -> Counter:
        rng = random.Random(seed * 1000 + api_key)
        outcomes: Counter = Counter()
        self.prepare_groups()
        for i in range(cases):
            version, name, how, payload = self.case(rng, api_key)
            where = (f"ODRADEK_FUZZ_SEED={seed} api {api_key} case {i}: v{version} seed {name!r}, {how}\n"
                     f"frame {payload.hex()}")
            result = self.dispatch(payload)
            self.check(where)
            if result is None:
                assert api_key == 0, f"no response, which only acks=0 Produce may do\n{where}"
                outcomes["no response"] += 1
            elif isinstance(result, bytes):
                outcomes["response"] += 1
            else:
                outcomes[result] += 1
            self.now += 7
            if i % 64 == 63:
                # Time passes: sessions expire, rebalances time out, joins complete.
                self.now += 3_000
                self.broker.coordinator_tick()
                self.check(where + "\n(in the coordinator's timers after it)")
                self.ensure_topics()
                self.still_serves()
                self.prepare_groups()
            if i % 1024 == 1023:
                self.check_reload(f"{where}\n(or one of the 1023 cases before it)")
        self.broker.coordinator_tick()
        self.still_serves()
        self.check(f"ODRADEK_FUZZ_SEED={seed} api {api_key}, after the run")
        self.check_reload(f"ODRADEK_FUZZ_SEED={seed} api {api_key}, after the run")
        return outcomes

    def check(self, where: str) -> None:
        if self.tracebacks.records:
            text = "\n".join(logging.Formatter().format(r) for r in self.tracebacks.records)
            self.tracebacks.records.clear()
            pytest.fail(f"traceback logged for client input\n{where}\n{text}", pytrace=False)
        assert self.broker.internal_errors == 0, f"a handler raised\n{where}"
        broken = self.intact()
        if broken:
            pytest.fail(f"client input broke the group coordinator: {broken}\n{where}", pytrace=False)

    def check_reload(self, where: str) -> None:
        try:
            self.reload()
        except Exception as exc:  # noqa: BLE001  (any failure to load is the harm we look for)
            pytest.fail(f"what the coordinator stored does not load again ({exc!r})\n{where}", pytrace=False)
