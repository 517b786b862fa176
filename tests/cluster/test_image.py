"""cluster/image.local_changes: what one broker must do about a new cluster image."""

from odradek.cluster.image import ClusterImage, PartitionState, local_changes


def img(**parts):
    return ClusterImage.of("c", [], 1, 1, {(k, 0): v for k, v in parts.items()})


def st(leader, epoch=0, isr=(1, 2, 3), replicas=(1, 2, 3), pe=0):
    return PartitionState(replicas, leader, epoch, isr, pe)


def test_new_partitions_split_into_leader_and_follower_roles():
    ch = local_changes(img(), img(a=st(1), b=st(2), c=st(3, replicas=(2, 3, 4))), node_id=1)
    assert set(ch.leaders) == {("a", 0)}
    assert set(ch.followers) == {("b", 0)}
    assert not ch.deletes  # c was never hosted here


def test_unchanged_partitions_are_not_reported():
    same = img(a=st(1))
    assert not local_changes(same, img(a=st(1)), 1)


def test_leader_change_turns_the_old_leader_into_a_follower():
    ch = local_changes(img(a=st(1, 0)), img(a=st(2, 1, isr=(2, 3))), 1)
    assert ch.followers == {("a", 0): st(2, 1, isr=(2, 3))}
    assert not ch.leaders


def test_isr_only_change_is_reported_to_the_leader():
    ch = local_changes(img(a=st(1, 0, pe=5)), img(a=st(1, 0, isr=(1, 2), pe=9)), 1)
    assert ch.leaders[("a", 0)].isr == (1, 2)


def test_deleted_and_reassigned_partitions_stop():
    ch = local_changes(img(a=st(1), b=st(2)), img(b=st(2, replicas=(2, 3), isr=(2, 3))), 1)
    assert ch.deletes == {("a", 0), ("b", 0)}


def test_a_delta_limits_the_comparison_to_the_changed_topics():
    old = img(a=st(1))
    new = ClusterImage.of("c", [], 1, 1, {("a", 0): st(2, 1), ("b", 0): st(1)}, changed=["b"])
    ch = local_changes(old, new, 1)
    # Only b was named as changed: a's difference is not looked at (the backend vouches for it).
    assert set(ch.leaders) == {("b", 0)} and not ch.followers
    gone = ClusterImage.of("c", [], 1, 1, {}, changed=["a"])
    assert local_changes(old, gone, 1).deletes == {("a", 0)}


def test_only_partition_count_changes_reach_the_group_coordinator():
    from odradek.cluster.image import partitions_added_or_removed

    old = img(a=st(1))
    isr_only = ClusterImage.of("c", [], 1, 1, {("a", 0): st(1, isr=(1, 2))}, changed=["a"])
    assert not partitions_added_or_removed(old, isr_only)
    grown = ClusterImage.of("c", [], 1, 1, {("a", 0): st(1), ("a", 1): st(1)}, changed=["a"])
    assert partitions_added_or_removed(old, grown)
    assert partitions_added_or_removed(old, ClusterImage.of("c", [], 1, 1, {}, changed=None))
