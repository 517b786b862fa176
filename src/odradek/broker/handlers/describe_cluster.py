"""DescribeCluster v0-v2 (used by AdminClient.describe_cluster)."""

from __future__ import annotations

from ...protocol.errors import NONE
from ...security.operations import cluster_operations
from ..registry import api
from .metadata import listener_of

BROKERS_ENDPOINT = 1
UNSUPPORTED_ENDPOINT_TYPE = 115


@api(60, "DescribeCluster", 0, 2)
def describe_cluster(broker, request):
    endpoint_type = request.field("endpoint_type", BROKERS_ENDPOINT)
    error, message = NONE, None
    brokers = [{"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "is_fenced": False}
               for b in broker.replicas.brokers(listener_of(request))]
    if endpoint_type != BROKERS_ENDPOINT:
        # A broker answers only for brokers; controllers are asked directly (KIP-919).
        error, message, brokers = UNSUPPORTED_ENDPOINT_TYPE, "this node is a broker", []
    return {
        "throttle_time": 0,
        "error_code": error,
        "error_message": message,
        "endpoint_type": endpoint_type,
        "cluster_id": broker.metadata.cluster_id,
        "controller_id": broker.replicas.controller(),
        "brokers": brokers,
        "cluster_authorized_operations": cluster_operations(
            broker.access(request), bool(request.field("include_cluster_authorized_operations", False))),
    }
