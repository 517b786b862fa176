"""TxnOffsetCommit and transaction markers on the coordinator (txn_offsets.py, shard.py):
the records, pending offsets, commit and abort, KIP-447 require_stable, loading, fencing."""

from __future__ import annotations

import pytest

from odradek.coordinator import records as R
from odradek.coordinator.errors import CoordinatorUnavailable
from odradek.coordinator.groups import delete_group
from odradek.coordinator.offsets import CommitPartition, delete, expire_offsets, fetch_group
from odradek.coordinator.runtime import CoordinatorRuntime
from odradek.coordinator.txn_offsets import TxnCommitRequest, commit_transactional
from odradek.protocol.errors import (
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INVALID_PRODUCER_ID_MAPPING,
    NONE,
    NOT_COORDINATOR,
    OFFSET_METADATA_TOO_LARGE,
    UNKNOWN_MEMBER_ID,
    UNSTABLE_OFFSET_COMMIT,
)
from tests.coordinator.classic.helpers import form, state
from tests.coordinator.harness import FOO, Coord

OK, ILLEGAL, UNKNOWN = int(NONE), int(ILLEGAL_GENERATION), int(UNKNOWN_MEMBER_ID)
PID, PID2 = 4000, 4001
P0, P1, P2 = ("foo", 0), ("foo", 1), ("foo", 2)


class TxnCoord(Coord):
    """The harness with a log that keeps each write's kind: plain, transactional, marker."""

    def __init__(self, **kw):
        self.items: dict[int, list] = {}
        self.tags: list = []
        super().__init__(**kw)

    def _new_runtime(self) -> CoordinatorRuntime:
        return CoordinatorRuntime(self.config, self._write, self.image, new_member_id=lambda: next(self._ids),
                                  reader=self.stored)

    def _write(self, partition, records, now_ms, transactional=None):
        self.written = list(records)
        self.tags.append(transactional)
        items = self.items.setdefault(partition, [])
        if records[0].type == R.TXN_MARKER:
            items.append(records[0])
        elif transactional is not None:
            items.append(R.TransactionalPairs(transactional.producer_id, transactional.producer_epoch,
                                              [R.encode(r) for r in records]))
        else:
            items.append([R.encode(r) for r in records])
        return len(items) - 1

    def stored(self, partition: int):
        """The partition as the broker reads it: plain pairs, or a StoredLog in log order."""
        items = self.items.get(partition, [])
        if all(isinstance(i, list) for i in items):
            return [kv for i in items for kv in i]
        out = R.StoredLog()
        for item in items:
            if isinstance(item, list) and out and isinstance(out[-1], list):
                out[-1] = out[-1] + item  # consecutive plain batches are one run
            else:
                out.append(list(item) if isinstance(item, list) else item)
        return out

    def restart(self) -> None:
        self.runtime = self._new_runtime()
        for p in range(self.config.offsets_topic_partitions):
            self.runtime.load_bytes(p, self.stored(p), self.now)

    def shard(self, group="g"):
        return self.runtime.shard_for(group)

    def txn(self, group="g", pid=PID, offsets=((*P0, 10),), generation=-1, member="", instance_id=None,
            epoch=0, metadata=""):
        by_topic: dict[str, list] = {}
        for topic, p, off in offsets:
            by_topic.setdefault(topic, []).append(CommitPartition(p, off, -1, metadata))
        ids = {n: t.topic_id for n, t in self.image.topics.items()}
        req = TxnCommitRequest("tx", group, pid, epoch, generation, member, instance_id,
                               tuple((t, ids.get(t), tuple(ps)) for t, ps in by_topic.items()))
        self.written = []
        resp = self.runtime.run(group, lambda shard, now: commit_transactional(shard, req, now), self.now)
        return {(t["name"], p["partition_index"]): int(p["error_code"]) for t in resp["topics"] for p in t["partitions"]}

    def end(self, pid=PID, commit=True, group="g", epoch=0):
        partition = self.runtime.partition_for(group)
        return self.runtime.complete_transaction(partition, pid, epoch, commit, 7, self.now).result()

    def stable(self, group="g", topics=(("foo", [0, 1, 2]),)):
        out = fetch_group(self.shard(group), group, list(topics), require_stable=True)
        return {(t["name"], p["partition_index"]): (p["committed_offset"], int(p["error_code"]))
                for t in out["topics"] for p in t["partitions"]}


# --- records, pending, commit, abort --------------------------------------------------------


def test_a_txn_commit_writes_offset_commit_records_tagged_with_the_producer():
    c = TxnCoord()
    assert c.txn(offsets=[(*P0, 10), (*P1, 11)], epoch=3) == {P0: OK, P1: OK}
    assert c.written == [R.offset_commit("g", "foo", 0, 10, -1, "", c.now), R.offset_commit("g", "foo", 1, 11, -1, "", c.now)]
    assert c.tags[-1] == R.Transactional(PID, 3)
    # The writer got one transactional batch of the producer.
    assert c.items[0][-1] == R.TransactionalPairs(PID, 3, [R.encode(r) for r in c.written])


def test_pending_offsets_are_invisible_until_the_commit_marker():
    c = TxnCoord()
    c.commit(offsets=[(*P0, 5)])
    c.txn(offsets=[(*P0, 10), (*P1, 11)])
    assert c.fetch(topics=[("foo", [0, 1])]) == {P0: 5, P1: -1}
    assert set(c.shard().pending[PID]["g"]) == {P0, P1}
    assert c.end(commit=True) is None
    assert c.written == [R.txn_marker(PID, 0, True, 7)]
    assert c.fetch(topics=[("foo", [0, 1])]) == {P0: 10, P1: 11}
    assert c.shard().pending == {} and c.shard().open_txns == {}


def test_an_abort_marker_drops_pending_offsets():
    c = TxnCoord()
    c.commit(offsets=[(*P0, 5)])
    c.txn(offsets=[(*P0, 10), (*P1, 11)])
    c.end(commit=False)
    assert c.fetch(topics=[("foo", [0, 1])]) == {P0: 5, P1: -1}
    assert c.shard().pending == {} and c.shard().open_txns == {}


def test_a_marker_for_a_producer_without_pending_offsets_is_written_and_changes_nothing():
    c = TxnCoord()
    c.commit(offsets=[(*P0, 5)])
    c.txn(pid=PID2, offsets=[(*P1, 3)])
    before = c.snapshot()
    assert c.end(pid=PID, commit=True) is None
    assert c.items[0][-1] == R.txn_marker(PID, 0, True, 7)
    assert c.snapshot() == before


def test_a_producer_commits_each_of_its_transactions_in_turn():
    c = TxnCoord()
    c.txn(offsets=[(*P0, 10)])
    c.end(commit=True)
    c.txn(offsets=[(*P0, 20)])
    c.end(commit=False)
    c.txn(offsets=[(*P0, 30)])
    c.txn(offsets=[(*P0, 31)])  # the same transaction again: the newest offset counts
    c.end(commit=True)
    assert c.fetch(topics=[("foo", [0])]) == {P0: 31}


def test_the_newest_record_in_the_log_wins_between_plain_and_transactional_commits():
    c = TxnCoord()
    # Kafka's replayEndTransactionMarker: a pending offset older than the committed one stays out.
    c.txn(offsets=[(*P0, 10)])
    c.commit(offsets=[(*P0, 20)])
    c.end(commit=True)
    assert c.fetch(topics=[("foo", [0])]) == {P0: 20}
    # A transactional commit after a plain one wins when it commits.
    c.commit(offsets=[(*P1, 5)])
    c.txn(offsets=[(*P1, 6)])
    c.end(commit=True)
    assert c.fetch(topics=[("foo", [1])]) == {P1: 6}


def test_of_two_transactions_the_newer_record_wins_whichever_commits_last():
    c = TxnCoord()
    c.txn(pid=PID, offsets=[(*P0, 10)])
    c.txn(pid=PID2, offsets=[(*P0, 20)])
    c.end(pid=PID2, commit=True)
    assert c.fetch(topics=[("foo", [0])]) == {P0: 20}
    assert c.stable()[P0] == (-1, int(UNSTABLE_OFFSET_COMMIT))  # PID's is still open
    c.end(pid=PID, commit=True)
    assert c.fetch(topics=[("foo", [0])]) == {P0: 20}
    # ... and the other way round.
    c.txn(pid=PID, offsets=[(*P1, 1)])
    c.txn(pid=PID2, offsets=[(*P1, 2)])
    c.end(pid=PID, commit=True)
    c.end(pid=PID2, commit=True)
    assert c.fetch(topics=[("foo", [1])]) == {P1: 2}


# --- KIP-447 require_stable ------------------------------------------------------------------


def test_require_stable_answers_unstable_only_for_partitions_with_pending_offsets():
    c = TxnCoord()
    c.commit(offsets=[(*P0, 5), (*P1, 6)])
    c.txn(offsets=[(*P0, 10)])
    assert c.stable() == {P0: (-1, int(UNSTABLE_OFFSET_COMMIT)), P1: (6, OK), P2: (-1, OK)}
    # Without the flag the committed offset is answered, the pending one ignored.
    assert c.fetch(topics=[("foo", [0, 1])]) == {P0: 5, P1: 6}
    # Every offset of the group (topics None): the committed partitions, unstable ones flagged.
    out = fetch_group(c.shard(), "g", None, require_stable=True)
    assert {p["partition_index"]: int(p["error_code"]) for p in out["topics"][0]["partitions"]} == {
        0: int(UNSTABLE_OFFSET_COMMIT), 1: OK}
    c.end(commit=True)
    assert c.stable() == {P0: (10, OK), P1: (6, OK), P2: (-1, OK)}


def test_a_partition_stays_unstable_until_its_marker_is_committed():
    c = TxnCoord()
    c.runtime.commit_on_write = False  # a replicated partition: writes commit at the high watermark
    answer = c.runtime.submit("g", lambda shard, now: commit_transactional(shard, TxnCommitRequest(
        "tx", "g", PID, 0, topics=(("foo", FOO, (CommitPartition(0, 9),)),)), now), c.now)
    assert not answer.done
    assert c.stable()[P0] == (-1, int(UNSTABLE_OFFSET_COMMIT))  # pending, though not committed yet
    marker = c.runtime.complete_transaction(0, PID, 0, True, 7, c.now)
    assert not marker.done  # in order behind the commit, settled only once committed
    assert c.shard().pending == {}
    # The marker is written, not committed: the offset may still be lost with it.
    assert c.stable() == {P0: (-1, int(UNSTABLE_OFFSET_COMMIT)), P1: (-1, OK), P2: (-1, OK)}
    assert c.fetch(topics=[("foo", [0])]) == {P0: -1}
    c.runtime.complete_up_to(0, len(c.items[0]) - 2)
    assert answer.done and not marker.done
    assert c.stable()[P0] == (-1, int(UNSTABLE_OFFSET_COMMIT))
    c.runtime.complete_up_to(0, len(c.items[0]) - 1)
    assert marker.done and marker.error is None
    assert c.stable()[P0] == (9, OK)
    assert c.fetch(topics=[("foo", [0])]) == {P0: 9}


def test_an_uncommitted_abort_marker_keeps_the_partition_unstable_too():
    c = TxnCoord()
    c.commit(offsets=[(*P0, 5)])
    c.txn(offsets=[(*P0, 9)])
    c.runtime.commit_on_write = False
    c.runtime.complete_transaction(0, PID, 0, False, 7, c.now)
    assert c.stable()[P0] == (-1, int(UNSTABLE_OFFSET_COMMIT))
    c.runtime.complete_up_to(0, len(c.items[0]) - 1)
    assert c.stable()[P0] == (5, OK)


def test_a_marker_for_a_partition_not_served_here_fails_not_coordinator():
    c = TxnCoord()
    c.runtime.on_resignation(0)
    d = c.runtime.complete_transaction(0, PID, 0, True, 7, c.now)
    assert isinstance(d.error, CoordinatorUnavailable) and d.error.code == NOT_COORDINATOR


# --- loading ---------------------------------------------------------------------------------


def _busy_log(c: TxnCoord) -> None:
    c.txn(pid=PID, offsets=[(*P0, 10), (*P1, 11)])        # open at the end
    c.commit(offsets=[(*P1, 12)])                          # newer than PID's P1
    c.txn(pid=PID2, offsets=[(*P2, 20)])
    c.end(pid=PID2, commit=True)                           # committed
    c.txn(pid=PID2, offsets=[(*P0, 21)])
    c.end(pid=PID2, commit=False)                          # aborted
    c.txn(pid=PID2, offsets=[(*P0, 22)], group="other")    # open, another group
    c.commit(group="simple", offsets=[(*P0, 1)])


def test_a_load_rebuilds_pending_and_committed_offsets_exactly():
    c = TxnCoord()
    _busy_log(c)
    before = c.snapshot()
    assert before[0]["pending_offsets"][PID]["g"].keys() == {P0, P1}
    c.restart()
    assert c.snapshot() == before
    assert c.shard().open_txns == {"g": {P0: {PID}, P1: {PID}}, "other": {P0: {PID2}}}
    # The newest-wins bookkeeping survived too: PID's P1 is older than the plain commit.
    c.end(pid=PID, commit=True)
    c.end(pid=PID2, commit=True)
    assert c.fetch(topics=[("foo", [0, 1, 2])]) == {P0: 10, P1: 12, P2: 20}
    assert c.fetch(group="other", topics=[("foo", [0])]) == {P0: 22}
    after = c.snapshot()
    c.restart()
    assert c.snapshot() == after


def test_a_plain_commit_after_a_transactional_batch_in_the_log_is_newer_when_loaded():
    # The first plain run after a transactional batch must not take the bulk load's
    # empty-shard shortcut: it would forget that the plain commit is the newer one.
    c = TxnCoord()
    c.txn(offsets=[(*P0, 10)])
    c.commit(offsets=[(*P0, 20)])
    c.end(commit=True)
    c.restart()
    assert c.fetch(topics=[("foo", [0])]) == {P0: 20}
    c2 = TxnCoord()
    c2.txn(offsets=[(*P0, 10)])
    c2.commit(offsets=[(*P0, 20)])
    c2.restart()
    c2.end(commit=True)
    assert c2.fetch(topics=[("foo", [0])]) == {P0: 20}


def test_a_log_without_transactions_loads_as_plain_pairs():
    c = TxnCoord()
    c.commit(offsets=[(*P0, 1)])
    assert type(c.stored(0)) is list
    c.txn()
    assert isinstance(c.stored(0), R.StoredLog)


# --- deletion and expiry ---------------------------------------------------------------------


def test_offset_delete_tombstones_pending_offsets_too():
    c = TxnCoord()
    c.txn(offsets=[(*P0, 10)])
    result = delete(c.shard(), "g", [("foo", [0, 1])], c.now)
    assert result.records == [R.offset_tombstone("g", "foo", 0)]
    c.runtime.run("g", lambda shard, now: delete(shard, "g", [("foo", [0])], now), c.now)
    assert c.shard().pending == {} and c.shard().open_txns == {}
    c.end(commit=True)
    assert c.fetch(topics=[("foo", [0])]) == {P0: -1}


def test_deleting_a_group_deletes_its_pending_offsets():
    c = TxnCoord()
    c.commit(offsets=[(*P1, 3)])
    c.txn(offsets=[(*P0, 10), (*P1, 11)])
    result = c.runtime.run("g", lambda shard, now: delete_group(shard, "g", now), c.now)
    assert result == NONE
    assert c.written == [R.offset_tombstone("g", "foo", 0), R.offset_tombstone("g", "foo", 1)]
    assert c.shard().pending == {} and "g" not in c.shard().group_ids()
    c.end(commit=True)
    assert c.fetch(topics=[("foo", [0, 1])]) == {P0: -1, P1: -1}


def test_expiry_keeps_offsets_with_pending_ones_and_groups_with_open_transactions():
    c = TxnCoord()
    c.hb()  # a consumer group ...
    c.hb(epoch=-1)  # ... left empty
    c.commit(offsets=[(*P0, 1), (*P1, 2)])
    c.txn(offsets=[(*P0, 10)])
    late = c.now + c.config.offsets_retention_ms + 1
    result = expire_offsets(c.shard(), late)
    assert result.records == [R.offset_tombstone("g", "foo", 1)]  # P0 has a pending offset: kept, group kept
    c.runtime.run("g", lambda shard, now: expire_offsets(shard, late), late)
    assert c.group() is not None
    c.end(commit=False)
    # The transaction is over: the expired offset and the group go.
    assert R.group_tombstone("g") in expire_offsets(c.shard(), late).records


def test_a_group_with_only_pending_offsets_exists():
    c = TxnCoord()
    c.txn(group="fresh")
    assert "fresh" in c.shard("fresh").group_ids()
    assert expire_offsets(c.shard("fresh"), c.now + 10**12).records == []


# --- fencing: classic groups ------------------------------------------------------------------


def test_a_group_that_does_not_exist_takes_commits_without_a_generation_only():
    c = TxnCoord()
    assert c.txn(group="new", generation=0, member="m") == {P0: ILLEGAL}  # Kafka: ILLEGAL_GENERATION
    assert c.txn(group="new", generation=-1) == {P0: OK}
    # Now a simple group: naming a member of it is an unknown member.
    assert c.txn(group="new", generation=0, member="m") == {P0: UNKNOWN}


def test_classic_group_fencing():
    c = TxnCoord()
    mids, _leader, gen = form(c, 2, static=("i0",))
    assert c.txn(generation=gen, member=mids[0], instance_id="i0") == {P0: OK}
    assert c.txn(generation=gen, member="ghost") == {P0: UNKNOWN}
    assert c.txn(generation=gen + 1, member=mids[1]) == {P0: ILLEGAL}
    assert c.txn(generation=gen - 1, member=mids[1]) == {P0: ILLEGAL}
    assert c.txn(generation=gen, member=mids[1], instance_id="i0") == {P0: int(FENCED_INSTANCE_ID)}
    assert c.txn(generation=-1, member=mids[1]) == {P0: ILLEGAL}  # a member must say its generation


def test_classic_group_takes_commits_without_membership_even_when_not_empty():
    # TxnOffsetCommit v0-v2 carry no member id or generation (Kafka: isTransactional).
    c = TxnCoord()
    form(c, 2)
    assert c.txn(generation=-1) == {P0: OK}
    assert c.commit(member="", epoch=-1) == {P0: UNKNOWN}  # a plain commit is refused


def test_a_rebalance_in_progress_does_not_refuse_a_transactional_commit():
    c = TxnCoord()
    mids, _leader, gen = form(c, 2)
    for m in mids:
        c.join(member=m)
    assert state(c) == "CompletingRebalance"
    assert c.txn(generation=gen + 1, member=mids[0]) == {P0: OK}


def test_metadata_too_large_fails_that_partition_only():
    c = TxnCoord()
    big = "x" * 4097
    c_resp = c.txn(offsets=[(*P0, 1)], metadata=big)
    assert c_resp == {P0: int(OFFSET_METADATA_TOO_LARGE)}
    assert c.written == [] and c.shard().pending == {}
    assert c.txn(offsets=[(*P0, 1), (*P1, 2)]) == {P0: OK, P1: OK}


def test_a_request_without_a_producer_id_is_refused():
    c = TxnCoord()
    assert c.txn(pid=-1) == {P0: int(INVALID_PRODUCER_ID_MAPPING)}
    assert c.written == []


# --- fencing: consumer groups (KIP-848, KIP-1251) --------------------------------------------


def _a_gives_foo2_to_b():
    """A owns foo-0..2 at epoch 1; B joins (epoch 2) and takes foo-2 after A revokes it."""
    c = TxnCoord(topics=[("foo", FOO, 3)])
    c.hb(member="A")
    c.hb(member="B")
    c.hb(member="A", epoch=1)
    c.hb(member="A", epoch=1, owned={FOO: [0, 1]})
    c.hb(member="B", epoch=2)
    g = c.group()
    assert g.members["A"].member_epoch == 2 and g.members["A"].assigned[FOO] == {0: 1, 1: 1}
    assert g.members["B"].assigned[FOO] == {2: 2}
    return c, g


def test_kip_1251_a_lagging_but_valid_epoch_is_accepted():
    # KIP-1251's motivating case: A is at epoch 2, foo-0/1 were assigned to it at epoch 1,
    # and its producer commits with the epoch 1 it last heard of.
    c, _g = _a_gives_foo2_to_b()
    assert c.txn(member="A", generation=1, offsets=[(*P0, 7), (*P1, 8)]) == {P0: OK, P1: OK}
    assert c.txn(member="A", generation=2, offsets=[(*P0, 9)]) == {P0: OK}
    c.end(commit=True)
    assert c.fetch(topics=[("foo", [0, 1])]) == {P0: 9, P1: 8}


def test_kip_1251_a_zombie_commit_fails_the_whole_request():
    c, _g = _a_gives_foo2_to_b()
    # A at epoch 1 commits foo-2, which B has held since epoch 2: every partition is refused.
    assert c.txn(member="A", generation=1, offsets=[(*P0, 7), (*P2, 99)]) == {P0: ILLEGAL, P2: ILLEGAL}
    assert c.written == [] and c.shard().pending == {}


def test_kip_1251_assignment_epoch_newer_than_the_client_epoch_is_refused():
    c, g = _a_gives_foo2_to_b()
    c.hb(member="B", epoch=-1)  # B leaves: foo-2 goes back to A at epoch 3
    c.hb(member="A", epoch=2)
    assert g.members["A"].assigned[FOO][2] == 3
    assert c.txn(member="A", generation=1, offsets=[(*P2, 1)]) == {P2: ILLEGAL}
    assert c.txn(member="A", generation=3, offsets=[(*P2, 1)]) == {P2: OK}


def test_kip_1251_a_partition_not_held_only_at_the_current_epoch():
    c, _g = _a_gives_foo2_to_b()
    assert c.txn(member="B", generation=2, offsets=[(*P0, 3)]) == {P0: OK}
    assert c.txn(member="B", generation=1, offsets=[(*P0, 3)]) == {P0: ILLEGAL}


def test_consumer_group_member_checks():
    c, _g = _a_gives_foo2_to_b()
    assert c.txn(member="ghost", generation=2) == {P0: UNKNOWN}
    assert c.txn(member="A", generation=3) == {P0: ILLEGAL}  # newer than the broker's epoch
    # Without membership into a group with members: Kafka's unknown member "".
    assert c.txn(member="", generation=-1) == {P0: UNKNOWN}


def test_consumer_group_without_members_takes_commits_without_membership():
    c = TxnCoord()
    c.hb(member="A")
    c.hb(member="A", epoch=-1)
    assert c.group() is not None and not c.group().members
    assert c.txn(generation=-1) == {P0: OK}


@pytest.mark.parametrize("commit", [True, False])
def test_live_and_loaded_state_agree_after_a_marker(commit):
    c, _g = _a_gives_foo2_to_b()
    c.txn(member="A", generation=2, offsets=[(*P0, 7)])
    c.end(commit=commit)
    before = c.snapshot()
    c.restart()
    assert c.snapshot() == before
