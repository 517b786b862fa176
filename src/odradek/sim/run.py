"""Run one seed: faults, then quiet, then judge. `run_seed` is what the CLI and the sweep call.

Theory of operation: build the World for the seed, start the scenario, run the fault phase
with every checker after every step, heal, then run until the group converges (liveness)
or the bound passes. Convergence: the coordinator is up; its group is stable and holds
exactly the live members; every live member's core is stable and believes it owns exactly
what the coordinator assigned it; the assignments cover every subscribed partition once.
The group must stay converged for a settling window (a session timeout and two seconds), and
the convergence time is when that stretch began. At the end the coordinator's log is
replayed and compared with the live shard, and every acknowledged commit must be in it.
"""

from __future__ import annotations

import time

from odradek.client.classic import ClassicGroupMember
from odradek.transactions.model import COMPLETED

from . import checkers as C
from . import scenario
from .result import SeedResult
from .world import World

SETTLE_MS = 2000


def liveness_bound_ms(world: World) -> int:
    # A crashed member is noticed within a session timeout, a stuck revocation within a
    # rebalance timeout, and each rejoin of a classic group may take both plus the initial
    # delay; the margin covers restarts still pending when the faults stop. EOS: an
    # abandoned transaction is aborted when it times out (twice: one may be started just
    # before the faults stop), and then what is left of the input is processed.
    bound = 4 * (world.session_ms + world.rebalance_ms) + world.config.initial_rebalance_delay_ms + 15_000
    return bound + 2 * world.txn_timeout_ms + 20_000 if world.eos else bound


def eos_left(world: World) -> str | None:
    """EOS: what is not done yet (None when the input is drained): every input partition's
    committed offset is its end, no transaction is open, in the group's offsets, at the
    transaction coordinator or in a data partition."""
    c = world.coordinator
    if not c.up or not c.settled():
        return "the coordinator's writes are not all committed"
    shard = c.runtime.shard_for(world.group_id)
    if shard is None:
        return "the group's coordinator shard is not loaded"
    if shard.open_txns.get(world.group_id):
        return f"transactional offsets pending for {sorted(shard.open_txns[world.group_id])}"
    offsets = shard.offsets.get(world.group_id, {})
    for tp in world.input_partitions():
        end = world.data.partition(tp).end
        entry = offsets.get(tp)
        committed = entry.offset if entry is not None else 0
        if committed != end:
            return f"{tp[0]}-{tp[1]}: committed offset {committed if entry is not None else None} of {end}"
    txn_shards = c.leader.txn.runtime.shards
    if len(txn_shards) != world.txn_partitions:
        return "a __transaction_state shard is not loaded"
    for _p, txn_shard in sorted(txn_shards.items()):
        for tid, txn in sorted(txn_shard.txns.items()):
            if txn.state not in COMPLETED:
                return f"transaction of {tid} is {txn.state.name}"
    for tp, partition in sorted(world.data.partitions.items()):
        if partition.open_transactions():
            return f"{tp[0]}-{tp[1]} has open transactions of producers {partition.open_transactions()}"
    return None


def converged(world: World) -> bool:
    c = world.coordinator
    if not c.up or world.restarts_due or world.launches_due:
        return False
    live = [m for m in world.members.values() if m.alive and not m.stopping]
    held = world.holdings()
    group, cgroup = C.consumer_group(world), C.classic_group(world)
    if not live:
        return not (group and group.members) and not (cgroup and cgroup.members)
    if group is not None:
        if group.state.value != "Stable" or set(group.members) != {m.member_id for m in live}:
            return False
    elif cgroup is not None:
        if not cgroup.is_(C.ClassicState.STABLE) or set(cgroup.members) != {m.member_id for m in live}:
            return False
    else:
        return False
    union: list = []
    for m in live:
        if m.revoking is not None or m.core.state.name != "STABLE" or m.owned() != set(held.get(m.member_id, {})):
            return False
        if isinstance(m.core, ClassicGroupMember) and m.core.in_flight is not None and m.core.in_flight != 12:
            return False
        union.extend(m.owned())
    if len(union) != len(set(union)) or set(union) != world.subscribed_partitions():
        return False
    return not world.eos or eos_left(world) is None


def run_seed(seed: int, protocol: str | None = None, *, trace: bool = False,
             adaptive_heartbeat: bool = True) -> SeedResult:
    started = time.perf_counter()
    world = World(seed, protocol, keep_trace=trace, adaptive_heartbeat=adaptive_heartbeat)
    scenario.start(world)
    world.run_until(world.fault_ms)
    scenario.heal(world)
    quiet_from = world.now
    bound = quiet_from + liveness_bound_ms(world)
    # Converged means converged for a whole settling window (a session timeout and more):
    # right after the faults stop, a member cut off a moment ago may still look fine to the
    # coordinator while its session runs out.
    settle = world.session_ms + SETTLE_MS
    since: list[int | None] = [None]

    def settled() -> bool:
        if not converged(world):
            since[0] = None
            return False
        if since[0] is None:
            since[0] = world.now
            world.stable_checker.check(world, converged=True)
        return world.now - since[0] >= settle

    ok = world.run_until(bound, stop=settled)
    convergence_ms = since[0] - quiet_from if ok and since[0] is not None else -1
    if not ok:
        left = f" (EOS: {eos_left(world) or 'drained'})" if world.eos else ""
        world.violation("liveness", f"no stable assignment for {settle} ms within {liveness_bound_ms(world)} ms "
                                    f"after the faults stopped{left}")
    world.replay_checker.compare(world, "at the end")
    world.fenced_checker.final(world)
    if world.eos_checker is not None:
        world.eos_checker.final(world, drained=ok)
    return result_of(world, seed, ok, convergence_ms, time.perf_counter() - started)


def result_of(world: World, seed: int, ok: bool, convergence_ms: int, wall: float) -> SeedResult:
    kinds = sorted({k for _, k, _ in world.violations})
    first = world.violations[0] if world.violations else None
    return SeedResult(
        seed=seed, protocol=f"eos-{world.protocol}" if world.eos else world.protocol, faults=world.plan.label(),
        members=world._serial,
        partitions=len(world.subscribed_partitions()), sim_ms=world.now, steps=world.steps,
        violations=len(world.violations), violation_kinds=",".join(kinds),
        first_violation=f"{first[0]} ms {first[1]}: {first[2]}" if first else "",
        converged=ok, convergence_ms=convergence_ms, partition_movements=world.stats.movements,
        revocations=world.stats.revocations, rebalances=world.rebalances(),
        member_events=world.stats.member_events, records_written=sum(len(v) for v in world.coordinator.log.values()),
        # EOS: the offsets are committed by TxnOffsetCommit (judged by the current coordinator).
        commits_accepted=world.commit_checker.accepted + (world.eos_checker.accepted if world.eos else 0),
        commits_rejected=world.commit_checker.rejected + (world.eos_checker.rejected if world.eos else 0),
        coordinator_crashes=world.coordinator.crash_count, coordinator_moves=world.coordinator.moves,
        adaptive_heartbeat=world.adaptive_heartbeat,
        txn_committed=world.stats.txn_committed, txn_aborted=world.stats.txn_aborted, wall_s=wall,
        trace_tail=_trace(world))


def _trace(world: World) -> list[str]:
    """The whole trace when asked for; else the events up to the first violation and the
    state at the end (or, with no violation, the last events)."""
    if world.full_trace is not None:
        lines = list(world.full_trace)
    elif world.first_tail is not None:
        lines = [*world.first_tail, f"... ({len(world.violations)} violation(s) in all)"]
    else:
        lines = list(world.tail)
    if world.violations:
        lines += [f"state at the end: {line}" for line in world.describe()]
    return lines
