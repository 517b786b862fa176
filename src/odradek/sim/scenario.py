"""What happens to a world during its fault phase: members start, faults arrive.

Theory of operation: each fault kind the seed switched on is a Poisson process (FaultPlan);
when one fires it picks its victim with the world's RNG, acts, and arms its next firing,
until the fault phase ends. Per-message faults (loss, lost responses, jitter) live in the
network. `heal` ends the fault phase: the network stops dropping, partitions lift, a
crashed coordinator comes back; members already due to restart still do.

The EOS workload (issue 19) adds the input's producer: every INPUT_EVERY_MS of the fault
phase each input partition gets 0-2 more records (none after it: the group must then
drain what is left), and its `topic_change` fault only grows input topics (the output
topic is left alone, and no input topic is deleted: its records would vanish from what
exactly-once is judged against).
"""

from __future__ import annotations

from .world import World

MAX_MEMBERS = 7
INPUT_EVERY_MS = 250


def start(world: World) -> None:
    rng = world.rng
    for _ in range(rng.randint(2, 5)):
        world.launches_due += 1

        def launch() -> None:
            world.launches_due -= 1
            world.start_member()

        world.schedule(rng.randint(0, 2000), "a member is launched", launch)
    for kind, act in ACTIONS.items():
        _arm(world, kind, act)
    if world.eos:
        world.schedule(INPUT_EVERY_MS, "input is produced", lambda: _produce_input(world))


def _produce_input(world: World) -> None:
    if not world.faults_on:
        return
    for topic, p in world.input_partitions():
        partition = world.data.partition((topic, p))
        n = world.rng.randint(0, 2)
        partition.append_plain([f"{topic}:{p}:{o}" for o in range(partition.end, partition.end + n)])
    world.schedule(world.now + INPUT_EVERY_MS, "input is produced", lambda: _produce_input(world))


def _arm(world: World, kind: str, act) -> None:
    gap = world.plan.next_gap_ms(world.rng, kind)
    if gap is None:
        return
    at = world.now + gap
    if at >= world.fault_ms:
        return

    def fire() -> None:
        if world.faults_on:
            act(world)
            _arm(world, kind, act)

    world.schedule(at, f"fault: {kind}", fire)


def _victim(world: World):
    live = [m for m in world.members.values() if m.alive and not m.stopping]
    return world.rng.choice(live) if live else None


def _partition(world: World) -> None:
    m = _victim(world)
    if m is not None:
        until = world.now + world.rng.randint(500, 2 * world.session_ms)
        world.trace(f"{m.name} is cut off until {until}")
        world.network.cut(m.name, until)


def _client_crash(world: World) -> None:
    m = _victim(world)
    if m is not None:
        back = world.rng.randint(200, 5000) if world.rng.random() < 0.7 else None
        world.crash_member(m, back)


def _coordinator_crash(world: World) -> None:
    c = world.coordinator
    if not c.up:
        return
    world.replay_checker.compare(world, "before a coordinator crash")
    b = c.crash()
    world.trace(f"coordinator {b} crashes")
    down = world.rng.randint(50, 3000)
    world.schedule(world.now + down, f"{b} restarts", lambda: restart_broker(world, b))


def restart_broker(world: World, b) -> None:
    c = world.coordinator
    if not b.up:
        c.restart(b)
        role = "the coordinator" if c.leader is b else "a follower"
        world.trace(f"{b} is back as {role}; the coordinator holds {sum(len(v) for v in c.log.values())} records")


def _coordinator_move(world: World) -> None:
    c = world.coordinator
    if c.up:
        world.replay_checker.compare(world, "before the coordinator moved")
    moved = c.move()
    if moved is None:
        world.trace("the coordinator cannot move: no other broker is up and in the ISR")
        return
    old, new = moved
    world.trace(f"the coordinator moves from {old} to {new} (leader epoch "
                f"{c.states[c.group_partition].leader_epoch}); it loaded "
                f"{sum(len(v) for v in c.log.values())} records")
    if old.node_id in c.deaf:
        # A zombie until it hears of the new leader: about as long as a broker whose
        # controller session is lost takes to notice (up to two session timeouts here).
        deaf_for = world.rng.randint(50, 2 * world.session_ms)
        world.trace(f"{old} is a zombie for {deaf_for} ms")
        world.schedule(world.now + deaf_for, f"{old} hears it was deposed", lambda: learn(world, old))


def learn(world: World, b) -> None:
    if world.coordinator.learn(b):
        world.trace(f"{b} resigns and follows {world.coordinator.leader}")


def _topic_change(world: World) -> None:
    rng = world.rng
    topics = world.coordinator.metadata.topics
    if world.eos:
        name = rng.choice(sorted(t for t in world.subscription if t in topics) or ["t0"])
        if "t1" in world.subscription and "t1" not in topics:
            world.create_topic("t1", rng.randint(1, 4))
        elif name in topics and topics[name].partitions < 10:
            world.add_partitions(name, rng.randint(1, 3))
        return
    choice = rng.random()
    if "t1" in world.subscription and "t1" not in topics:
        world.create_topic("t1", rng.randint(1, 4))
    elif choice < 0.6:
        name = rng.choice(sorted(topics))
        if topics[name].partitions < 10:
            world.add_partitions(name, rng.randint(1, 3))
    elif "t1" in topics and "t1" in world.subscription:
        world.delete_topic("t1")
    else:
        world.add_partitions("t0", 1) if topics["t0"].partitions < 10 else None


def _churn(world: World) -> None:
    live = [m for m in world.members.values() if m.alive and not m.stopping]
    if len(live) < 2 or (len(live) < MAX_MEMBERS and world.rng.random() < 0.5):
        world.start_member()
    else:
        world.leave_member(world.rng.choice(live))


ACTIONS = {
    "partition": _partition,
    "client_crash": _client_crash,
    "coordinator_crash": _coordinator_crash,
    "coordinator_move": _coordinator_move,
    "topic_change": _topic_change,
    "churn": _churn,
}


def heal(world: World) -> None:
    world.faults_on = False
    world.network.faults_active = False
    world.network.cut_until.clear()
    world.coordinator.heal()
    for b in world.coordinator.brokers:
        learn(world, b)
        restart_broker(world, b)
    if not world.members and not world.restarts_due and not world.launches_due:
        world.start_member()  # a group with nobody left converges trivially; give it someone
    world.trace("faults stop")
