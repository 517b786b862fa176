from odradek.security.operations import NOT_REQUESTED, AclOperation, authorized_operations, to_bitfield


def test_bitfield_sets_one_bit_per_operation_code():
    assert to_bitfield([AclOperation.READ, AclOperation.WRITE]) == (1 << 3) | (1 << 4)
    assert to_bitfield([]) == 0


def test_without_an_authorizer_every_supported_operation_is_allowed():
    # AclEntry.supportedOperations: 8 for a topic (librdkafka 0081 counts them), 5 for a
    # group, 7 for the cluster.
    assert bin(authorized_operations("topic", True)).count("1") == 8
    assert bin(authorized_operations("group", True)).count("1") == 5
    assert bin(authorized_operations("cluster", True)).count("1") == 7
    assert authorized_operations("topic", True) & (1 << AclOperation.ALTER_CONFIGS)
    assert not authorized_operations("group", True) & (1 << AclOperation.WRITE)


def test_not_requested_is_int32_min():
    assert authorized_operations("topic", False) == NOT_REQUESTED == -(2**31)
