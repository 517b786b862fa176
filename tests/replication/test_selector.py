"""replication/selector: KIP-392's preferred read replica, as shipped Kafka's broker picks it."""

import pytest

from odradek.replication.selector import (
    NO_PREFERENCE,
    RACK_AWARE_CLASS,
    ClientMetadata,
    FollowerSnapshot,
    RackAwareReplicaSelector,
    ReplicaView,
    preferred_read_replica,
    selector_named,
)

RACKS = {1: "a", 2: "b", 3: "c", 4: "c"}


def pick(client_rack, fetch_offset=10, selector=RACK_AWARE_CLASS, followers=None, isr=(1, 2, 3, 4), now=1000):
    followers = followers or [FollowerSnapshot(2, 0, 20, 990), FollowerSnapshot(3, 0, 20, 900),
                              FollowerSnapshot(4, 0, 20, 995)]
    chosen = selector if selector is None or isinstance(selector, str) else selector
    chosen = selector_named(chosen) if isinstance(chosen, str) or chosen is None else chosen
    return preferred_read_replica(chosen, ClientMetadata(client_rack), fetch_offset, leader_id=1,
                                  leader_rack="a", leader_log_end=20, followers=followers, isr=set(isr),
                                  racks=RACKS, now_ms=now)


def test_no_selector_configured_means_no_preference():
    assert pick("c", selector=None) == NO_PREFERENCE


def test_the_leader_selector_never_moves_the_consumer():
    assert pick("c", selector="org.apache.kafka.common.replica.LeaderSelector") == NO_PREFERENCE


def test_a_consumer_in_the_leaders_rack_or_without_a_rack_stays_with_the_leader():
    assert pick("a") == NO_PREFERENCE
    assert pick("") == NO_PREFERENCE and pick(None) == NO_PREFERENCE
    assert pick("z") == NO_PREFERENCE  # nobody in that rack


def test_a_consumer_in_another_rack_goes_to_the_most_caught_up_replica_there():
    assert pick("b") == 2
    # Two in rack c with the same log end: the more recently caught up one (4: 5 ms ago, 3: 100 ms).
    assert pick("c") == 4
    ahead = [FollowerSnapshot(3, 0, 25, 900), FollowerSnapshot(4, 0, 20, 999)]
    assert pick("c", followers=ahead) == 3  # the log end comes first


def test_only_isr_followers_holding_the_fetch_offset_are_offered():
    assert pick("b", isr=(1, 3, 4)) == NO_PREFERENCE  # 2 is out of the ISR
    behind = [FollowerSnapshot(2, 0, 5, 990)]
    assert pick("b", fetch_offset=10, followers=behind) == NO_PREFERENCE  # its log ends before the offset
    trimmed = [FollowerSnapshot(2, 15, 20, 990)]
    assert pick("b", fetch_offset=10, followers=trimmed) == NO_PREFERENCE  # its log starts after it


def test_the_short_name_and_unknown_names():
    assert isinstance(selector_named("rack-aware"), RackAwareReplicaSelector)
    assert isinstance(selector_named(RACK_AWARE_CLASS), RackAwareReplicaSelector)
    assert selector_named(None) is None and selector_named("") is None
    with pytest.raises(ValueError, match="replica.selector.class"):
        selector_named("com.example.Mine")
    with pytest.raises(ValueError, match="replica.selector.class"):
        selector_named("Mine")
    with pytest.raises(ValueError, match="no select"):
        selector_named("collections.OrderedDict")


class LowestIdInRack:
    """A user's selector (the KIP-392 plugin interface): the lowest broker id in the client's
    rack, configured with the broker's properties."""

    def configure(self, configs):
        self.configs = configs

    def select(self, topic_partition, client, partition):
        same = sorted((r for r in partition.replicas if r.rack == client.rack_id), key=lambda r: r.broker_id)
        return same[0] if same else None


def test_a_users_selector_is_loaded_by_name_configured_and_obeyed():
    name = f"{__name__}:LowestIdInRack"
    mine = selector_named(name, {"replica.selector.class": name, "x": "1"})
    assert isinstance(mine, LowestIdInRack) and mine.configs["x"] == "1"
    assert isinstance(selector_named(f"{__name__}.LowestIdInRack"), LowestIdInRack)
    assert pick("c", selector=mine) == 3  # the rack-aware one picks 4 (more recently caught up)
    assert pick("z", selector=mine) == NO_PREFERENCE  # None: stay with the leader


class Wayward:
    """A selector naming a replica it was not offered (out of the ISR): ignored."""

    def select(self, topic_partition, client, partition):
        return ReplicaView(2, "b", 20, 0)


def test_a_selector_cannot_send_a_consumer_to_a_replica_it_was_not_offered():
    assert pick("b", selector=Wayward()) == 2
    assert pick("b", selector=Wayward(), isr=(1, 3, 4)) == NO_PREFERENCE
