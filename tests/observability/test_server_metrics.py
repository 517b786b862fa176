"""Metrics only a real BrokerServer on loopback can show: failed TLS handshakes counted as
failed authentications (Kafka's failed-authentication-total counts SSL handshake failures),
and the requests being handled now (KIP-848 event-queue-size), read off the connections."""

from __future__ import annotations

import asyncio
import gc
import ssl

from odradek.broker.broker import Broker
from odradek.broker.server import BrokerServer
from odradek.config import BrokerConfig, apply_properties
from odradek.security.certs import CertificateAuthority
from tests.wire import request_frame


def _pki(d):
    ca = CertificateAuthority()
    (d / "ca.pem").write_bytes(ca.cert_pem)
    ca.issue("CN=localhost", ["localhost", "127.0.0.1"]).write(d, "broker")
    ca.issue("CN=alice", client=True).write(d, "alice")


async def _attempt(port: int, ctx: ssl.SSLContext | None) -> None:
    """Connect (with TLS when `ctx`), write a few bytes, read until the broker closes or
    5 s pass; the broker's verdict is what the test reads from its stats."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost" if ctx else None), 5)
    except (ssl.SSLError, ConnectionError, OSError):
        return
    try:
        # Plaintext: not a TLS hello, so the server's handshake fails. TLS 1.3: the server's
        # verdict on a client certificate arrives after the client's handshake is done.
        writer.write(b"\x00\x00\x00\x0cnot a TLS hello" if ctx is None else b"\x00\x00\x00\x00")
        await asyncio.wait_for(reader.read(), 5 if ctx is None else 0.5)
    except (ssl.SSLError, ConnectionError, OSError, TimeoutError):
        pass
    writer.close()


def test_failed_tls_handshakes_are_failed_authentications(tmp_path):
    _pki(tmp_path)
    cfg = BrokerConfig(data_dir=tmp_path / "data", metrics_listener="127.0.0.1:0")
    apply_properties(cfg, {"listeners": "SSL://127.0.0.1:0", "ssl.client.auth": "required",
                           "ssl.keystore.location": str(tmp_path / "broker-keystore.pem"),
                           "ssl.truststore.location": str(tmp_path / "ca.pem")})

    async def main():
        server = BrokerServer(Broker(cfg))
        await server.start()
        try:
            port = server.port
            good = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
            good.load_cert_chain(str(tmp_path / "alice.pem"), str(tmp_path / "alice-key.pem"))
            no_cert = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
            await _attempt(port, None)  # plaintext into a TLS listener
            await _attempt(port, no_cert)  # the listener requires a client certificate
            await _attempt(port, good)
            stats = server.broker.stats
            for _ in range(50):  # each failed handshake is counted when asyncio drops its protocol
                gc.collect()
                if stats.auth_failed[("SSL", "SSL")] >= 2:
                    break
                await asyncio.sleep(0.05)
            return dict(stats.auth_failed), dict(stats.auth_succeeded)
        finally:
            await server.stop()

    failed, succeeded = asyncio.run(main())
    assert failed == {("SSL", "SSL"): 2}
    assert succeeded == {("SSL", "SSL"): 1}


def test_requests_in_flight_are_read_off_the_connections(tmp_path):
    # A Fetch that waits (max_wait 1.5 s, nothing to read) is a request being handled until
    # it is answered; KIP-848's event-queue-size reports such requests.
    cfg = BrokerConfig(data_dir=tmp_path / "data", listen_port=0, metrics_listener="127.0.0.1:0")

    async def main():
        server = BrokerServer(Broker(cfg))
        await server.start()
        broker = server.broker
        broker.create_topic("t", 1, {})
        try:
            idle = broker.requests_in_flight()
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(request_frame(1, 12, {
                "replica_id": -1, "max_wait": 1500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                          "fetch_offset": 0, "log_start_offset": -1,
                                                          "partition_max_bytes": 1 << 20}]}]}))
            await writer.drain()
            await asyncio.sleep(0.5)
            waiting = broker.requests_in_flight()
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
            await reader.readexactly(size)
            await asyncio.sleep(0.05)
            answered = broker.requests_in_flight()
            writer.close()
            return idle, waiting, answered
        finally:
            await server.stop()

    assert asyncio.run(main()) == (0, 1, 0)
