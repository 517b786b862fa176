from odradek.security.acl import OPEN, ResourceType
from odradek.security.operations import NOT_REQUESTED, SUPPORTED, AclOperation, cluster_operations, to_bitfield


def authorized_operations(resource: str) -> int:
    """The field a principal gets with no authorizer configured (Access OPEN)."""
    return to_bitfield(OPEN.operations(ResourceType[resource.upper()], "r", SUPPORTED[resource]))


def test_bitfield_sets_one_bit_per_operation_code():
    assert to_bitfield([AclOperation.READ, AclOperation.WRITE]) == (1 << 3) | (1 << 4)
    assert to_bitfield([]) == 0


def test_without_an_authorizer_every_supported_operation_is_allowed():
    # AclEntry.supportedOperations: 8 for a topic (librdkafka 0081 counts them), 5 for a
    # group, 7 for the cluster.
    assert bin(authorized_operations("topic")).count("1") == 8
    assert bin(authorized_operations("group")).count("1") == 5
    assert bin(authorized_operations("cluster")).count("1") == 7
    assert authorized_operations("topic") & (1 << AclOperation.ALTER_CONFIGS)
    assert not authorized_operations("group") & (1 << AclOperation.WRITE)


def test_not_requested_is_int32_min():
    assert cluster_operations(OPEN, False) == NOT_REQUESTED == -(2**31)
