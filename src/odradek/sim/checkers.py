"""Invariant checkers: separate observers of the simulated world, run after every step.

Theory of operation (DESIGN principle 7, after FoundationDB and TigerBeetle's VOPR): a
checker reads the coordinator's shard and the members' beliefs, never changes them, and
reports a violation with a message; the world stamps it with the time and the seed. Each
checker states one property from the specifications:

  coordinator-ownership  no partition is held by two members in the coordinator's view
                         (assigned or pending revocation; classic: the generation's
                         assignments)
  client-ownership       no two members believe they own a partition while the
                         coordinator still counts both as holding it: a member may only
                         consume what the previous owner gave up (or what the coordinator
                         took from it by fencing it; that zombie's commits are then
                         fenced, see commit-fencing)
  stable-assignment      a stable group assigns every subscribed partition exactly once,
                         balanced as its assignor promises (uniform and cooperative-sticky:
                         member counts differ by at most one; range: per topic)
  epochs                 group epochs, generations and each member's epoch only increase,
                         across coordinator fail-overs too; a member at the target epoch
                         holds nothing that is assigned to another member
  commit-fencing         KIP-1251: a commit from a zombie (a member that held the partition
                         at the epoch it sends, the partition having since gone to another
                         member) is rejected; a commit from the current holder whose epoch
                         lies between the assignment epoch and the member's epoch is not;
                         accepted offsets of a partition never go backwards. Judged
                         on the current coordinator's answers; an answer that the
                         coordinator could not decide (it moved, or the write timed
                         out: COORDINATOR_NOT_AVAILABLE and the like) is no verdict
  replay                 the coordinator's log, replayed into a fresh shard, gives the
                         state the live shard has (checked at every crash and move, and at
                         the end)
  fenced-coordinator     no commit a fenced coordinator took is visible after fail-over:
                         every commit acknowledged to a client (by any broker, a zombie
                         too) is in the log of the coordinator after each fail-over, at its
                         offset and leader epoch; nothing a deposed leader appended after it
                         was deposed is in that log; and the new coordinator's offsets are
                         exactly what that log's commits say (checked at every fail-over,
                         when a zombie hears it was deposed, and at the end)
  exactly-once           (the EOS workload, issue 19) the output of committed transactions
                         never holds an input record twice (judged at every commit
                         marker); the group's committed offsets never go back (judged
                         whenever everything the coordinator wrote is committed); at the
                         end, what a read_committed consumer reads of the output holds
                         every input record exactly once and the committed offsets are
                         the input's ends
  liveness               (in run.py) once faults stop, the group converges in bounded time
                         (EOS: and the input is drained, no transaction left open)
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from odradek.coordinator import records as R
from odradek.coordinator.classic.model import ClassicState
from odradek.coordinator.consumer.model import GroupState
from odradek.coordinator.consumer_protocol import decode_assignment
from odradek.protocol.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
    REQUEST_TIMED_OUT,
)

OFFSET_COMMIT = 8
TXN_OFFSET_COMMIT = 28
# Answers that say the coordinator could not decide, not what it decided: retried by the
# client (at the coordinator it finds next). A write that timed out may still commit.
UNDECIDED = frozenset(int(c) for c in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
                                       REQUEST_TIMED_OUT))


def consumer_group(world):
    shard = world.coordinator.runtime.shard_for(world.group_id) if world.coordinator.up else None
    return shard.consumer_groups.get(world.group_id) if shard else None


def classic_group(world):
    shard = world.coordinator.runtime.shard_for(world.group_id) if world.coordinator.up else None
    return shard.classic_groups.get(world.group_id) if shard else None


def holdings(world) -> dict[str, dict[tuple[str, int], int]] | None:
    """member id -> {(topic, partition): epoch it holds it at} in the coordinator's view (None
    while it is down). Consumer groups: assigned and pending revocation (with their
    assignment epochs); classic groups: the current generation's assignments."""
    if not world.coordinator.up:
        return None
    group = consumer_group(world)
    out: dict[str, dict[tuple[str, int], int]] = {}
    if group is not None:
        for mid, m in group.members.items():
            held = out[mid] = {}
            for parts in (m.assigned, m.pending_revocation):
                for tid, ps in parts.items():
                    name = world.topic_name(tid)
                    for p, epoch in ps.items():
                        held[(name, p)] = epoch
        return out
    cgroup = classic_group(world)
    if cgroup is not None:
        for mid, m in cgroup.members.items():
            held = out[mid] = {}
            if m.assignment:
                try:
                    parts = decode_assignment(m.assignment)
                except Exception:  # noqa: BLE001 - a leader's garbage is the leader's problem
                    continue
                for t, ps in parts.items():
                    for p in ps:
                        held[(t, p)] = cgroup.generation
    return out


class Checker:
    name = "checker"

    def check(self, world) -> None:  # after every step
        pass

    def on_request(self, coordinator, request) -> None:
        pass

    def on_response(self, coordinator, request, body: dict) -> None:
        pass


class CoordinatorOwnership(Checker):
    name = "coordinator-ownership"

    def check(self, world) -> None:
        held = world.holdings()
        if not held:
            return
        seen: dict[tuple[str, int], str] = {}
        for mid, parts in held.items():
            for tp in parts:
                other = seen.setdefault(tp, mid)
                if other != mid:
                    world.violation(self.name, f"{tp} is held by {other} and {mid} at once")


class ClientOwnership(Checker):
    name = "client-ownership"

    def check(self, world) -> None:
        held = world.holdings()
        if held is None:
            return
        believers: dict[tuple[str, int], list] = {}
        for m in world.live_members():
            for tp in sorted(m.owned()):
                believers.setdefault(tp, []).append(m)
        for tp, ms in sorted(believers.items()):
            if len(ms) < 2:
                continue
            cgroup = classic_group(world)
            if cgroup is not None:
                # Classic: members of the coordinator's current generation may not overlap. A
                # member still at an older generation is a zombie (its heartbeat will be
                # ILLEGAL_GENERATION, its commits are fenced): a static member that missed a
                # rebalance stays in the group (Kafka keeps static members at join
                # completion) with its old subscription, so a cooperative leader may hand
                # its partitions on before it hears of the new generation.
                holding = [m for m in ms if m.member_id in cgroup.members
                           and getattr(m.core, "generation", None) == cgroup.generation]
            else:
                # Only members the coordinator still counts as holding tp may not overlap.
                holding = [m for m in ms if tp in held.get(m.member_id, ())]
            if len(holding) >= 2:
                names = ", ".join(f"{m.name} ({m.member_id[:8]})" for m in holding)
                world.violation(self.name, f"{tp} is consumed by {names} at once")


class StableAssignment(Checker):
    name = "stable-assignment"

    def check(self, world, converged: bool = False) -> None:
        """After every step, and once more (`converged`) when the run judges convergence: a
        classic group is only promised coverage and balance then, because its leader alone
        notices new partitions and a cooperative rebalance takes two rounds, the first of
        which leaves moved partitions unassigned while the group is stable."""
        if not world.coordinator.up:
            return
        subscribed = world.subscribed_partitions()
        group = consumer_group(world)
        if group is not None:
            if group.state is not GroupState.STABLE or group.group_epoch != group.target_epoch:
                return
            members = {mid: {(world.topic_name(t), p) for t, ps in tgt.items() for p in ps}
                       for mid, tgt in group.target.items() if mid in group.members}
            assignor = {m.server_assignor for m in group.members.values()} - {None}
            rule = "range" if assignor == {"range"} or (not assignor and world.config.assignors[0] == "range") \
                else "uniform"
        else:
            cgroup = classic_group(world)
            if cgroup is None or not cgroup.is_(ClassicState.STABLE) or not cgroup.members:
                return
            held = world.holdings() or {}
            members = {mid: set(parts) for mid, parts in held.items()}
            rule = "range" if world.protocol == "classic-eager" else "uniform"
            if any(not cm.assignment for cm in cgroup.members.values()):
                return  # KIP-814 or a leader that has not sent the assignment: nothing to judge yet
        if not members:
            return
        counts: dict[tuple[str, int], int] = {}
        for parts in members.values():
            for tp in parts:
                counts[tp] = counts.get(tp, 0) + 1
        twice = sorted(tp for tp, n in counts.items() if n > 1)
        missing = sorted(subscribed - set(counts))
        extra = sorted(set(counts) - subscribed)
        if group is None and not converged:
            missing = extra = []
        if twice or missing or extra:
            world.violation(self.name, f"stable group: assigned twice {twice}, unassigned {missing}, "
                                       f"not subscribed {extra}")
            return
        if group is None and not converged:
            return  # (every member subscribes to the same topics, so balance is promised)
        if rule == "range":
            for topic in sorted({t for t, _ in subscribed}):
                per = [sum(1 for t, _ in parts if t == topic) for parts in members.values()]
                if max(per) - min(per) > 1:
                    world.violation(self.name, f"range assignment of {topic} unbalanced: {sorted(per)}")
        else:
            per = [len(parts) for parts in members.values()]
            if max(per) - min(per) > 1:
                world.violation(self.name, f"{rule} assignment unbalanced: {sorted(per)}")


class Epochs(Checker):
    name = "epochs"

    def __init__(self) -> None:
        self.group_epoch = -1
        self.generation = -1
        self.member_epochs: dict[str, int] = {}
        self.bumps = 0  # rebalances: group epoch bumps and new generations seen
        self.persisted = -1  # the newest classic generation seen stored (stable or empty)
        self.crashes = 0
        self.kind: str | None = None  # the group's protocol as last seen

    def check(self, world) -> None:
        if not world.coordinator.up:
            return
        group = consumer_group(world)
        kind = "consumer" if group is not None else "classic" if classic_group(world) is not None else None
        if kind != self.kind:
            # The group changed protocol (KIP-848 migration, or an empty group taken over by
            # the other protocol): its epochs start a new sequence.
            self.group_epoch = self.generation = self.persisted = -1
            self.member_epochs.clear()
            self.kind = kind
        if group is not None:
            if group.group_epoch < self.group_epoch:
                world.violation(self.name, f"group epoch went back from {self.group_epoch} to {group.group_epoch}")
            self.bumps += group.group_epoch > self.group_epoch >= 0
            self.group_epoch = group.group_epoch
            for mid in list(self.member_epochs):
                if mid not in group.members:
                    del self.member_epochs[mid]  # removed: a rejoin starts a new incarnation at 0
            for mid, m in group.members.items():
                if m.member_epoch < 0:
                    continue  # KIP-848 "Static Membership": -2 marks a static member that left for now
                last = self.member_epochs.get(mid, -1)
                if m.member_epoch < last and m.member_epoch != 0:
                    world.violation(self.name, f"member {mid[:8]} epoch went back from {last} to {m.member_epoch}")
                self.member_epochs[mid] = m.member_epoch
            target = group.target_epoch
            taken = {}
            for mid, m in group.members.items():
                for tp in m.owned_pairs():
                    taken.setdefault(tp, set()).add(mid)
            for mid, m in group.members.items():
                if m.member_epoch != target:
                    continue
                for t, ps in m.assigned.items():
                    for p in ps:
                        if taken.get((t, p), {mid}) - {mid}:
                            world.violation(self.name, f"member {mid[:8]} at the target epoch {target} holds "
                                                       f"{world.topic_name(t)}-{p}, which another member holds")
        cgroup = classic_group(world)
        if cgroup is not None:
            floor = self.generation
            if world.coordinator.crashes != self.crashes:
                # Classic groups persist a generation when its assignment is stored (consumer-0.9
                # design "Coordinator failover"): a fail-over may fall back to that one.
                floor = self.persisted
            if cgroup.generation < floor:
                world.violation(self.name, f"generation went back from {floor} to {cgroup.generation}")
            self.bumps += cgroup.generation > self.generation >= 0
            self.generation = cgroup.generation
            if cgroup.is_(ClassicState.STABLE, ClassicState.EMPTY):
                self.persisted = max(self.persisted, cgroup.generation)
        self.crashes = world.coordinator.crashes


class CommitFencing(Checker):
    """KIP-1251, judged from the coordinator's state as the commit arrives."""

    name = "commit-fencing"

    def __init__(self, world) -> None:
        self.world = world
        self.last_holder: dict[tuple[str, int], str] = {}
        self.held_at: dict[tuple[str, tuple[str, int]], set[int]] = {}
        self.taken_from: set[tuple[str, tuple[str, int]]] = set()  # (member, tp) reassigned since it held it
        self.expected: dict[int, tuple[str, dict]] = {}  # id(request) -> (member id, tp -> verdict)
        self.committed: dict[tuple[str, int], int] = {}
        self.accepted = 0
        self.rejected = 0

    def check(self, world) -> None:
        held = world.holdings()
        if held is None or world.classic_only():
            return
        group = consumer_group(world)
        epochs = {mid: m.member_epoch for mid, m in group.members.items()} if group else {}
        now_holder = {}
        for mid, parts in held.items():
            for tp in parts:
                now_holder[tp] = mid
                self.held_at.setdefault((mid, tp), set()).add(epochs.get(mid, -1))
                self.taken_from.discard((mid, tp))
        for tp, mid in now_holder.items():
            last = self.last_holder.get(tp)
            if last is not None and last != mid:
                self.taken_from.add((last, tp))
            self.last_holder[tp] = mid
        # A member may hold a partition at several epochs; a commit at any of them is the
        # holder's own while it still holds it.

    def on_request(self, coordinator, request) -> None:
        if request.api_key != OFFSET_COMMIT:
            return
        world = self.world
        b = request.body
        epoch, mid = int(b.generation_id_or_member_epoch), b.member_id or ""
        verdicts = {}
        group = consumer_group(world)
        cgroup = classic_group(world)
        # Fresh, not the step's cached view: requests queued behind a parked one are handled
        # in the same step, after earlier ones may have changed the group.
        held = holdings(world) or {}
        for t in b.topics:
            for p in t.partitions:
                tp = (t.name, int(p.partition_index))
                verdicts[tp] = self._verdict(group, cgroup, held, mid, epoch, tp)
        self.expected[id(request)] = (mid, verdicts)

    def _verdict(self, group, cgroup, held, mid, epoch, tp) -> str | None:
        if cgroup is not None:
            m = cgroup.members.get(mid)
            if m is None or epoch != cgroup.generation:
                return "reject"  # classic: not a member, or an older generation
            return None
        if group is None:
            return None
        member = group.members.get(mid)
        if member is None:
            return "reject" if mid else None  # fallen out of the group: fenced by member id
        zombie = epoch in self.held_at.get((mid, tp), ()) and (mid, tp) in self.taken_from \
            and tp not in held.get(mid, {})
        if zombie:
            return "reject"
        if member.classic is None and tp in held.get(mid, {}) and held[mid][tp] <= epoch <= member.member_epoch:
            return "accept"
        return None

    def on_response(self, coordinator, request, body: dict) -> None:
        if request.api_key != OFFSET_COMMIT:
            return
        mid, verdicts = self.expected.pop(id(request), ("", {}))
        world = self.world
        b = request.body
        offsets = {(t.name, int(p.partition_index)): int(p.committed_offset) for t in b.topics for p in t.partitions}
        codes = {(t["name"], int(p["partition_index"])): int(p["error_code"]) for t in body.get("topics", [])
                 for p in t["partitions"]}
        world.trace(f"commit by {mid[:8]} at {b.generation_id_or_member_epoch}: "
                    + " ".join(f"{t}-{p}={o}{'' if not codes.get((t, p)) else '!' + str(codes[(t, p)])}"
                               for (t, p), o in sorted(offsets.items())))
        for t in body.get("topics", []):
            for p in t["partitions"]:
                tp = (t["name"], int(p["partition_index"]))
                code = int(p["error_code"])
                verdict = verdicts.get(tp)
                if code == 0:
                    self.accepted += 1
                    if verdict == "reject":
                        world.violation(self.name, f"zombie commit accepted: member {mid[:8]} epoch "
                                                   f"{b.generation_id_or_member_epoch} for {tp}")
                    last = self.committed.get(tp)
                    if last is not None and offsets[tp] < last:
                        world.violation(self.name, f"committed offset of {tp} went back from {last} to "
                                                   f"{offsets[tp]}")
                    self.committed[tp] = offsets[tp]
                elif code in UNDECIDED:
                    continue
                else:
                    self.rejected += 1
                    if verdict == "accept":
                        world.violation(self.name, f"the holder's commit was rejected (error {code}): member "
                                                   f"{mid[:8]} epoch {b.generation_id_or_member_epoch} for {tp}")

    def topic_deleted(self, name: str) -> None:
        """An explicit reset: the topic's offsets start again."""
        for tp in [tp for tp in self.committed if tp[0] == name]:
            del self.committed[tp]


class _Ack(NamedTuple):
    broker: int  # who acknowledged it
    partition: int  # of __consumer_offsets
    offset: int  # of the commit's record there
    entry: object  # sim/replication.Entry: (leader epoch, key, value)
    tp: tuple[str, int]
    committed: int  # the committed offset the client was told is stored


class FencedCoordinator(Checker):
    """Issue 18: across coordinator fail-overs, acknowledged commits stay and a zombie's do not
    show. Observes every broker's answers (sim/cluster.py `all_observers`) and is asked to
    judge after every fail-over (`after_failover`) and at the end (`final`)."""

    name = "fenced-coordinator"

    def __init__(self, world) -> None:
        self.world = world
        self.acked: dict[tuple[int, int], _Ack] = {}  # (partition, log offset) -> the acknowledged commit there
        self.checks = 0

    def on_response(self, coordinator, request, body: dict) -> None:
        if request.api_key not in (OFFSET_COMMIT, TXN_OFFSET_COMMIT):
            return
        ok = {(t["name"], int(p["partition_index"])) for t in body.get("topics", []) for p in t["partitions"]
              if int(p["error_code"]) == 0}
        if not ok:
            return
        group = request.body.group_id
        recorded = set()
        for partition, offset, entry in coordinator.entries_written(request):
            if not R.is_offset_commit(entry.key) or entry.value is None:
                continue
            fields = R.offset_commit_fields(entry.key, entry.value)
            if fields[0] == group and (fields[1], fields[2]) in ok:
                recorded.add((fields[1], fields[2]))
                self.acked[(partition, offset)] = _Ack(coordinator.node_id, partition, offset, entry,
                                                       (fields[1], fields[2]), fields[3])
        for tp in sorted(ok - recorded):
            self.world.violation(self.name, f"b{coordinator.node_id} acknowledged the commit of {tp} by "
                                            f"{(getattr(request.body, 'member_id', '') or '')[:8]} without a record "
                                            "of it in its log")

    def after_failover(self, world, when: str) -> None:
        c = world.coordinator
        leader = c.leader
        if not leader.up:
            return
        self.checks += 1
        for key, ack in sorted(self.acked.items()):
            log = leader.logs[ack.partition].entries
            if ack.offset >= len(log) or log[ack.offset] != ack.entry:
                del self.acked[key]  # reported once
                world.violation(self.name, f"{when}: the commit of {ack.tp} at {ack.committed}, acknowledged by "
                                           f"b{ack.broker} at leader epoch {ack.entry.epoch} (record "
                                           f"{ack.partition}:{ack.offset}), is not in the log of {leader}, the "
                                           f"coordinator now")
        for partition in c.partitions:
            self._check_log(world, when, leader, partition)

    def _check_log(self, world, when: str, leader, partition: int) -> None:
        c = world.coordinator
        # Offset commit key -> (position, value) of the newest committed write. KIP-98: a
        # transactional commit counts from its producer's COMMIT marker on, unless a
        # committed write of the partition came after it in the log (the newest record
        # wins); an ABORT drops it; a tombstone deletes the pending ones too.
        newest: dict[bytes, tuple[int, bytes | None]] = {}
        pending: dict[int, dict[bytes, tuple[int, bytes]]] = {}
        for i, e in enumerate(leader.logs[partition].entries):
            start = c.deposed.get((partition, e.epoch))
            if start is not None and i >= start:
                world.violation(self.name, f"{when}: record {partition}:{i} of {leader}'s log was appended at "
                                           f"leader epoch {e.epoch} after that leader was deposed")
                return
            if e.marker is not None:
                mine = pending.pop(e.producer_id, {})
                if e.marker.commit:
                    for key, (pos, value) in mine.items():
                        if pos > newest.get(key, (-1, None))[0]:
                            newest[key] = (pos, value)
            elif e.key is not None and R.is_offset_commit(e.key):
                if e.producer_id >= 0 and e.value is not None:
                    pending.setdefault(e.producer_id, {})[e.key] = (i, e.value)
                else:
                    newest[e.key] = (i, e.value)
                    if e.value is None:
                        for mine in pending.values():
                            mine.pop(e.key, None)
        shard = leader.runtime.shards.get(partition)
        if shard is None:
            return
        expected: dict[str, dict[tuple[str, int], tuple]] = {}
        for key, (_pos, value) in newest.items():
            if value is not None:
                g, topic, p, offset, epoch, metadata, ts = R.offset_commit_fields(key, value)
                expected.setdefault(g, {})[(topic, p)] = (offset, epoch, metadata, ts)
        live = {g: {tp: tuple(entry) for tp, entry in offsets.items()} for g, offsets in shard.offsets.items()}
        if live != expected:
            g = next(g for g in sorted(set(live) | set(expected)) if live.get(g) != expected.get(g))
            mine, theirs = live.get(g, {}), expected.get(g, {})
            tp = next(tp for tp in sorted(set(mine) | set(theirs)) if mine.get(tp) != theirs.get(tp))
            world.violation(self.name, f"{when}: {leader}'s offsets of group {g} say {tp} is {mine.get(tp)}, its "
                                       f"log says {theirs.get(tp)}")

    def final(self, world) -> None:
        self.after_failover(world, "at the end")


class ExactlyOnce(Checker):
    """Issue 19: the EOS workload's promise. Hears every transaction that ends in a data
    partition (sim/data.py observers) and reads the group's offsets after every step."""

    name = "exactly-once"

    def __init__(self, world) -> None:
        self.world = world
        # input record -> (output partition, producer id) of the committed transaction holding it
        self.output: dict[tuple[str, int, int], tuple[tuple[str, int], int]] = {}
        self.offsets: dict[tuple[str, int], int] = {}  # the highest committed offset seen per input partition
        self.commits = 0
        self.accepted = 0  # TxnOffsetCommit partitions the coordinator accepted, or refused (a decision)
        self.rejected = 0

    def on_response(self, coordinator, request, body: dict) -> None:
        if request.api_key != TXN_OFFSET_COMMIT:
            return
        for t in body.get("topics", []):
            for p in t["partitions"]:
                code = int(p["error_code"])
                if code == 0:
                    self.accepted += 1
                elif code not in UNDECIDED:
                    self.rejected += 1

    def on_txn_end(self, tp, marker, done, values: list[str]) -> None:
        from .eos import input_of

        if not marker.commit:
            return
        self.commits += 1
        for value in values:
            record = input_of(value)
            first = self.output.get(record)
            if first is not None:
                self.world.violation(self.name, f"input record {record[0]}-{record[1]}@{record[2]} is in the "
                                                f"committed output twice: in {first[0][0]}-{first[0][1]} by producer "
                                                f"{first[1]}, and in {tp[0]}-{tp[1]} by producer {marker.producer_id}")
            else:
                self.output[record] = (tp, marker.producer_id)

    def check(self, world) -> None:
        c = world.coordinator
        if not c.up or not c.settled():
            return  # what a fail-over may still lose is not yet the group's committed offsets
        shard = c.runtime.shard_for(world.group_id)
        if shard is None:
            return
        for tp, entry in shard.offsets.get(world.group_id, {}).items():
            last = self.offsets.get(tp, -1)
            if entry.offset < last:
                world.violation(self.name, f"the committed offset of {tp[0]}-{tp[1]} went back from {last} to "
                                           f"{entry.offset}")
            if entry.offset != last:
                self.offsets[tp] = entry.offset

    def final(self, world, drained: bool) -> None:
        """After the quiet phase: read the output as read_committed does, from the logs. A
        run that did not drain its input (a liveness violation) is judged for duplicates only."""
        from .eos import OUTPUT_TOPIC, input_of

        seen: Counter = Counter()
        for tp, partition in sorted(world.data.partitions.items()):
            if tp[0] == OUTPUT_TOPIC:
                seen.update(input_of(value) for _offset, value in partition.read_committed())
        ends = {tp: world.data.partition(tp).end for tp in world.input_partitions()}
        expected = {(t, p, o) for (t, p), end in ends.items() for o in range(end)}
        twice = sorted(r for r, n in seen.items() if n > 1)
        extra = sorted(set(seen) - expected)
        if twice:
            world.violation(self.name, f"at the end: {len(twice)} input record(s) in the committed output more than "
                                       f"once, first {twice[0]} ({seen[twice[0]]} times)")
        if extra:
            world.violation(self.name, f"at the end: the committed output holds {len(extra)} record(s) that are no "
                                       f"input record, first {extra[0]}")
        if not drained:
            return
        missing = sorted(expected - set(seen))
        if missing:
            world.violation(self.name, f"at the end: {len(missing)} input record(s) missing from the committed "
                                       f"output, first {missing[0]}")
        shard = world.coordinator.runtime.shard_for(world.group_id)
        offsets = shard.offsets.get(world.group_id, {}) if shard is not None else {}
        for tp, end in sorted(ends.items()):
            entry = offsets.get(tp)
            if (entry.offset if entry is not None else 0) != end:
                world.violation(self.name, f"at the end: the committed offset of {tp[0]}-{tp[1]} is "
                                           f"{entry.offset if entry is not None else None}, the input ends at {end}")


class Replay(Checker):
    name = "replay"

    def compare(self, world, when: str) -> None:
        c = world.coordinator
        if not c.up:
            return
        for partition in c.log:
            live = c.runtime.shards.get(partition)
            if live is None:
                continue
            live_snap = live.snapshot()
            a, b = _comparable(live, live_snap), _comparable(c.replayed_shard(partition), live_snap)
            if a != b:
                world.violation(self.name, f"{when}: replaying partition {partition} gives another state: "
                                           f"{_first_difference(a, b)}")


def _comparable(shard, live=None) -> dict:
    snap = shard.snapshot()
    # Classic groups persist only completed rebalances (consumer-0.9 design "Coordinator
    # failover"): a group is compared when the live one is between rebalances.
    between = {g for g, v in (live or snap)["classic_groups"].items()
               if v["state"] in (ClassicState.STABLE.value, ClassicState.EMPTY.value)}
    snap["classic_groups"] = {g: v for g, v in snap["classic_groups"].items() if g in between}
    return snap


def _first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k}: {'missing after replay' if k not in b else 'only after replay'}"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}/{k}")
    return f"{path}: live {a!r:.200} != replayed {b!r:.200}"


def all_checkers(world) -> list[Checker]:
    return [CoordinatorOwnership(), ClientOwnership(), StableAssignment(), Epochs(), CommitFencing(world)]
