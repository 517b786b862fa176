"""The heartbeat interval a ConsumerGroupHeartbeat response carries: odradek's adaptive
interval for members that are reconciling.

Theory of operation. KIP-848 "Heartbeat & Session": the coordinator gives each member its
heartbeat interval in every response, and clients (librdkafka, the Java consumer, odradek's
own) wait the interval they were last given. Kafka always answers the configured interval
(`group.consumer.heartbeat.interval.ms`, 5 s by default), so a member learns of work only
at its next regular heartbeat. A rebalance takes two such waits: the owner of a partition
learns it must revoke it, then the member the partition goes to learns it was released.

The coordinator knows which members have something to do or to wait for (KIP-848
"Assignment Reconciliation"), and answers those a short interval,
`group.consumer.reconciling.heartbeat.interval.ms`:
  * UNREVOKED_PARTITIONS: partitions to revoke. Clients acknowledge a revocation at once
    anyway (librdkafka and the Java consumer expedite that heartbeat). The short interval
    covers a client that does not.
  * UNRELEASED_PARTITIONS: partitions of its target still held by another member. When
    their owner acknowledges the revocation, the waiting member gets them at its next
    (short) heartbeat: no push is needed.
  * a member epoch behind the target epoch: an assignment to move to.
Everyone else, stable at the target epoch, gets the regular interval, so a stable group
heartbeats exactly as often as in Kafka.

What it cannot shorten: a stable member hears of a new target only at its next regular
heartbeat. So when a member joins, the owners of its partitions still learn of the
revocation within one regular interval.

The short interval is never below `group.consumer.min.heartbeat.interval.ms` and never
above the group's regular interval (a group may configure a shorter one); 0 turns the
extension off. The interval is not stored in records: it is recomputed on every response
from the member's replayed state.
"""

from __future__ import annotations

from ..config import CoordinatorConfig
from .model import ConsumerMember, MemberState


def reconciling(member: ConsumerMember, target_epoch: int) -> bool:
    """True when the member has partitions to revoke or to receive, or an epoch to move to."""
    return member.state is not MemberState.STABLE or member.member_epoch < target_epoch


def interval_ms(config: CoordinatorConfig, regular_ms: int, member: ConsumerMember, target_epoch: int) -> int:
    """The heartbeat interval to answer `member` after this heartbeat: `regular_ms` (the
    group's configured interval) unless the member is reconciling and the extension is on."""
    short = config.reconciling_heartbeat_interval_ms
    if short <= 0 or not reconciling(member, target_epoch):
        return regular_ms
    return min(regular_ms, max(short, config.min_heartbeat_interval_ms))
