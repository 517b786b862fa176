"""ApiVersions, including the KIP-511 fallback for versions we do not know."""

from __future__ import annotations

import re

from ...protocol.errors import INVALID_REQUEST, NONE, UNSUPPORTED_VERSION
from ...protocol.messages import build, encode_entity, response_class
from ..registry import api

# KIP-511: client software name and version must match this (Kafka's ApiVersionsRequest.isValid).
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def _api_keys(broker) -> list[dict]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in broker.supported.items()]


@api(18, "ApiVersions", 0, 4)
def api_versions(broker, request):
    error = NONE
    if request.api_version >= 3:
        name = request.field("client_software_name", "")
        version = request.field("client_software_version", "")
        if not (_SOFTWARE.fullmatch(name or "") and _SOFTWARE.fullmatch(version or "")):
            error = INVALID_REQUEST
    return {
        "error_code": error,
        "api_keys": _api_keys(broker),
        "throttle_time": 0,
        "supported_features": [],
        "finalized_features_epoch": -1,
        "finalized_features": [],
        "zk_migration_ready": False,
    }


def unsupported_version_response(broker, correlation_id: int) -> bytes:
    """KIP-511: a v0 response with UNSUPPORTED_VERSION and our ranges, so the client can retry."""
    cls = response_class(18, 0)
    payload = build(cls, {"error_code": UNSUPPORTED_VERSION, "api_keys": _api_keys(broker)})
    return encode_entity(cls.__header_schema__, correlation_id, payload)
