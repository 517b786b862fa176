"""API versions the client speaks, and negotiation against a broker's ApiVersions.

Theory of operation: for each API the client uses we list the versions its request
builders and response readers handle (fields absent from a version are dropped by
`protocol.messages.build`, and readers use `getattr` defaults, so one code path serves
a range). On connect the client asks the broker (ApiVersions v3, falling back to v0 as
KIP-511 describes) and picks, per API, the highest version inside both ranges. An API
the broker does not list, or lists with no overlap, raises `UnsupportedApiError` when
first used, naming the API.

Maxima are chosen deliberately: Fetch stays at v12 and Metadata/OffsetCommit/OffsetFetch
below their topic-id versions, so the client addresses topics by name everywhere except
ConsumerGroupHeartbeat (which has only ids) and keeps working against older brokers.
"""

from __future__ import annotations

from enum import IntEnum

from .errors import UnsupportedApiError


class Api(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DELETE_TOPICS = 20
    DELETE_GROUPS = 42
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


# (min, max) the client implements.
CLIENT_VERSIONS: dict[Api, tuple[int, int]] = {
    Api.PRODUCE: (3, 9),
    Api.FETCH: (4, 12),
    Api.LIST_OFFSETS: (1, 8),
    Api.METADATA: (1, 12),
    Api.OFFSET_COMMIT: (2, 9),
    Api.OFFSET_FETCH: (1, 7),
    Api.FIND_COORDINATOR: (0, 6),
    Api.JOIN_GROUP: (2, 9),
    Api.HEARTBEAT: (0, 4),
    Api.LEAVE_GROUP: (0, 5),
    Api.SYNC_GROUP: (0, 5),
    Api.DESCRIBE_GROUPS: (0, 5),
    Api.LIST_GROUPS: (0, 5),
    Api.API_VERSIONS: (0, 3),
    Api.SASL_HANDSHAKE: (1, 1),  # v1: tokens in SaslAuthenticate (v0's raw frames are not spoken)
    Api.SASL_AUTHENTICATE: (0, 2),  # v1+: the session lifetime (KIP-368)
    Api.CREATE_TOPICS: (2, 7),
    Api.INIT_PRODUCER_ID: (0, 4),
    # KIP-320 position validation; v3 is the first with replica_id (-1: a consumer, whose
    # answer the broker caps at the high watermark, KIP-392), as Java's consumer requires.
    Api.OFFSET_FOR_LEADER_EPOCH: (3, 4),
    Api.DELETE_TOPICS: (1, 6),
    Api.DELETE_GROUPS: (0, 2),
    Api.CREATE_PARTITIONS: (0, 3),
    Api.OFFSET_DELETE: (0, 0),
    Api.DESCRIBE_CLUSTER: (0, 1),
    Api.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    Api.CONSUMER_GROUP_DESCRIBE: (0, 1),
}


def api_name(key: int) -> str:
    try:
        return "".join(part.title() for part in Api(key).name.split("_"))
    except ValueError:
        return f"api {key}"


def negotiate(broker: dict[int, tuple[int, int]]) -> dict[int, int | UnsupportedApiError]:
    """api key -> version to use, or the error to raise when that API is used."""
    chosen: dict[int, int | UnsupportedApiError] = {}
    for api, (lo, hi) in CLIENT_VERSIONS.items():
        span = broker.get(api)
        if span is None:
            chosen[api] = UnsupportedApiError(api_name(api), int(api), "not in the broker's ApiVersions")
        elif span[1] < lo or span[0] > hi:
            chosen[api] = UnsupportedApiError(
                api_name(api), int(api), f"broker serves v{span[0]}-{span[1]}, client speaks v{lo}-{hi}")
        else:
            chosen[api] = min(hi, span[1])
    return chosen
