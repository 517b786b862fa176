"""Deliberate defects, for proving that each checker catches what it is meant to (tests only).

Theory of operation: `inject(name)` is a context manager that swaps one function of the real
coordinator (or of the simulator's coordinator host) for a broken one and restores it on
exit. Nothing in the product imports this module; the sweep and the CLI never inject. Each
defect breaks one promise, and its test asserts that the checker for that promise reports it
with a seed that replays it:

  assign-before-revoke   KIP-848 reconciliation hands a member partitions another member
                         still holds (owner_of always says "free")
  accept-zombie-commits  a member fenced out of the group commits as if it had no membership
  unbalanced-assignor    the server-side assignors give every partition to one member
  stuck-revocation       members never finish revoking (the group never converges)
  lost-writes            a restarted coordinator loses its last records (an unflushed log)
  replay-skips-offsets   replay ignores offset commits (the log no longer rebuilds the state)
  commit-on-write        coordinators count their writes as committed when appended (a
                         single node's rule), not when the high watermark passes them: a
                         zombie coordinator acknowledges commits nobody copies
  no-truncation          a follower copies from its log end without settling where its log
                         diverges from the leader's (no leader epochs, KIP-101's bug): a
                         deposed leader keeps what it wrote as a zombie, and serves it
                         when it leads again
  no-lease-check         a zombie coordinator goes on serving until it hears it was deposed
                         (no local lease check): it answers OffsetFetch with offsets the
                         new coordinator has moved past, which its members then commit
  no-txn-fencing         TxnOffsetCommit skips KIP-447's fencing (the member id, generation
                         and member epoch it carries are not checked): a zombie that lost
                         its partitions commits its transaction's offsets and output anyway
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from odradek.coordinator import offsets as coordinator_offsets
from odradek.coordinator import records as R
from odradek.coordinator import txn_offsets
from odradek.coordinator.assignors import ASSIGNORS
from odradek.coordinator.consumer import heartbeat as consumer_heartbeat
from odradek.coordinator.shard import Shard

from . import cluster as sim_cluster
from . import coordinator as sim_coordinator
from . import member as sim_member
from . import replication as sim_replication


@contextlib.contextmanager
def _swap(owner, name: str, replacement) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _assign_before_revoke():
    original = consumer_heartbeat.reconcile

    def reconcile(member, target_epoch, target, owned, owner_of):
        return original(member, target_epoch, target, owned, lambda _t, _p: None)

    return _swap(consumer_heartbeat, "reconcile", reconcile)


def _accept_zombie_commits():
    original = coordinator_offsets._member_check

    def member_check(group, req):
        if req.member_id and req.member_id not in group.members:
            return None  # a member that was fenced out commits as if it had no membership
        return original(group, req)

    return _swap(coordinator_offsets, "_member_check", member_check)


def _stuck_revocation():
    def revoke(self, now: int) -> None:
        if self.core.to_revoke():
            self.revoking = self.revoking or self.core.to_revoke()  # and never finishes

    return _swap(sim_member.SimMember, "_revoke", revoke)


@contextlib.contextmanager
def _assignors(assign) -> Iterator[None]:
    class Broken:
        def __init__(self, module) -> None:
            self.NAME = module.NAME
            self.assign = assign

    originals = dict(ASSIGNORS)
    for name, module in originals.items():
        ASSIGNORS[name] = Broken(module)
    try:
        yield
    finally:
        ASSIGNORS.clear()
        ASSIGNORS.update(originals)


def _everything_to_one(spec):
    members = sorted(spec.members)
    out = {m: {} for m in members}
    if members:
        first = spec.members[members[0]]
        out[members[0]] = {t: frozenset(range(spec.topics[t].partitions)) for t in first.subscribed_topic_ids
                           if t in spec.topics}
    return out


def _lost_writes():
    original = sim_coordinator.SimCoordinator.restart

    def restart(self) -> None:
        for log in self.logs.values():
            log.truncate_to(max(0, log.end - 3))
        original(self)

    return _swap(sim_coordinator.SimCoordinator, "restart", restart)


def _replay_skips_offsets():
    original = Shard.replay

    def replay(self, record) -> None:
        if self.loading and record.type == R.OFFSET_COMMIT:
            return
        original(self, record)

    return _swap(Shard, "replay", replay)


def _commit_on_write():
    original = sim_coordinator.SimCoordinator._new_runtime

    def new_runtime(self):
        runtime = original(self)
        runtime.commit_on_write = True  # complete_up_to(the last offset written) after every write
        return runtime

    return _swap(sim_coordinator.SimCoordinator, "_new_runtime", new_runtime)


def _no_truncation():
    def follow(follower, leader, leader_hw):
        new = leader.entries[follower.end:]
        follower._append_as_follower(new)
        follower.hw = min(leader_hw, follower.end)
        return sim_replication.Fetched(0, len(new))

    return _swap(sim_cluster, "follow", follow)


def _no_lease_check():
    return _swap(sim_coordinator.SimCoordinator, "serving", lambda self: True)


@contextlib.contextmanager
def _no_txn_fencing() -> Iterator[None]:
    # As if every TxnOffsetCommit carried no group metadata (KIP-447's fencing gone): a
    # classic group takes it from anyone, a consumer group checks no member or epoch.
    with _swap(txn_offsets, "_check_classic", lambda group, req: None), \
            _swap(txn_offsets, "_check_consumer", lambda group, req: None):
        yield


DEFECTS = {
    "assign-before-revoke": _assign_before_revoke,
    "accept-zombie-commits": _accept_zombie_commits,
    "unbalanced-assignor": lambda: _assignors(_everything_to_one),
    "stuck-revocation": _stuck_revocation,
    "lost-writes": _lost_writes,
    "replay-skips-offsets": _replay_skips_offsets,
    "commit-on-write": _commit_on_write,
    "no-truncation": _no_truncation,
    "no-lease-check": _no_lease_check,
    "no-txn-fencing": _no_txn_fencing,
}


def inject(name: str):
    """Context manager: run with defect `name` in place."""
    return DEFECTS[name]()
