"""InitProducerId v0-v5, for idempotent (non-transactional) producers.

kafka-python 3.0 and the Java client enable idempotence by default once the broker
looks new enough, so this API is needed for them to produce at all. Transactions are
not implemented: a request naming a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a non-retriable error, so the client fails fast.
KIP-360: a producer that names its current id and epoch gets the epoch bumped.
"""

from __future__ import annotations

from ...protocol.errors import NONE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
from ..registry import api

MAX_EPOCH = 32767


@api(22, "InitProducerId", 0, 5)
async def init_producer_id(broker, request):
    body = request.body
    if body.transactional_id is not None:
        return {"throttle_time": 0, "error_code": TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "producer_id": -1, "producer_epoch": -1}
    pid = request.field("producer_id", -1)
    epoch = request.field("producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return {"throttle_time": 0, "error_code": NONE, "producer_id": pid, "producer_epoch": epoch + 1}
    return {"throttle_time": 0, "error_code": NONE, "producer_id": await broker.metadata.allocate_producer_id(),
            "producer_epoch": 0}
