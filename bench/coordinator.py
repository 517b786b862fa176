#!/usr/bin/env python3
"""Group coordinator benchmark: steady-state heartbeats, heartbeats over loopback, replay at start-up.

This is a benchmark script, not a test. It has three sections (``--sections``):

``inproc``  Heartbeats handled per second by ONE coordinator shard, in this process.
            For each ``--members`` size a consumer group that has converged (state
            Stable: every member at the target epoch, nothing pending) is built, then a
            bounded number of *partial* heartbeats (member_epoch = the member's epoch,
            no field changed, owned partitions None: what a stable KIP-848 client sends)
            go round-robin over the members, through:
              * ``coordinator``: ``CoordinatorRuntime.run(group, heartbeat)`` as the
                broker's handler calls it, with an in-memory writer (the timer tick the
                broker runs every 50 ms is run every 50 ms here too);
              * ``broker``: ``Broker.handle_frame`` of an in-process broker (temp data
                dir) with pre-encoded ConsumerGroupHeartbeat v1 frames: kio parse,
                handler, coordinator, kio encode;
            and, to show where the broker path's time goes, each step of that path
            alone (``parse``, ``handler``, ``encode``).
``loopback``  The same heartbeats over TCP on 127.0.0.1: ``--clients`` processes, each
            with its own connection and its share of the group's members, one request
            in flight per connection (request/response, no pipelining), for
            ``--duration`` seconds against ``odradek broker`` as a subprocess.
``classic``  The classic protocol in one shard, in this process: a group of each
            ``--members`` size forms (every member's JoinGroup v3 parked during the
            initial rebalance delay, the join phase completed by the timer, every
            follower's SyncGroup parked until the leader's), then classic Heartbeats go
            round-robin over the Stable group, through ``CoordinatorRuntime.run``.
``replay``  Start-up replay speed: an in-process broker on a temp data dir gets
            ``--commits`` offset-commit records (OffsetCommit through
            ``runtime.run``, ``--commit-partitions`` per request, over ``--groups``
            groups) plus a consumer group of ``--replay-members`` members that joined
            and converged through real heartbeats; the broker is closed and a fresh
            ``Broker(...)`` is started ``--replay-repeat`` times; the table shows
            GroupCoordinator.records_loaded / load_time_ms. One more start-up runs under
            cProfile and its top functions are printed. ``--replay-records N`` writes N
            records in all (the group's, then commits up to N) instead of ``--commits``;
            ``--offsets-partitions 1`` puts them all in one ``__consumer_offsets``
            partition (the default spreads them over 50), e.g. the 1M-record partition:
            ``--replay-records 1000000 --offsets-partitions 1``.

How the converged group is built (inproc, loopback): by default (``--converge replay``)
its records are written directly -- group epoch, partition metadata, one member
metadata + target + current assignment record per member, target epoch, all at epoch 1,
partitions split evenly -- and replayed, as a start-up would (joining 10,000 members one
by one through heartbeats costs O(n^2) target computations, minutes in Python).
``--converge heartbeats`` instead joins the members of the ``coordinator`` row's group
through real heartbeats and heartbeats them until the group is Stable (used up to 3,000
members; the broker rows and ``loopback`` always load the written records); the
steady-state figures should be the same, which is what the option is for (they are:
~337k/s vs ~344k/s for 1,000 members).

Every loop is bounded in count and in time; traffic stays on 127.0.0.1.

Run:  .venv/bin/python bench/coordinator.py [--sections inproc,loopback,replay] [--members 1000,10000]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import cProfile
import gc
import io
import multiprocessing as mp
import os
import pstats
import queue
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typing import Any

from bench_common import (
    LOOPBACK,
    BrokerProcess,
    interrupt_on_sigterm,
    machine_line,
    table,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kio.serial import entity_reader, entity_writer

from odradek.broker.broker import Broker, wall_clock_ms
from odradek.config import BrokerConfig
from odradek.coordinator import records as R
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer.heartbeat import HeartbeatRequest, heartbeat
from odradek.coordinator.consumer.model import (
    ConsumerMember,
    GroupState,
    MemberState,
    TopicMeta,
)
from odradek.coordinator.image import MetadataImage
from odradek.coordinator.offsets import CommitPartition, CommitRequest, commit
from odradek.coordinator.runtime import (
    CoordinatorRuntime,
    _collector_paused,
    discarding_writer,
)
from odradek.protocol.framing import frame as size_prefixed
from odradek.protocol.messages import (
    build,
    encode_response,
    parse_request,
    request_class,
    response_class,
)

GROUP = "bench-group"
TOPIC = "bench-topic"
CLIENT_ID = "bench"          # header client id of every frame (= the members' client_id, so nothing changes)
CLIENT_HOST = "/127.0.0.1"   # what the broker reports for loopback peers
HB_KEY, HB_VERSION = 68, 1   # ConsumerGroupHeartbeat v1
TICK_S = 0.05                # the broker runs coordinator timers every 50 ms (server.py)
REBALANCE_TIMEOUT_MS = 300_000


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------



def member_ids(n: int) -> list[str]:
    """Deterministic 36-character ids, as KIP-1082 clients generate (UUID strings)."""
    return [str(uuid.UUID(int=(i + 1) * 0x9E3779B97F4A7C15 % (1 << 128))) for i in range(n)]


def split_evenly(partitions: int, n: int) -> list[range]:
    return [range(i * partitions // n, (i + 1) * partitions // n) for i in range(n)]


def fmt_int(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def fmt_us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"








_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


# --------------------------------------------------------------------------
# A converged group, as records
# --------------------------------------------------------------------------


def converged_records(group_id: str, topic: TopicMeta, mids: list[str], epoch: int = 1) -> list[R.CoordinatorRecord]:
    """The records a Stable group at `epoch` consists of: every member subscribed to `topic`,
    its target = its current assignment (an even split), nothing pending."""
    out = [R.group_epoch(group_id, epoch), R.partition_metadata(group_id, [(topic.topic_id, topic.name, topic.partitions)])]
    members = []
    for mid, parts in zip(mids, split_evenly(topic.partitions, len(mids))):
        m = ConsumerMember(mid, client_id=CLIENT_ID, client_host=CLIENT_HOST, subscribed_topic_names=(topic.name,),
                           rebalance_timeout_ms=REBALANCE_TIMEOUT_MS)
        out.append(R.member_metadata(group_id, m))
        members.append((m, parts))
    for m, parts in members:
        out.append(R.target_member(group_id, m.member_id, {topic.topic_id: parts} if len(parts) else {}))
    out.append(R.target_epoch(group_id, epoch))
    for m, parts in members:
        cur = m.with_(member_epoch=epoch, previous_member_epoch=0, state=MemberState.STABLE,
                      assigned={topic.topic_id: dict.fromkeys(parts, epoch)} if len(parts) else {})
        out.append(R.current_assignment(group_id, cur))
    return out


def converge_by_heartbeats(runtime: CoordinatorRuntime, group_id: str, topic: str, mids: list[str],
                           clock: Callable[[], int], max_rounds: int = 30) -> int:
    """Join every member through real heartbeats, then heartbeat round-robin (reporting what
    each was told to own) until the group is Stable. Returns the rounds it took."""
    for mid in mids:
        req = HeartbeatRequest(group_id, mid, 0, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                               subscribed_topic_names=(topic,), owned={}, client_id=CLIENT_ID, client_host=CLIENT_HOST)
        resp = runtime.run(group_id, lambda s, now, req=req: heartbeat(s, req, now), clock())
        if resp["error_code"]:
            raise RuntimeError(f"join failed: {resp}")
    group = runtime.shard_for(group_id).consumer_groups[group_id]
    for rnd in range(1, max_rounds + 1):
        for mid in mids:
            m = group.members[mid]
            owned = {t: frozenset(ps) for t, ps in m.assigned.items()}
            req = HeartbeatRequest(group_id, mid, m.member_epoch, owned=owned, client_id=CLIENT_ID,
                                   client_host=CLIENT_HOST)
            resp = runtime.run(group_id, lambda s, now, req=req: heartbeat(s, req, now), clock())
            if resp["error_code"]:
                raise RuntimeError(f"heartbeat failed: {resp}")
        if group.state is GroupState.STABLE:
            return rnd
    raise RuntimeError(f"group not Stable after {max_rounds} rounds: {group.state}")


def partial_request(mid: str, epoch: int) -> HeartbeatRequest:
    return HeartbeatRequest(GROUP, mid, epoch, client_id=CLIENT_ID, client_host=CLIENT_HOST, version=HB_VERSION)


def heartbeat_frame(mid: str, epoch: int, correlation_id: int) -> bytes:
    """A size-prefixed ConsumerGroupHeartbeat v1 request frame (as tests/wire.py builds them)."""
    cls = request_class(HB_KEY, HB_VERSION)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=HB_KEY, request_api_version=HB_VERSION,
                                              correlation_id=correlation_id, client_id=CLIENT_ID))
    entity_writer(cls)(out, build(cls, {
        "group_id": GROUP, "member_id": mid, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": None,
    }))
    return size_prefixed(out.getvalue())


def parse_heartbeat_response(data: bytes):
    """`data` without the size prefix -> (correlation id, kio response)."""
    cls = response_class(HB_KEY, HB_VERSION)
    header, off = entity_reader(cls.__header_schema__)(data, 0)
    body, _ = entity_reader(cls)(data, off)
    return header.correlation_id, body


# ConsumerGroupHeartbeat v1 response (flexible): correlation id i32, header tags (1 byte when
# empty), throttle i32, error code i16.
ERROR_CODE_AT = 4 + 1 + 4


# --------------------------------------------------------------------------
# Section 1: in-process
# --------------------------------------------------------------------------


def pure_runtime(n_members: int, partitions: int, converge: str) -> tuple[CoordinatorRuntime, list[str], dict]:
    topic = TopicMeta(uuid.UUID(int=0xB0B), TOPIC, partitions)
    image = MetadataImage({TOPIC: topic}, frozenset(), 1)
    config = CoordinatorConfig()
    written = {"records": 0}

    def writer(partition: int, records: list, now_ms: int) -> int:
        for r in records:  # the broker encodes every record it writes: so does this writer
            R.encode(r)
        written["records"] += len(records)
        return written["records"] - 1  # the last offset written (one count for all partitions: it only grows)

    runtime = CoordinatorRuntime(config, writer, image)
    mids = member_ids(n_members)
    gp = runtime.partition_for(GROUP)
    now = wall_clock_ms()
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    for p in range(config.offsets_topic_partitions):
        runtime.load(p, converged_records(GROUP, topic, mids) if (p == gp and converge == "replay") else [], now)
    if converge == "heartbeats":
        info["rounds"] = converge_by_heartbeats(runtime, GROUP, TOPIC, mids, wall_clock_ms)
    info["build_s"] = time.perf_counter() - t0
    info["written"] = written
    group = runtime.shard_for(GROUP).consumer_groups[GROUP]
    assert group.state is GroupState.STABLE, group.state
    assert len(group.members) == n_members
    return runtime, mids, info


def drive_coordinator(runtime: CoordinatorRuntime, reqs: list[HeartbeatRequest], count: int, max_s: float) -> tuple[int, float, int]:
    """`count` heartbeats round-robin through runtime.run, as the broker's handler calls it."""
    run, hb, clock, tick = runtime.run, heartbeat, wall_clock_ms, runtime.tick
    gid = GROUP
    n = len(reqs)
    errors = done = i = 0
    gc.collect()
    t0 = time.perf_counter()
    next_tick = t0 + TICK_S
    deadline = t0 + max_s
    while done < count:
        for _ in range(min(512, count - done)):
            req = reqs[i]
            i += 1
            if i == n:
                i = 0
            resp = run(gid, lambda shard, now, req=req: hb(shard, req, now), clock())
            if resp["error_code"]:
                errors += 1
        done += min(512, count - done)
        t = time.perf_counter()
        if t >= next_tick:
            tick(clock())
            next_tick = t + TICK_S
        if t >= deadline:
            break
    return done, time.perf_counter() - t0, errors


def seed_data_dir(data_dir: Path, n_members: int, partitions: int) -> dict:
    """A broker data dir holding topic TOPIC and a Stable group GROUP of n_members, written
    through the broker's own coordinator writer (the group is replayed at the next start)."""
    b = Broker(BrokerConfig(data_dir=data_dir, listen_port=0))
    try:
        topic = b.create_topic(TOPIC, partitions, {})
        meta = TopicMeta(topic.topic_id, TOPIC, partitions)
        recs = converged_records(GROUP, meta, member_ids(n_members))
        coord = b.coordinator
        part = coord.runtime.partition_for(GROUP)
        for k in range(0, len(recs), 1000):
            coord.runtime.writer(part, recs[k:k + 1000], b.clock())
        return {"records": len(recs), "partition": part}
    finally:
        b.close()


def drive_broker(loop: asyncio.AbstractEventLoop, broker: Broker, frames: list[bytes], count: int, max_s: float,
                 session: Any = None) -> tuple[int, float, int]:
    async def go() -> tuple[int, float, int]:
        handle, tick = broker.handle_frame, broker.coordinator_tick
        n = len(frames)
        errors = done = i = 0
        gc.collect()
        t0 = time.perf_counter()
        next_tick = t0 + TICK_S
        deadline = t0 + max_s
        while done < count:
            for _ in range(min(512, count - done)):
                resp = await handle(frames[i], CLIENT_HOST, session)
                i += 1
                if i == n:
                    i = 0
                if resp[4 + ERROR_CODE_AT] or resp[5 + ERROR_CODE_AT]:
                    errors += 1
            done += min(512, count - done)
            t = time.perf_counter()
            if t >= next_tick:
                tick()
                next_tick = t + TICK_S
            if t >= deadline:
                break
        return done, time.perf_counter() - t0, errors

    return loop.run_until_complete(go())


def time_loop(fn: Callable[[int], Any], n_items: int, count: int, max_s: float) -> tuple[int, float]:
    gc.collect()
    done = i = 0
    t0 = time.perf_counter()
    deadline = t0 + max_s
    while done < count:
        for _ in range(min(512, count - done)):
            fn(i)
            i += 1
            if i == n_items:
                i = 0
        done += min(512, count - done)
        if time.perf_counter() >= deadline:
            break
    return done, time.perf_counter() - t0


def section_inproc(args: argparse.Namespace) -> None:
    from odradek.broker.handlers.consumer_group import consumer_group_heartbeat

    print(f"\n== inproc: partial heartbeats (epoch = member epoch, nothing changed, owned=None), "
          f"round-robin over a Stable group, one shard; {args.heartbeats:,} heartbeats per run "
          f"(at most {args.max_seconds:g} s), median of {args.repeat} runs; group built by --converge {args.converge} ==",
          flush=True)
    rows = []
    notes = []
    for n in args.member_list:
        parts = n * args.partitions_per_member
        # --- the coordinator alone
        if args.converge == "heartbeats" and n > 3000:
            notes.append(f"{n:,} members: --converge heartbeats skipped (O(n^2) joins), built by replay")
        runtime, mids, info = pure_runtime(n, parts, args.converge if n <= 3000 else "replay")
        group = runtime.shard_for(GROUP).consumer_groups[GROUP]
        reqs = [partial_request(mid, group.members[mid].member_epoch) for mid in mids]
        before = info["written"]["records"]
        drive_coordinator(runtime, reqs, min(n, args.heartbeats), args.max_seconds)  # warm-up: every member once
        runs = [drive_coordinator(runtime, reqs, args.heartbeats, args.max_seconds) for _ in range(args.repeat)]
        extra = info["written"]["records"] - before
        errs = sum(r[2] for r in runs)
        rates = [d / s for d, s, _ in runs]
        med = statistics.median(rates)
        rows.append((f"{n:,}", f"{parts:,}", "coordinator", fmt_int(med), fmt_us(1e6 / med),
                     f"{min(rates):,.0f}-{max(rates):,.0f}", f"{sum(r[0] for r in runs):,}", str(errs), str(extra)))
        print(f"  [{n:,} members] group built in {info['build_s']:.2f} s"
              + (f" ({info['rounds']} heartbeat rounds to Stable)" if "rounds" in info else "")
              + f"; coordinator: {med:,.0f} heartbeats/s", flush=True)
        del runtime, reqs, group

        # --- the broker request path, in process
        work = Path(tempfile.mkdtemp(prefix="bench-coord-inproc-", dir=args.work_dir))
        loop = asyncio.new_event_loop()
        broker = None
        try:
            t0 = time.perf_counter()
            seeded = seed_data_dir(work / "data", n, parts)
            broker = Broker(BrokerConfig(data_dir=work / "data", listen_port=0))
            seed_s = time.perf_counter() - t0
            group = broker.coordinator.runtime.shard_for(GROUP).consumer_groups[GROUP]
            assert group.state is GroupState.STABLE and len(group.members) == n, (group.state, len(group.members))
            frames = [heartbeat_frame(mid, group.members[mid].member_epoch, k + 1)[4:] for k, mid in enumerate(mids)]
            # check the answers once, fully
            cid, body = parse_heartbeat_response(loop.run_until_complete(broker.handle_frame(frames[0], CLIENT_HOST))[4:])
            assert cid == 1 and int(body.error_code) == 0 and body.assignment is None, body
            written0 = broker.coordinator.runtime.records_written
            drive_broker(loop, broker, frames, min(n, args.heartbeats), args.max_seconds)  # warm-up
            runs = [drive_broker(loop, broker, frames, args.heartbeats, args.max_seconds) for _ in range(args.repeat)]
            extra = broker.coordinator.runtime.records_written - written0
            rates = [d / s for d, s, _ in runs]
            med = statistics.median(rates)
            rows.append((f"{n:,}", f"{parts:,}", "broker handle_frame", fmt_int(med), fmt_us(1e6 / med),
                         f"{min(rates):,.0f}-{max(rates):,.0f}", f"{sum(r[0] for r in runs):,}",
                         str(sum(r[2] for r in runs)), str(extra)))
            print(f"  [{n:,} members] broker seeded ({seeded['records']:,} records) and restarted in {seed_s:.1f} s; "
                  f"handle_frame: {med:,.0f} heartbeats/s", flush=True)

            # --- the broker path step by step (same frames)
            supported = broker.supported
            requests = [parse_request(f, supported) for f in frames]
            for r in requests:
                r.client_host = CLIENT_HOST
            payload = consumer_group_heartbeat(broker, requests[0])
            steps: list[tuple[str, Callable[[int], Any]]] = [
                ("  parse (kio read)", lambda i, f=frames, s=supported: parse_request(f[i], s)),
                ("  handler (incl. coordinator)",
                 lambda i, b=broker, r=requests: consumer_group_heartbeat(b, r[i])),
                ("  encode (build + kio write)",
                 lambda i, r=requests, p=payload: encode_response(r[i], p)),
            ]
            for name, fn in steps:
                res = [time_loop(fn, n, args.heartbeats, args.max_seconds) for _ in range(args.repeat)]
                rates = [d / s for d, s in res]
                med = statistics.median(rates)
                rows.append((f"{n:,}", f"{parts:,}", name, fmt_int(med), fmt_us(1e6 / med),
                             f"{min(rates):,.0f}-{max(rates):,.0f}", f"{sum(r[0] for r in res):,}", "-", "-"))
        finally:
            if broker is not None:
                broker.close()
            loop.close()
            shutil.rmtree(work, ignore_errors=True)
    print()
    table(("path", "members", "partitions", "heartbeats/s", "us/hb", "min-max", "heartbeats", "errors",
           "records written"), [(r[2], r[0], r[1], *r[3:]) for r in rows])
    print("  (goal for 'coordinator': >= 100,000/s. 'broker handle_frame' = kio parse + handler + coordinator + kio "
          "encode, no sockets; the indented rows time each step alone on the same requests, so they add up to "
          "about the handle_frame time. 'records written' must be 0: a steady heartbeat changes nothing)")
    for note in notes:
        print("  note: " + note)


# --------------------------------------------------------------------------
# Section 2: loopback
# --------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by broker")
        buf += chunk
    return bytes(buf)


def loopback_client(idx: int, port: int, frames: list[bytes], start_at: float, duration: float, max_count: int,
                    result_q: Any) -> None:
    """One connection, one request in flight: send a heartbeat, read its answer, next member."""
    res: dict[str, Any] = {"idx": idx, "ok": False}
    try:
        sock = socket.create_connection((LOOPBACK, port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        size = struct.Struct(">i")
        # warm-up (untimed): every member of this client once; the first answer parsed fully
        for k, f in enumerate(frames):
            sock.sendall(f)
            (n,) = size.unpack(_recv_exact(sock, 4))
            body = _recv_exact(sock, n)
            if k == 0:
                _cid, resp = parse_heartbeat_response(body)
                if int(resp.error_code) != 0 or resp.assignment is not None:
                    raise RuntimeError(f"unexpected answer: {resp}")
            if body[ERROR_CODE_AT] or body[ERROR_CODE_AT + 1]:
                code = int.from_bytes(body[ERROR_CODE_AT:ERROR_CODE_AT + 2], "big", signed=True)
                raise RuntimeError(f"heartbeat answered with error code {code}")
        lat = array.array("q")
        errors = done = i = 0
        nframes = len(frames)
        delay = start_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        c0 = time.process_time()
        t0 = time.monotonic()
        deadline = t0 + duration
        perf = time.perf_counter_ns
        sendall, recv = sock.sendall, sock.recv
        while done < max_count:
            f = frames[i]
            i += 1
            if i == nframes:
                i = 0
            s = perf()
            sendall(f)
            head = recv(4)
            if len(head) < 4:
                head += _recv_exact(sock, 4 - len(head))
            (n,) = size.unpack(head)
            body = recv(n)
            if len(body) < n:
                body += _recv_exact(sock, n - len(body))
            lat.append(perf() - s)
            if body[ERROR_CODE_AT] or body[ERROR_CODE_AT + 1]:
                errors += 1
            done += 1
            if not done & 63 and time.monotonic() >= deadline:
                break
        res.update(ok=True, done=done, errors=errors, seconds=time.monotonic() - t0, cpu_s=time.process_time() - c0,
                   lat=lat.tobytes())
        sock.close()
    except Exception as e:  # noqa: BLE001 - reported in the table
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        result_q.put(res)


def section_loopback(args: argparse.Namespace) -> None:
    n, clients = args.loopback_members, args.clients
    parts = n * args.partitions_per_member
    print(f"\n== loopback: {clients} client processes x {n // clients:,} members (group of {n:,}, topic of {parts:,} "
          f"partitions), one TCP connection each, request/response (1 in flight), ConsumerGroupHeartbeat v1 partial "
          f"heartbeats for {args.duration:g} s; broker = `python -m odradek broker` subprocess ==", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-coord-loopback-", dir=args.work_dir))
    broker = None
    procs: list[mp.Process] = []
    try:
        seed_data_dir(work / "data", n, parts)
        broker = BrokerProcess(work / "data", [], work / "broker.log", ("--log-level", "WARNING")).start()
        mids = member_ids(n)
        shares = [mids[k::clients] for k in range(clients)]
        ctx = mp.get_context("spawn")
        result_q = ctx.Queue()
        # epoch 1: the seeded group's epoch (see converged_records)
        start_at = time.monotonic() + 3.0 + 0.5 * clients  # spawn + import + warm-up before the common start
        for k, share in enumerate(shares):
            frames = [heartbeat_frame(mid, 1, j + 1) for j, mid in enumerate(share)]
            p = ctx.Process(target=loopback_client, name=f"bench-hb-{k}", daemon=True,
                            args=(k, broker.port, frames, start_at, args.duration, args.max_loopback, result_q))
            p.start()
            procs.append(p)
        wait = start_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        cpu0 = proc_cpu_s(broker.pid)
        results = []
        deadline = time.monotonic() + args.duration + 30
        while len(results) < clients and time.monotonic() < deadline:
            try:
                results.append(result_q.get(timeout=0.5))
            except queue.Empty:
                if all(not p.is_alive() for p in procs):
                    try:
                        while True:
                            results.append(result_q.get_nowait())
                    except queue.Empty:
                        break
        cpu1 = proc_cpu_s(broker.pid)
        failed = [r for r in results if not r.get("ok")]
        if failed or len(results) < clients:
            print(f"  FAILED: {len(results)}/{clients} clients reported; "
                  + "; ".join(r.get("error", "?") for r in failed))
            return
        total = sum(r["done"] for r in results)
        secs = max(r["seconds"] for r in results)
        lat = sorted(x for r in results for x in array.array("q", r["lat"]))
        pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] / 1000
        rows = [(f"client {r['idx']}", f"{len(shares[r['idx']]):,}", f"{r['done']:,}", fmt_int(r["done"] / r["seconds"]),
                 f"{r['seconds'] * 1e6 / r['done']:,.0f}", "", f"{100 * r['cpu_s'] / r['seconds']:.0f}%", str(r["errors"]))
                for r in sorted(results, key=lambda r: r["idx"])]
        broker_cpu = None if cpu0 is None or cpu1 is None else 100 * (cpu1 - cpu0) / secs
        rows.append(("total", f"{n:,}", f"{total:,}", fmt_int(total / secs),
                     f"p50 {pct(0.5):,.0f} / p99 {pct(0.99):,.0f}", f"{broker_cpu:.0f}%" if broker_cpu is not None else "-",
                     f"{100 * sum(r['cpu_s'] for r in results) / secs:.0f}%", str(sum(r["errors"] for r in results))))
        print()
        table(("", "members", "heartbeats", "heartbeats/s", "latency us", "broker CPU", "client CPU", "errors"), rows)
        print("  (latency = send to complete answer, per request; CPU in % of one core over the window; the 2-core "
              "machine is shared by the broker and the client processes)")
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        if broker is not None:
            rc = broker.stop()
            if rc not in (0, None):
                print(f"  note: broker exited with {rc}; log tail: {(work / 'broker.log').read_text()[-1000:]}")
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------
# Section 3: replay at start-up
# --------------------------------------------------------------------------


def replay_broker_config(data_dir: Path, args: argparse.Namespace) -> BrokerConfig:
    extra = {} if args.offsets_partitions is None else {"offsets.topic.num.partitions": str(args.offsets_partitions)}
    return BrokerConfig(data_dir=data_dir, listen_port=0, extra=extra)


def write_replay_data(data_dir: Path, args: argparse.Namespace) -> dict:
    b = Broker(replay_broker_config(data_dir, args))
    try:
        runtime = b.coordinator.runtime
        info: dict[str, Any] = {}
        # a consumer group of --replay-members members: real joins and heartbeats until Stable
        n = args.replay_members
        t0 = time.perf_counter()
        w0 = runtime.records_written
        if n:
            b.create_topic(TOPIC, n * args.partitions_per_member, {})
            info["rounds"] = converge_by_heartbeats(runtime, GROUP, TOPIC, member_ids(n), b.clock)
        info["group_records"] = runtime.records_written - w0
        info["group_s"] = time.perf_counter() - t0
        # offset commits: membership-free (admin-style) commits, --commit-partitions per request
        per = args.commit_partitions
        groups = [f"bench-offsets-{g}" for g in range(args.groups)]
        t0 = time.perf_counter()
        w0 = runtime.records_written
        calls = 0
        remaining = args.commits if args.replay_records is None else max(0, args.replay_records - info["group_records"])
        k = 0
        while remaining > 0:
            for gid in groups:
                if remaining <= 0:
                    break
                m = min(per, remaining)
                req = CommitRequest(gid, "", -1, None, ((f"t{k}", None, tuple(CommitPartition(p, 1000 + p) for p in range(m))),), 9)
                resp = runtime.run(gid, lambda s, now, req=req: commit(s, req, now), b.clock())
                if any(p["error_code"] for t in resp["topics"] for p in t["partitions"]):
                    raise RuntimeError(f"commit failed: {resp}")
                remaining -= m
                calls += 1
            k += 1
        info["commit_records"] = runtime.records_written - w0
        info["commit_calls"] = calls
        info["commit_s"] = time.perf_counter() - t0
        return info
    finally:
        b.close()


def replay_phases(b: Broker) -> list[tuple[str, float, int]]:
    """Time GroupCoordinator.load_all's two halves separately, without a profiler, on an
    open broker: (1) read every __consumer_offsets partition into stored (key, value)
    pairs with the coordinator's own reader, (2) replay the pairs into fresh shards (that
    are thrown away: nothing is written). Returns (step, ms, records)."""
    c = b.coordinator
    parts = range(c.config.offsets_topic_partitions)
    gc.collect()
    # Each half with the cyclic collector paused, as CoordinatorRuntime.on_election runs a load.
    t0 = time.perf_counter()
    with _collector_paused():
        pairs = {p: list(c.read_partition(p)) for p in parts}
    t1 = time.perf_counter()
    n = 0
    scratch = CoordinatorRuntime(c.config, discarding_writer(), c.runtime.image)  # its writes go nowhere
    now = wall_clock_ms()
    with _collector_paused():
        for p in parts:
            n += scratch.load_bytes(p, pairs[p], now).records_replayed
    t2 = time.perf_counter()
    reader = getattr(c.read_partition, "__qualname__", "read_partition")
    return [(f"read + split into (key, value) ({reader})", (t1 - t0) * 1000, n),
            ("replay into fresh shards, incl. take-over (CoordinatorRuntime.load_bytes)", (t2 - t1) * 1000, n)]


def section_replay(args: argparse.Namespace) -> None:
    commits = (f"{args.commits:,} offset commits" if args.replay_records is None
               else f"{args.replay_records:,} records in all, offset commits")
    where = "50 partitions (the default)" if args.offsets_partitions is None else f"{args.offsets_partitions} partition(s)"
    print(f"\n== replay: start-up load of __consumer_offsets ({where}): {commits} "
          f"({args.commit_partitions} per OffsetCommit, {args.groups:,} groups) + a consumer group of "
          f"{args.replay_members:,} members (real joins until Stable), {args.replay_repeat} fresh start-ups ==",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-coord-replay-", dir=args.work_dir))
    try:
        data = work / "data"
        info = write_replay_data(data, args)
        log_bytes = sum(f.stat().st_size for f in data.rglob("*.log") if "__consumer_offsets" in str(f))
        print(f"  written: group {info['group_records']:,} records in {info['group_s']:.1f} s"
              + (f" ({info['rounds']} heartbeat rounds to Stable)" if info.get("rounds") else "")
              + f"; commits {info['commit_records']:,} records in {info['commit_calls']:,} requests, "
              f"{info['commit_s']:.1f} s ({info['commit_records'] / info['commit_s']:,.0f} records/s); "
              f"__consumer_offsets logs {log_bytes / 1e6:,.1f} MB", flush=True)
        rows = []
        loads = []
        load_ms = []
        for r in range(args.replay_repeat):
            gc.collect()
            t0 = time.perf_counter()
            b = Broker(replay_broker_config(data, args))
            total_s = time.perf_counter() - t0
            try:
                c = b.coordinator
                offsets = sum(len(o) for s in c.runtime.shards.values() for o in s.offsets.values())
                grp = c.runtime.shard_for(GROUP).consumer_groups.get(GROUP) if args.replay_members else None
                state = f"{grp.state.value}, {len(grp.members):,} members" if grp else "-"
                rate = c.records_loaded / (c.load_time_ms / 1000) if c.load_time_ms else None
                loads.append(rate)
                load_ms.append(c.load_time_ms)
                rows.append((f"start {r + 1}", f"{c.records_loaded:,}", f"{c.load_time_ms:,.0f}", fmt_int(rate),
                             f"{total_s * 1000:,.0f}", f"{offsets:,}", state))
                if r == args.replay_repeat - 1:
                    phases = replay_phases(b)
                    largest = max(c.runtime.shards.values(), key=lambda s: s.records_replayed)
            finally:
                b.close()
        print()
        table(("", "records_loaded", "load_time ms", "records/s", "Broker() ms", "offsets", "group"), rows)
        good = [x for x in loads if x]
        if good:
            print(f"  median {statistics.median(good):,.0f} records/s (goal >= 500,000 records/s); "
                  "'Broker() ms' is the whole start-up (log opening + load_all)")
        print(f"  largest partition: __consumer_offsets-{largest.partition} with {largest.records_replayed:,} records "
              f"of {c.records_loaded:,}")
        # the load's steps timed one by one, without a profiler's distortion
        med_ms = statistics.median(load_ms)
        total_ms = sum(ms for _, ms, _ in phases)
        print(f"\n  load_all in two halves (each timed alone over the same {phases[0][2]:,} records, no profiler; "
              f"% of the median load_time):")
        prow = [(name, f"{ms:,.0f}", f"{100 * ms / med_ms:.0f}%", fmt_int(n / (ms / 1000)) if ms else "-")
                for name, ms, n in phases]
        prow.append(("sum of both", f"{total_ms:,.0f}", f"{100 * total_ms / med_ms:.0f}%",
                     fmt_int(phases[0][2] / (total_ms / 1000))))
        table(("step", "ms", "of load_time", "records/s if alone"), prow)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            b = Broker(replay_broker_config(data, args))
            prof.disable()
            b.close()
            for key, label in (("cumulative", "cumulative"), ("tottime", "internal (tottime)")):
                s = io.StringIO()
                st = pstats.Stats(prof, stream=s)
                st.strip_dirs().sort_stats(key).print_stats(args.profile_top)
                text = s.getvalue()
                start = text.find("   ncalls")
                print(f"\n  cProfile of one start-up (Broker(...)), top {args.profile_top} by {label}:")
                for line in text[start:].rstrip().splitlines():
                    print("    " + line)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def _classic_heartbeats(runtime, hbs, now: int, count: int, max_s: float) -> tuple[int, float]:
    from odradek.coordinator.classic.sync import heartbeat as classic_heartbeat

    done, errors = 0, 0
    start = time.perf_counter()
    deadline = start + max_s
    while done < count and time.perf_counter() < deadline:
        for h in hbs[: count - done]:
            errors += runtime.run(GROUP, lambda shard, t, h=h: classic_heartbeat(shard, h, t), now)["error_code"] != 0
        done += min(len(hbs), count - done)
    assert errors == 0
    return done, time.perf_counter() - start


def section_classic(args: argparse.Namespace) -> None:
    from odradek.coordinator.classic.join import JoinRequest, join
    from odradek.coordinator.classic.sync import ClassicHeartbeat, SyncRequest, sync

    print(f"\n== classic: a group forms (JoinGroup v3 x n, SyncGroup x n), then classic Heartbeats "
          f"round-robin over the Stable group; one shard, in process; {args.heartbeats:,} heartbeats per run "
          f"(at most {args.max_seconds:g} s), median of {args.repeat} runs ==", flush=True)
    rows = []
    for n in args.member_list:
        written = [0]

        def count_records(_p, recs, _now, written=written):
            written[0] += len(recs)
            return written[0] - 1  # the last offset written

        config = CoordinatorConfig(offsets_topic_partitions=1, initial_rebalance_delay_ms=3_000)
        runtime = CoordinatorRuntime(config, count_records)
        runtime.load(0, [], 0)
        now = 1_000
        meta = struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + b"topic" + struct.pack(">i", -1)  # subscription v0
        boxes: list[list] = []
        t0 = time.perf_counter()
        for i in range(n):
            box: list = []
            req = JoinRequest(GROUP, "", 45_000, 300_000, "consumer", (("range", meta),), None, f"c{i}", "/127.0.0.1",
                              None, 3)
            runtime.run(GROUP, lambda shard, t, req=req, box=box: join(shard, req, box.append, t), now)
            boxes.append(box)
        t_join = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(10):  # the initial delay, extended once for the members that arrived during it
            if all(boxes):
                break
            now += 3_000
            runtime.tick(now)
        t_complete = time.perf_counter() - t0
        assert all(boxes), "the join phase did not complete"
        leader = boxes[0][0]["leader"]
        gen = boxes[0][0]["generation_id"]
        mids = [b[0]["member_id"] for b in boxes]
        assignment = struct.pack(">hi", 0, 0) + struct.pack(">i", -1)
        t0 = time.perf_counter()
        synced: list = []
        for mid in mids:
            if mid != leader:
                req = SyncRequest(GROUP, mid, gen)
                runtime.run(GROUP, lambda shard, t, req=req, out=synced: sync(shard, req, out.append, t), now)
        req = SyncRequest(GROUP, leader, gen, assignments=tuple((m, assignment) for m in mids))
        runtime.run(GROUP, lambda shard, t, req=req, out=synced: sync(shard, req, out.append, t), now)
        t_sync = time.perf_counter() - t0
        assert len(synced) == n and all(r["error_code"] == 0 for r in synced)
        hbs = [ClassicHeartbeat(GROUP, mid, gen) for mid in mids]

        one_run = _classic_heartbeats
        one_run(runtime, hbs, now, min(n, args.heartbeats), args.max_seconds)
        rates = [d / s for d, s in (one_run(runtime, hbs, now, args.heartbeats, args.max_seconds)
                                    for _ in range(args.repeat))]
        med = statistics.median(rates)
        rows.append((f"{n:,}", f"{t_join * 1000:,.0f}", f"{t_complete * 1000:,.0f}", f"{t_sync * 1000:,.0f}",
                     f"{(t_join + t_complete + t_sync) * 1e6 / n:,.1f}", fmt_int(med), fmt_us(1e6 / med), str(written[0])))
    table(("members", "joins ms", "complete ms", "syncs ms", "µs/member", "heartbeats/s", "µs/hb", "records"), rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="KIP-848 group coordinator: heartbeat rate and start-up replay speed.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="inproc,loopback,replay,classic",
                    help="comma list of: inproc, loopback, replay, classic")
    ap.add_argument("--members", default="1000,10000", help="inproc: group sizes (comma list)")
    ap.add_argument("--partitions-per-member", type=int, default=1, help="topic partitions per group member")
    ap.add_argument("--heartbeats", type=int, default=200_000, help="inproc: heartbeats per timed run")
    ap.add_argument("--max-seconds", type=float, default=2.0, help="inproc: time limit per timed run")
    ap.add_argument("--repeat", type=int, default=3, help="inproc: timed runs per path (median shown)")
    ap.add_argument("--converge", choices=("replay", "heartbeats"), default="replay",
                    help="inproc, 'coordinator' row: build the Stable group from its records, or through real joins "
                         "(<= 3,000 members)")
    ap.add_argument("--loopback-members", type=int, default=1000, help="loopback: group size")
    ap.add_argument("--clients", type=int, default=4, help="loopback: client processes (one connection each)")
    ap.add_argument("--duration", type=float, default=10.0, help="loopback: seconds of heartbeating")
    ap.add_argument("--max-loopback", type=int, default=2_000_000, help="loopback: heartbeat cap per client")
    ap.add_argument("--commits", type=int, default=500_000, help="replay: offset-commit records")
    ap.add_argument("--replay-records", type=int, default=None,
                    help="replay: records in all (the group's, then commits up to this); overrides --commits")
    ap.add_argument("--offsets-partitions", type=int, default=None,
                    help="replay: offsets.topic.num.partitions [None = the broker's default, 50]")
    ap.add_argument("--commit-partitions", type=int, default=10, help="replay: partitions per OffsetCommit")
    ap.add_argument("--groups", type=int, default=1000, help="replay: groups the commits are spread over")
    ap.add_argument("--replay-members", type=int, default=1000, help="replay: members of the consumer group (0: none)")
    ap.add_argument("--replay-repeat", type=int, default=3, help="replay: fresh start-ups timed")
    ap.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                    help="replay: cProfile one more start-up")
    ap.add_argument("--profile-top", type=int, default=15, help="replay: functions shown per cProfile listing")
    ap.add_argument("--work-dir", help="parent of the temp data dirs [None = the system temp dir]")
    args = ap.parse_args(argv)
    args.section_list = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = set(args.section_list) - {"inproc", "loopback", "replay", "classic"}
    if bad:
        ap.error(f"unknown section(s) {sorted(bad)}")
    args.member_list = [int(x.replace("_", "")) for x in args.members.split(",") if x.strip()]
    for name in ("heartbeats", "repeat", "clients", "replay_repeat", "partitions_per_member", "commit_partitions", "groups"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("replay_records", "offsets_partitions"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if any(m < 1 for m in args.member_list) or args.loopback_members < args.clients:
        ap.error("--members must be >= 1 and --loopback-members >= --clients")
    if max(args.member_list + [args.loopback_members]) * args.partitions_per_member > 10_000 and (
            "loopback" in args.section_list or "inproc" in args.section_list):
        ap.error("members x --partitions-per-member must be <= 10,000 (the broker's partitions-per-topic limit)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("== machine ==")
    print("  " + machine_line())
    interrupt_on_sigterm()
    t0 = time.monotonic()
    try:
        for name in args.section_list:
            {"inproc": section_inproc, "loopback": section_loopback, "replay": section_replay,
             "classic": section_classic}[name](args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 1
    print(f"\ntotal bench time {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
