#!/usr/bin/env python3
"""Security benchmark: what SASL_SSL costs on the data path, what the authorizer costs on the heartbeat path.

This is a benchmark script, not a test. It has two sections (``--sections``):

``throughput``  ONE ``odradek broker`` subprocess with two listeners at once,
            ``PLAINTEXT://127.0.0.1:0`` and ``SASL_SSL://127.0.0.1:<free port>``
            (SCRAM-SHA-256; a certificate for localhost/127.0.0.1 issued by a
            throw-away CA, ``odradek.security.certs``). A SCRAM user is created over
            PLAINTEXT with librdkafka's AdminClient (AlterUserScramCredentials, 4096
            iterations). Then, ``--rounds`` times, for each listener (which one goes
            first alternates between rounds, so load drift hits both alike), on a fresh
            topic of ``--partitions`` partitions:
              * PRODUCE: ``--producers`` processes (librdkafka via confluent-kafka,
                linger.ms=5, acks=1, librdkafka's default batch.size and
                batch.num.messages, no compression) send ``--records`` records of
                ``--size`` bytes, timed from the first ``produce()`` to ``flush()``
                returning;
              * the per-partition counts are checked through ListOffsets (over PLAINTEXT);
              * CONSUME: ``--consumers`` processes, each *assigned* its share of the
                partitions from the beginning (no group protocol), read until they have
                every record, timed from ``assign()`` to the last record.
            Every client connection is open and authenticated BEFORE its phase is timed:
            librdkafka drops its bootstrap connection once it has the metadata and opens
            a new one to the broker it learned, so each worker first produces (or
            consumes) one record of a separate warm-up topic through that connection.
            The TLS + SCRAM handshake itself is timed apart: ``--connects`` fresh
            producers per listener and round, each to its first metadata answer.
            The table shows records/s and MB/s (10^6 value bytes/s), medians over the
            rounds; broker and client CPU per record, totals over the rounds (the
            steadiest figures: the clients share the two cores with the broker); and the
            SASL_SSL/PLAINTEXT ratios.
``heartbeat``  The cost of authorization on the ConsumerGroupHeartbeat path, in this
            process (no sockets): ``Broker.handle_frame`` of an in-process broker (temp
            data dir) with a pre-encoded ConsumerGroupHeartbeat v1 frame for ONE member
            of ONE group (joined and Stable before timing), and a session whose principal
            is fixed (``Session("SASL_PLAINTEXT", Authenticator(None, principal="User:bench"))``,
            as a SASL listener fixes it), ``--heartbeats`` requests per run:
              * ``partial``: what a stable KIP-848 member sends (epoch current, every
                other field null): the handler asks READ on the group;
              * ``full``: the same with subscribed_topic_names and the owned partitions
                repeated: READ on the group and DESCRIBE on the topic;
            each with no authorizer (``broker.authorizer = None``: every request allowed)
            and with one (``Authorizer(super_users=set())``, principal granted READ on
            the group and DESCRIBE on the topic through the cluster metadata's ACLs, next
            to ``--unrelated-acls`` unrelated literal ACLs on other groups and as many on
            other topics). The four cases alternate within each of ``--hb-rounds`` rounds;
            the table shows the median us per heartbeat and the difference the authorizer
            makes. Then ``timeit`` of one ``Access.group(READ, group)`` decision (and one
            ``Access.topic(DESCRIBE, topic)``) with and without the unrelated ACLs, and the
            one-off cost of rebuilding the authorizer's bindings after an ACL change.

Every loop is bounded in count and in time; all traffic stays on 127.0.0.1.

Run:  .venv/bin/python bench/security.py [--quick] [--records 200000] [--sections throughput,heartbeat]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (  # isort: skip - puts src/ on sys.path
    ROOT,
    BrokerProcess,
    librdkafka_produce_loop,
    remove_work,
    require_positive,
    run_sections,
    stop_broker,
    table,
)
from throughput import (
    _values,
    create_topic,
    plan_partition_counts,
    run_phase,
    split,
    watermarks,
)

# Keep the module's top level light: the workers are spawned and re-import it.

LISTENERS = ("PLAINTEXT", "SASL_SSL")
USER, PASSWORD, MECHANISM = "bench", "bench-pw", "SCRAM-SHA-256"
WARM_TOPIC = "sec-warm-up"
GROUP, TOPIC, PRINCIPAL = "bench-group", "bench-topic", "User:bench"
HB_KEY, HB_VERSION = 68, 1


def median(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio_of(xs: list[float | None], denominator: float) -> float | None:
    """sum(xs) / denominator, None when there is nothing to sum."""
    xs = [x for x in xs if x is not None]
    return sum(xs) / denominator if xs and denominator else None


def fmt(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


# --------------------------------------------------------------------------
# Section 1: throughput, PLAINTEXT vs SASL_SSL on one broker
# --------------------------------------------------------------------------


def producer_worker(idx: int, conf: dict, topic: str, n: int, size: int, partitions: int, timeout: float,
                    start_evt: Any, ready_q: Any, result_q: Any) -> None:
    """throughput.py's producer, plus a warm-up record to WARM_TOPIC (flushed before the
    start signal) so the connection to the broker is open and authenticated before timing.
    Record i goes to partition (idx + i) % partitions (see plan_partition_counts)."""
    res: dict[str, Any] = {"kind": "producer", "idx": idx, "ok": False, "records": n}
    try:
        from confluent_kafka import Producer

        errors: list[str] = []
        client_errors: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:  # delivery.report.only.error: failures only
            if err is not None:
                errors.append(str(err))

        p = Producer({**conf, "on_delivery": on_delivery,
                      "error_cb": lambda e: client_errors.append(str(e)) if len(client_errors) < 20 else None})
        values = _values(size, idx)
        p.produce(WARM_TOPIC, b"warm-up")
        if p.flush(min(30.0, timeout)) or errors:
            res["error"] = f"warm-up record not delivered: {errors[:1] or 'timeout'} {client_errors[:3]}"
            return
        p.list_topics(topic, timeout=min(30.0, timeout))  # the topic's leader known before timing
        ready_q.put(idx)
        if not start_evt.wait(timeout):
            res["error"] = "start signal never came"
            return
        deadline = time.monotonic() + timeout
        c0 = time.process_time()  # all threads of this process, librdkafka's included
        t0 = time.monotonic()
        sent, timed_out = librdkafka_produce_loop(p, topic, values, n, lambda i: (idx + i) % partitions, deadline)
        remaining = p.flush(max(0.0, deadline - time.monotonic())) if not timed_out else p.flush(0)
        t1 = time.monotonic()
        res.update(t0=t0, t1=t1, cpu_s=time.process_time() - c0, sent=sent, unflushed=remaining,
                   client_errors=client_errors[:5])
        if timed_out or remaining:
            res.update(error=f"timeout: sent {sent}/{n}, {remaining} still unacknowledged", timeout=True)
        elif errors:
            res["error"] = f"{len(errors)} delivery errors, first: {errors[0]}"
        else:
            res["ok"] = True
    except Exception as e:  # noqa: BLE001 - reported in the table
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        result_q.put(res)


def consumer_worker(idx: int, conf: dict, topic: str, assignment: list[tuple[int, int, int]], size: int,
                    timeout: float, start_evt: Any, ready_q: Any, result_q: Any) -> None:
    """throughput.py's consumer (assign from `lo`, read to `hi`), after reading WARM_TOPIC's
    first record through the same connection, untimed."""
    want = sum(hi - lo for _, lo, hi in assignment)
    res: dict[str, Any] = {"kind": "consumer", "idx": idx, "ok": False, "records": want}
    try:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        client_errors: list[str] = []
        c = Consumer({**conf, "error_cb": lambda e: client_errors.append(str(e)) if len(client_errors) < 20 else None})
        c.assign([TopicPartition(WARM_TOPIC, 0, OFFSET_BEGINNING)])
        warm_deadline = time.monotonic() + min(30.0, timeout)
        warmed = False
        while not warmed and time.monotonic() < warm_deadline:
            warmed = any(m.error() is None for m in c.consume(num_messages=1, timeout=0.25))
        c.unassign()
        if not warmed:
            res["error"] = f"warm-up record not read: {client_errors[:3]}"
            return
        # Without the topic's metadata in hand, assign() below waits ~0.5 s for it (seen
        # with librdkafka 2.16): fetch it now, untimed, as throughput.py does.
        c.list_topics(topic, timeout=min(30.0, timeout))
        ready_q.put(idx)
        if not start_evt.wait(timeout):
            res["error"] = "start signal never came"
            return
        deadline = time.monotonic() + timeout
        got = msg_errors = bad_sizes = 0
        consume = c.consume
        c0 = time.process_time()
        t0 = t_last = time.monotonic()
        c.assign([TopicPartition(topic, p, lo) for p, lo, _ in assignment])
        while got < want and time.monotonic() < deadline:
            msgs = consume(num_messages=min(10_000, want - got), timeout=0.25)  # never more than is left
            if not msgs:
                continue
            n = len(msgs)
            for m in msgs:
                if m.error() is not None:
                    msg_errors += 1
                    n -= 1
            if n and len(msgs[-1].value() or b"") != size:
                bad_sizes += 1
            got += n
            t_last = time.monotonic()
        cpu_s = time.process_time() - c0
        positions = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p, _, _ in assignment])}
        c.close()
        mismatched = {p: (positions.get(p), hi) for p, _, hi in assignment if positions.get(p) != hi}
        res.update(t0=t0, t1=t_last, cpu_s=cpu_s, got=got, client_errors=client_errors[:5])
        if got < want:
            res.update(error=f"timeout: consumed {got}/{want}", timeout=True)
        elif got > want or mismatched or msg_errors or bad_sizes:
            res["error"] = (f"consumed {got}/{want}, {msg_errors} message errors, {bad_sizes} wrong sizes, "
                            f"positions off: {mismatched}")
        else:
            res["ok"] = True
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        result_q.put(res)


class SecuredBroker:
    """One `odradek broker` with a PLAINTEXT and a SASL_SSL (SCRAM-SHA-256) listener, and
    the client settings for each."""

    def __init__(self, work: Path) -> None:
        from odradek.cluster.etcd_process import free_port
        from odradek.security.certs import CertificateAuthority

        self.work = work
        ca = CertificateAuthority("CN=odradek bench CA")
        self.ca_path = work / "ca.pem"
        self.ca_path.write_bytes(ca.cert_pem)
        _, keystore = ca.issue("CN=localhost", ["localhost", "127.0.0.1"]).write(work, "broker")
        self.sasl_port = free_port()
        props = [f"listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:{self.sasl_port}",
                 f"ssl.keystore.location={keystore}", f"sasl.enabled.mechanisms={MECHANISM}"]
        self.proc = BrokerProcess(work / "data", [a for p in props for a in ("-o", p)], work / "broker.log",
                                  ("--log-level", "WARNING"))

    def start(self) -> SecuredBroker:
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        self.proc.start()
        admin = AdminClient({"bootstrap.servers": self.proc.bootstrap, "log_level": 0})
        upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              PASSWORD.encode())
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(30)
        return self

    def conf(self, listener: str) -> dict:
        if listener == "PLAINTEXT":
            return {"bootstrap.servers": self.proc.bootstrap}
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_port}", "security.protocol": "SASL_SSL",
                "sasl.mechanisms": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD,
                "ssl.ca.location": str(self.ca_path)}


def producer_conf(base: dict, timeout: float) -> dict:
    return {**base, "acks": 1, "linger.ms": 5, "compression.type": "none", "enable.idempotence": False,
            "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 1_048_576,
            "delivery.report.only.error": True, "socket.nagle.disable": True,
            "message.timeout.ms": int(timeout * 1000), "log_level": 3}


def consumer_conf(base: dict) -> dict:
    # as bench/throughput.py: assign() only, no commits; its fetch settings
    return {**base, "group.id": f"bench-sec-{os.getpid()}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": False, "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 10, "queued.min.messages": 200_000, "socket.nagle.disable": True,
            "log_level": 3}


def connect_ms(conf: dict, count: int, timeout: float) -> list[float]:
    """Milliseconds from a new Producer to its first metadata answer (TCP, TLS and SASL
    handshakes, ApiVersions, Metadata), `count` fresh producers one after the other."""
    from confluent_kafka import Producer

    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        p = Producer({**conf, "log_level": 0})
        p.list_topics(WARM_TOPIC, timeout=timeout)
        out.append(1e3 * (time.perf_counter() - t0))
        del p
    return out


def run_listener(ctx: Any, sb: SecuredBroker, listener: str, rnd: int, args: argparse.Namespace) -> dict:
    bootstrap = sb.proc.bootstrap
    topic = f"sec-{listener.lower()}-{rnd}"
    out: dict[str, Any] = {"listener": listener, "round": rnd, "ok": False}
    _, parts = create_topic(bootstrap, topic, args.partitions, 30.0)
    before = watermarks(bootstrap, topic, parts, 10.0)
    per_producer = [n for n in split(args.records, args.producers) if n > 0]
    plan = plan_partition_counts(per_producer, parts)
    pconf = producer_conf(sb.conf(listener), args.phase_timeout)
    jobs = [(pconf, topic, n, args.size, parts) for n in per_producer]
    prod = run_phase(ctx, sb.proc, "produce", jobs, producer_worker, args.phase_timeout, args.size, args.records)
    out["produce"] = prod
    if prod.status != "ok":
        out["error"] = f"produce: {prod.status}: {prod.error}"
        return out
    after = watermarks(bootstrap, topic, parts, 10.0)
    got = {p: after[p][1] - before[p][1] for p in plan}
    if got != plan:
        out["error"] = f"after produce the partitions hold {got}, expected {plan}"
        return out
    n_cons = max(1, min(args.consumers, parts))
    assign: list[list[tuple[int, int, int]]] = [[] for _ in range(n_cons)]
    for p in sorted(plan):
        assign[p % n_cons].append((p, before[p][1], after[p][1]))
    cconf = consumer_conf(sb.conf(listener))
    cons = run_phase(ctx, sb.proc, "consume", [(cconf, topic, a, args.size) for a in assign], consumer_worker,
                     args.phase_timeout, args.size, args.records)
    out["consume"] = cons
    if cons.status != "ok":
        out["error"] = f"consume: {cons.status}: {cons.error}"
        return out
    out["ok"] = True
    return out


def section_throughput(args: argparse.Namespace, summary: dict) -> bool:
    print(f"\n== throughput: one broker, PLAINTEXT and SASL_SSL ({MECHANISM}) listeners; {args.records:,} records "
          f"x {args.size} B per phase, topic of {args.partitions} partitions (a fresh one per run), "
          f"{args.producers} producer / {args.consumers} consumer process(es), librdkafka linger.ms=5 acks=1; "
          f"{args.rounds} round(s), the listeners alternating ==", flush=True)
    ctx = mp.get_context("spawn")  # never fork a process that has librdkafka threads
    work = Path(tempfile.mkdtemp(prefix="bench-security-", dir=args.work_dir))
    sb = SecuredBroker(work)
    runs: list[dict] = []
    connects: dict[str, list[float]] = {lst: [] for lst in LISTENERS}
    ok = True
    try:
        sb.start()
        print(f"  broker pid {sb.proc.pid}: PLAINTEXT {sb.proc.bootstrap}, SASL_SSL 127.0.0.1:{sb.sasl_port}; "
              f"SCRAM user {USER!r} created", flush=True)
        create_topic(sb.proc.bootstrap, WARM_TOPIC, 1, 30.0)
        for rnd in range(args.rounds):
            order = LISTENERS if rnd % 2 == 0 else LISTENERS[::-1]
            for lst in order:
                connects[lst] += connect_ms(sb.conf(lst), args.connects, 10.0)
            for lst in order:
                r = run_listener(ctx, sb, lst, rnd, args)
                runs.append(r)
                if r["ok"]:
                    p, c = r["produce"], r["consume"]
                    print(f"  round {rnd + 1} {lst:9s}: produce {p.seconds:.2f}s ({p.rec_s:,.0f} rec/s, broker CPU "
                          f"{p.broker_cpu_s:.2f}s), consume {c.seconds:.2f}s ({c.rec_s:,.0f} rec/s, broker CPU "
                          f"{c.broker_cpu_s:.2f}s)", flush=True)
                else:
                    ok = False
                    print(f"  round {rnd + 1} {lst}: FAILED {r.get('error', '')[:600]}", flush=True)
                if not sb.proc.alive():
                    raise RuntimeError(f"broker exited (rc={sb.proc.proc.returncode}): {sb.proc.log_tail()}")
    finally:
        ok = stop_broker(sb.proc) and ok
        remove_work(work, args.keep)

    rows = []
    res: dict[str, dict] = {}
    short = False
    for lst in LISTENERS:
        mine = [r for r in runs if r["listener"] == lst and r["ok"]]
        d: dict[str, Any] = {"runs_ok": len(mine), "connect_ms": median(connects[lst]),
                             "connect_ms_min": min(connects[lst], default=None), "connect_ms_all": connects[lst]}
        for ph in ("produce", "consume"):
            d[ph] = {"rec_s": median([r[ph].rec_s for r in mine]), "mb_s": median([r[ph].mb_s for r in mine]),
                     "rec_s_all": [r[ph].rec_s for r in mine],
                     # CPU figures: totals over the rounds (the broker's is counted in 10 ms clock
                     # ticks, too coarse for one phase of a few tenths of a second)
                     "broker_us_rec": ratio_of([r[ph].broker_cpu_s for r in mine], 1e-6 * args.records * len(mine)),
                     "broker_cpu_pct": ratio_of([r[ph].broker_cpu_s for r in mine], 0.01 * sum(r[ph].seconds for r in mine)),
                     "client_us_rec": ratio_of([r[ph].client_cpu_s for r in mine], 1e-6 * args.records * len(mine))}
        for ph in ("produce", "consume"):
            if sum(r[ph].seconds for r in mine) < 0.5:  # a few clock ticks: no figure
                d[ph]["broker_us_rec"] = d[ph]["broker_cpu_pct"] = None
                short = True
        res[lst] = d
    for ph in ("produce", "consume"):
        for lst in LISTENERS:
            d = res[lst][ph]
            spread = d["rec_s_all"]
            rows.append((ph, lst, fmt(d["rec_s"]), fmt(d["mb_s"], ",.1f"),
                         f"{min(spread):,.0f}-{max(spread):,.0f}" if spread else "-",
                         fmt(d["broker_us_rec"], ".2f"), fmt(d["broker_cpu_pct"], ".0f") + ("%" if d["broker_cpu_pct"] is not None else ""),
                         fmt(d["client_us_rec"], ".2f")))
    print()
    table(("phase", "listener", "rec/s", "MB/s", "rec/s min-max", "broker us/rec", "broker CPU", "client us/rec"),
          rows, left=2)

    def ratio(ph: str, key: str) -> float | None:
        a, b = res["SASL_SSL"][ph][key], res["PLAINTEXT"][ph][key]
        return a / b if a and b else None

    ratios = {ph: {"rec_s": ratio(ph, "rec_s"), "broker_us_rec": ratio(ph, "broker_us_rec")}
              for ph in ("produce", "consume")}
    print(f"  SASL_SSL/PLAINTEXT throughput: produce {fmt(ratios['produce']['rec_s'], '.2f')}x, "
          f"consume {fmt(ratios['consume']['rec_s'], '.2f')}x; broker CPU per record: produce "
          f"{fmt(ratios['produce']['broker_us_rec'], '.2f')}x, consume {fmt(ratios['consume']['broker_us_rec'], '.2f')}x")
    print(f"  new producer to its first metadata answer, {len(connects['PLAINTEXT'])} per listener, min / median: "
          f"PLAINTEXT {fmt(res['PLAINTEXT']['connect_ms_min'], '.1f')} / {fmt(res['PLAINTEXT']['connect_ms'], '.1f')} ms, "
          f"SASL_SSL (TLS + SCRAM-SHA-256, 4096 iterations) {fmt(res['SASL_SSL']['connect_ms_min'], '.1f')} / "
          f"{fmt(res['SASL_SSL']['connect_ms'], '.1f')} ms (librdkafka adds ~50 ms to some of them on either "
          "listener, hence the min); not part of the timed phases")
    print("  (rec/s and MB/s: medians over the rounds; MB = 10^6 bytes of record value; broker / client us/rec: "
          "CPU time per record of the broker process / of the client processes (all threads), and broker CPU: "
          "% of one core while the phase ran, both totalled over the rounds)")
    if short:
        print("  (broker CPU '-': the phases lasted under 0.5 s in all, a few of the kernel's 10 ms ticks)")
    summary["throughput"] = {"listeners": res, "ratios": ratios,
                             "runs": [{k: (v.__dict__ if hasattr(v, "__dict__") else v) for k, v in r.items()}
                                      for r in runs]}
    return ok and all(r["ok"] for r in runs) and len(runs) == 2 * args.rounds


# --------------------------------------------------------------------------
# Section 2: the authorizer on the heartbeat path, in process
# --------------------------------------------------------------------------


def unrelated_acls(n: int) -> list:
    """n literal ACLs on other groups and n on other topics, each for another principal."""
    from odradek.security.acl import (
        AclBinding,
        Operation,
        PatternType,
        Permission,
        ResourceType,
    )

    out = []
    for i in range(n):
        out.append(AclBinding(ResourceType.GROUP, f"other-group-{i}", PatternType.LITERAL, f"User:app-{i}", "*",
                              Operation.READ, Permission.ALLOW))
        out.append(AclBinding(ResourceType.TOPIC, f"other-topic-{i}", PatternType.LITERAL, f"User:app-{i}", "*",
                              Operation.DESCRIBE, Permission.ALLOW))
    return out


def grants() -> list:
    from odradek.security.acl import (
        AclBinding,
        Operation,
        PatternType,
        Permission,
        ResourceType,
    )

    return [AclBinding(ResourceType.GROUP, GROUP, PatternType.LITERAL, PRINCIPAL, "*", Operation.READ,
                       Permission.ALLOW),
            AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, PRINCIPAL, "*", Operation.DESCRIBE,
                       Permission.ALLOW)]


def store_acls(broker: Any, bindings: list) -> None:
    """Put `bindings` in the cluster metadata, as CreateAcls does (tests/broker/test_authorization.py grant)."""
    from odradek.broker.broker import run_now
    from odradek.security.acl import entry_key, pattern_key

    changes: dict[str, dict[str, str]] = {}
    for b in bindings:
        changes.setdefault(pattern_key(b), dict(broker.metadata.acls.get(pattern_key(b), {})))[entry_key(b)] = "1"
    run_now(broker.metadata.set_configs(acls=changes))


def section_heartbeat(args: argparse.Namespace, summary: dict) -> bool:
    import asyncio
    import timeit
    import uuid

    sys.path.insert(0, str(ROOT))  # tests/wire.py builds the frames
    from odradek.broker.broker import Broker
    from odradek.config import BrokerConfig
    from odradek.security.acl import Access, Authorizer, Operation, bindings_from_store
    from odradek.security.authentication import Authenticator, Session
    from coordinator import CLIENT_HOST, drive_broker  # bench/coordinator.py: its timed heartbeat loop
    from tests.wire import parse_response, request_frame

    n_unrel = args.unrelated_acls
    print(f"\n== heartbeat: Broker.handle_frame in process, ConsumerGroupHeartbeat v{HB_VERSION} of one member of one "
          f"Stable group, session principal {PRINCIPAL}; {args.heartbeats:,} heartbeats per run (at most "
          f"{args.max_seconds:g} s), {args.hb_rounds} round(s), cases alternating; authorizer: READ on the group and "
          f"DESCRIBE on the topic granted, plus {n_unrel:,} unrelated ACLs on groups and {n_unrel:,} on topics ==",
          flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-security-hb-", dir=args.work_dir))
    loop = asyncio.new_event_loop()
    broker = None
    ok = True
    try:
        broker = Broker(BrokerConfig(data_dir=work / "data", listen_port=0))
        broker.create_topic(TOPIC, 1, {})
        session = Session("SASL_PLAINTEXT", Authenticator(None, principal=PRINCIPAL))
        mid = str(uuid.UUID(int=0xB0B5EC))

        def frame(epoch: int, topics: list[str] | None, owned: list[dict] | None, rebalance_timeout: int = -1
                  ) -> bytes:
            body = {"group_id": GROUP, "member_id": mid, "member_epoch": epoch, "instance_id": None,
                    "rack_id": None, "rebalance_timeout": rebalance_timeout, "subscribed_topic_names": topics,
                    "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": owned}
            return request_frame(HB_KEY, HB_VERSION, body, correlation_id=7, client_id="bench")[4:]

        def call(f: bytes):
            return parse_response(HB_KEY, HB_VERSION, loop.run_until_complete(
                asyncio.wait_for(broker.handle_frame(f, CLIENT_HOST, session), 10)))[1]

        # join, then report the assignment until the group is Stable (bounded)
        resp = call(frame(0, [TOPIC], [], 300_000))
        owned: list[dict] = []
        for _ in range(10):
            if int(resp.error_code):
                raise RuntimeError(f"heartbeat refused while joining: {resp}")
            if resp.assignment is not None:
                owned = [{"topic_id": t.topic_id, "partitions": list(t.partitions)}
                         for t in resp.assignment.topic_partitions]
            resp = call(frame(resp.member_epoch, None, owned))
            group = broker.coordinator.runtime.shard_for(GROUP).consumer_groups[GROUP]
            if group.state.name == "STABLE" and resp.assignment is None:
                break
        else:
            raise RuntimeError(f"group not Stable after 10 heartbeats: {group.state}")
        epoch = resp.member_epoch
        frames = {"partial": frame(epoch, None, None), "full": frame(epoch, [TOPIC], owned)}

        authorizer = Authorizer(super_users=set())
        store_acls(broker, grants() + unrelated_acls(n_unrel))
        cases = [(kind, auth) for kind in ("partial", "full") for auth in (False, True)]
        # every case once, checked fully; it also loads the ACLs into the authorizer (untimed)
        for kind, auth in cases:
            broker.authorizer = authorizer if auth else None
            r = call(frames[kind])
            if int(r.error_code) or r.member_epoch != epoch:
                raise RuntimeError(f"{kind} heartbeat, authorizer {auth}: {r}")
        loaded = len(authorizer.acls())
        if loaded != 2 + 2 * n_unrel:
            raise RuntimeError(f"the authorizer holds {loaded} ACLs, expected {2 + 2 * n_unrel}")
        written0 = broker.coordinator.runtime.records_written
        results: dict[tuple[str, bool], list[tuple[int, float, int]]] = {c: [] for c in cases}
        for rnd in range(args.hb_rounds):
            for kind, auth in (cases if rnd % 2 == 0 else cases[::-1]):
                broker.authorizer = authorizer if auth else None
                results[(kind, auth)].append(drive_broker(loop, broker, [frames[kind]], args.heartbeats,
                                                          args.max_seconds, session))
        written = broker.coordinator.runtime.records_written - written0
        broker.authorizer = None

        # one decision, timeit: the same authorizer; then with only the two grants
        access = Access(authorizer, PRINCIPAL, "127.0.0.1")
        small = Authorizer(super_users=set(), acls=grants())
        access_small = Access(small, PRINCIPAL, "127.0.0.1")
        denied = Access(authorizer, "User:mallory", "127.0.0.1")

        def per_call_us(fn) -> float:
            number = max(1, min(200_000, int(0.2 / max(1e-9, timeit.timeit(fn, number=50) / 50))))
            return 1e6 * min(timeit.repeat(fn, number=number, repeat=5)) / number

        decisions = [
            (f"Access.group(READ) allowed, {2 + 2 * n_unrel:,} ACLs ({1 + n_unrel:,} on groups)",
             per_call_us(lambda: access.group(Operation.READ, GROUP))),
            (f"Access.group(READ) denied (another principal), same {2 + 2 * n_unrel:,} ACLs",
             per_call_us(lambda: denied.group(Operation.READ, GROUP))),
            (f"Access.topic(DESCRIBE) allowed, same {2 + 2 * n_unrel:,} ACLs ({1 + n_unrel:,} on topics)",
             per_call_us(lambda: access.topic(Operation.DESCRIBE, TOPIC))),
            ("Access.group(READ) allowed, only the 2 grants", per_call_us(lambda: access_small.group(Operation.READ, GROUP))),
        ]
        stored = broker.metadata.acls
        t0 = time.perf_counter()
        rebuilds = 0
        while rebuilds < 20 and time.perf_counter() - t0 < 5.0:
            authorizer.set_acls(bindings_from_store(stored))
            rebuilds += 1
        rebuild_ms = 1e3 * (time.perf_counter() - t0) / rebuilds
    finally:
        if broker is not None:
            broker.close()
        loop.close()
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    us: dict[tuple[str, bool], float | None] = {}
    for kind, auth in cases:
        rs = results[(kind, auth)]
        per = [1e6 * s / d for d, s, _ in rs if d]
        errs = sum(e for _, _, e in rs)
        ok = ok and errs == 0 and all(d == args.heartbeats for d, _, _ in rs)
        us[(kind, auth)] = median(per)
        checks = "READ group" + (" + DESCRIBE topic" if kind == "full" else "")
        rows.append((kind, f"{'authorizer' if auth else 'none'}", checks if auth else "-", fmt(us[(kind, auth)], ".1f"),
                     f"{min(per):.1f}-{max(per):.1f}" if per else "-",
                     fmt(1e6 / us[(kind, auth)] if us[(kind, auth)] else None),
                     f"{sum(d for d, _, _ in rs):,}", str(errs)))
    print()
    table(("heartbeat", "authorizer", "asks", "us/hb", "min-max", "heartbeats/s", "heartbeats", "errors"), rows, left=3)
    diffs = {kind: (us[(kind, True)] - us[(kind, False)]) if us[(kind, True)] and us[(kind, False)] else None
             for kind in ("partial", "full")}
    for kind in ("partial", "full"):
        base = us[(kind, False)]
        print(f"  {kind}: the authorizer adds {fmt(diffs[kind], '.1f')} us per heartbeat "
              f"({fmt(100 * diffs[kind] / base if diffs[kind] is not None and base else None, '+.0f')}%)")
    print(f"  records written by the timed heartbeats: {written} (must be 0: a steady heartbeat changes nothing)")
    print()
    table(("one decision (timeit, best of 5)", "us"), [(name, f"{v:.2f}") for name, v in decisions])
    print(f"  rebuilding the authorizer's bindings from the metadata ({loaded:,} ACLs; done at the first request "
          f"after any ACL change): {rebuild_ms:.1f} ms")
    summary["heartbeat"] = {"us_per_heartbeat": {f"{k}/{'authorizer' if a else 'none'}": v for (k, a), v in us.items()},
                            "authorizer_adds_us": diffs, "records_written": written,
                            "decisions_us": dict(decisions), "rebuild_ms": rebuild_ms, "acls": loaded,
                            "runs": {f"{k}/{'authorizer' if a else 'none'}": v for (k, a), v in results.items()}}
    return ok and written == 0


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--sections", default="throughput,heartbeat", help="comma-separated: throughput, heartbeat")
    ap.add_argument("--quick", action="store_true",
                    help="a small run: 20,000 records, 1 round, 2,000 heartbeats, 1 heartbeat round")
    ap.add_argument("--records", type=int, default=200_000, help="records per produce/consume phase")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--producers", type=int, default=1, help="producer processes per phase")
    ap.add_argument("--consumers", type=int, default=1, help="consumer processes per phase")
    ap.add_argument("--rounds", type=int, default=5, help="runs per listener, alternating which goes first")
    ap.add_argument("--connects", type=int, default=4, help="fresh connections timed per listener and round")
    ap.add_argument("--phase-timeout", type=float, default=60.0, help="seconds; a phase that runs over fails")
    ap.add_argument("--heartbeats", type=int, default=20_000, help="heartbeats per timed run")
    ap.add_argument("--hb-rounds", type=int, default=3, help="timed runs of each heartbeat case")
    ap.add_argument("--max-seconds", type=float, default=20.0, help="upper bound of one heartbeat run")
    ap.add_argument("--unrelated-acls", type=int, default=1000,
                    help="unrelated ACLs on groups (and as many on topics) next to the grants")
    ap.add_argument("--work-dir", default=None, help="where the brokers keep their data [a temp dir]")
    ap.add_argument("--keep", action="store_true", help="keep the broker's work dir (data, certificates, log)")
    ap.add_argument("--json", metavar="PATH", help="also write every figure as JSON")
    args = ap.parse_args(argv)
    if args.quick:
        args.records, args.rounds, args.connects = 20_000, 1, 2
        args.heartbeats, args.hb_rounds = 2_000, 1
    require_positive(ap, args, ("records", "rounds", "heartbeats", "hb_rounds", "producers", "consumers",
                                "partitions"))

    def finish(summary: dict, cores: int, seconds: float) -> None:
        print(f"\nconditions: {cores} cores shared by the broker and every client process (and whatever else runs: "
              f"see the load average above); {args.size}-byte values, {args.records:,} records per phase; "
              f"{args.heartbeats:,} heartbeats per run; loadavg at the end "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}. Total bench time {seconds:.1f} s")

    return run_sections(ap, args, {"throughput": section_throughput, "heartbeat": section_heartbeat}, finish)


if __name__ == "__main__":
    sys.exit(main())
