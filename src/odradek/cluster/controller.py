"""The controller's decisions, pure: which partitions need a new leader or a smaller ISR.

Theory of operation (Kafka's ReplicationControlManager, KRaft; PartitionChangeBuilder):
when a broker is no longer registered (its lease expired, it shut down), the controller
removes it from the ISR of every partition, and every partition it led gets a new leader:
the first replica, in assignment order, that is both in the ISR and alive. The leader
epoch rises with every leader change; an ISR-only change keeps it (the partition epoch,
the etcd revision, rises with any write). A partition whose ISR holds nobody alive keeps
its last ISR member and has no leader (Kafka keeps the last member so that it, and only
it, can lead again cleanly when it returns), unless `unclean.leader.election.enable`
lets any live replica lead, with itself as the whole ISR, accepting the loss of what the
ISR had and it lacks.

`elect` returns the new states; the backend writes each with a compare-and-set on the
partition epoch it was computed from and on the controller's own epoch, so a decision
from a stale image or a deposed controller is refused by etcd.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from .image import NO_LEADER, PartitionState, TopicPartition


def elect_one(state: PartitionState, live: Collection[int], unclean: bool) -> PartitionState | None:
    """The state `state` should have given the live brokers, or None if it is fine."""
    isr = tuple(r for r in state.isr if r in live)
    leader_ok = state.leader != NO_LEADER and state.leader in live
    if leader_ok:
        if isr == state.isr:
            return None
        return state.with_changes(isr=isr)  # KRaft: a fenced broker leaves every ISR
    candidates = [r for r in state.replicas if r in isr]
    if candidates:
        new_leader = candidates[0]
        return state.with_changes(leader=new_leader, leader_epoch=state.leader_epoch + 1, isr=isr)
    if unclean:
        alive = [r for r in state.replicas if r in live]
        if alive:
            # Kafka's unclean election: a replica outside the ISR leads alone.
            return state.with_changes(leader=alive[0], leader_epoch=state.leader_epoch + 1, isr=(alive[0],))
    # Nobody eligible: no leader; the ISR keeps its last member (KRaft keeps the ISR non-empty).
    last = state.isr[-1:] if state.isr else ()
    if state.leader == NO_LEADER and state.isr == last:
        return None
    return state.with_changes(leader=NO_LEADER, leader_epoch=state.leader_epoch + (state.leader != NO_LEADER),
                              isr=last)


def elect(partitions: Mapping[TopicPartition, PartitionState], live: Collection[int],
          unclean: Callable[[str], bool] = lambda topic: False) -> dict[TopicPartition, PartitionState]:
    """Every partition whose state must change because of who is alive."""
    live = frozenset(live)
    out = {}
    for tp, state in partitions.items():
        new = elect_one(state, live, unclean(tp[0]))
        if new is not None:
            out[tp] = new
    return out


def initial_state(replicas: tuple[int, ...], live: Collection[int]) -> PartitionState:
    """A new partition: the first live replica leads at epoch 0, the live replicas are
    the ISR (Kafka's controller creates partitions with the unfenced replicas in sync)."""
    isr = tuple(r for r in replicas if r in live)
    return PartitionState(replicas, isr[0] if isr else NO_LEADER, 0, isr or replicas[:1], 0)
