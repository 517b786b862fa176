"""Brokers of a real etcd cluster on one event loop, for the replication and fail-over tests:
started with short leases and fetch waits, and called through `handle_frame` (the wire
codecs included)."""

from __future__ import annotations

from pathlib import Path

from odradek.broker.broker import Broker
from odradek.broker.server import BrokerServer
from odradek.config import BrokerConfig
from tests.wire import parse_response, request_frame


async def start_brokers(data: Path, etcd, nodes, extra: dict[str, str] | None = None, **config) -> list[BrokerServer]:
    """One BrokerServer per (node id, rack or None) in `nodes`, each listening on loopback."""
    servers = []
    for node, rack in nodes:
        cfg = BrokerConfig(node_id=node, rack=rack, listen_port=0, data_dir=data / f"b{node}", metadata_url=etcd.url,
                           **{"broker_session_timeout_ms": 2000, "replica_fetch_wait_max_ms": 100, **config})
        cfg.extra.update({"offsets.topic.num.partitions": "1", **(extra or {})})
        server = BrokerServer(Broker(cfg))
        await server.start()
        servers.append(server)
    return servers


async def call(broker: Broker, api: int, version: int, body: dict):
    """One request through the broker's dispatch; the parsed response body."""
    raw = await broker.handle_frame(request_frame(api, version, body, correlation_id=9)[4:])
    return parse_response(api, version, raw)[1]
