"""Authorized operations (KIP-430) as Metadata, DescribeCluster, DescribeGroups and
ConsumerGroupDescribe report them.

Kafka's AuthHelper.authorizedOperations answers the operations of the resource type
(AclEntry.supportedOperations) the principal may do: all of them when no authorizer is
configured, else what the authorizer allows (security/acl.py Access.operations). The answer is a 32-bit field with bit `code` set for each AclOperation
code; INT32_MIN means "not requested".
"""

from __future__ import annotations

from collections.abc import Iterable

from .acl import Operation

# org.apache.kafka.common.acl.AclOperation codes: one enum for the authorizer and these fields.
AclOperation = Operation

NOT_REQUESTED = -(2**31)

_Op = AclOperation
# AclEntry.supportedOperations (Kafka 4.x)
SUPPORTED = {
    "topic": (_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DESCRIBE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE_CONFIGS,
              _Op.ALTER_CONFIGS),
    "group": (_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS),
    "cluster": (_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS, _Op.IDEMPOTENT_WRITE,
                _Op.ALTER, _Op.DESCRIBE),
}


def to_bitfield(ops: Iterable[int]) -> int:
    """Kafka's Utils.to32BitField: bit `code` for each operation."""
    field = 0
    for op in ops:
        field |= 1 << int(op)
    return field


def cluster_operations(access, requested: bool) -> int:
    """The cluster's field (Metadata v8-10, DescribeCluster): what the principal may do
    to the cluster if it may DESCRIBE it, else 0 (Kafka's AuthHelper)."""
    if not requested:
        return NOT_REQUESTED
    from .acl import CLUSTER_NAME, Operation, ResourceType

    if not access.cluster(Operation.DESCRIBE):
        return 0
    return to_bitfield(access.operations(ResourceType.CLUSTER, CLUSTER_NAME, SUPPORTED["cluster"]))
