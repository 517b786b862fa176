"""Listeners as Kafka configures them: `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `inter.broker.listener.name`, and the per-listener
settings under `listener.name.<name>.`.

`listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093` names each listener; its security
protocol is the name's entry in `listener.security.protocol.map` (default: each of
PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL maps to itself, so other names need an entry);
an empty host binds every interface. `advertised.listeners` gives the addresses clients
are told (per listener name; those missing advertise what they listen on).
`inter.broker.listener.name` is the listener other brokers use (default: the one named
`security.inter.broker.protocol`, PLAINTEXT, as in Kafka; else the first listener).

A listener's setting `key` is `listener.name.<lower-case name>.<key>` when given, else
`key` itself (Kafka's ListenerName.configPrefix). SASL mechanism settings are prefixed by
the mechanism too: `listener.name.sasl_ssl.plain.sasl.jaas.config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}


class ListenerError(ValueError):
    pass


def uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def uses_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class Listener:
    name: str
    host: str  # to bind ("" in the setting: every interface)
    port: int  # 0: any free port, filled in once bound
    protocol: str
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def tls(self) -> bool:
        return uses_tls(self.protocol)

    @property
    def sasl(self) -> bool:
        return uses_sasl(self.protocol)

    @property
    def advertised(self) -> tuple[str, int]:
        return self.advertised_host or self.host, self.advertised_port or self.port

    def prefix(self) -> str:
        return f"listener.name.{self.name.lower()}."


def parse_protocol_map(value: str) -> dict[str, str]:
    out = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in PROTOCOLS:
            raise ListenerError(f"listener.security.protocol.map entry {item!r} is not NAME:PROTOCOL "
                                f"with a protocol of {', '.join(PROTOCOLS)}")
        out[name.strip().upper()] = protocol
    return out


def _endpoints(value: str, key: str) -> list[tuple[str, str, int]]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep:
            raise ListenerError(f"{key} entry {item!r} is not NAME://HOST:PORT")
        host, _, port = rest.rpartition(":")
        if not port.isdigit():
            raise ListenerError(f"{key} entry {item!r} has no port")
        out.append((name.strip().upper(), host.strip("[]"), int(port)))
    names = [n for n, _h, _p in out]
    if len(set(names)) != len(names):
        raise ListenerError(f"{key} names a listener twice: {value}")
    return out


def parse_listeners(props: Mapping[str, str]) -> list[Listener]:
    """The listeners the properties configure, the inter-broker one first; [] when
    `listeners` is not set (the broker's single PLAINTEXT listener then)."""
    if not props.get("listeners", "").strip():
        return []
    protocols = {**DEFAULT_PROTOCOL_MAP, **parse_protocol_map(props.get("listener.security.protocol.map", ""))}
    listeners = []
    for name, host, port in _endpoints(props["listeners"], "listeners"):
        if name not in protocols:
            raise ListenerError(f"listener {name} has no security protocol: add it to "
                                "listener.security.protocol.map")
        listeners.append(Listener(name, host or "0.0.0.0", port, protocols[name]))
    ports = [lst.port for lst in listeners if lst.port]
    if len(set(ports)) != len(ports):
        raise ListenerError(f"listeners share a port: {props['listeners']}")
    by_name = {lst.name: lst for lst in listeners}
    for name, host, port in _endpoints(props.get("advertised.listeners", ""), "advertised.listeners"):
        if name not in by_name:
            raise ListenerError(f"advertised.listeners names {name}, which is not in listeners")
        by_name[name].advertised_host, by_name[name].advertised_port = host or None, port
    inter = props.get("inter.broker.listener.name", "").strip().upper()
    if inter:
        if inter not in by_name:
            raise ListenerError(f"inter.broker.listener.name {inter} is not in listeners")
    else:
        wanted = props.get("security.inter.broker.protocol", "PLAINTEXT").strip().upper()
        inter = next((lst.name for lst in listeners if lst.name == wanted), listeners[0].name)
    return [by_name[inter]] + [lst for lst in listeners if lst.name != inter]


def listener_setting(props: Mapping[str, str], listener: Listener | None, key: str,
                     default: str | None = None) -> str | None:
    """A listener's own value of `key` (listener.name.<name>.<key>), else the broker's."""
    if listener is not None:
        value = props.get(listener.prefix() + key)
        if value is not None:
            return value
    return props.get(key, default)


__all__ = ["DEFAULT_PROTOCOL_MAP", "PROTOCOLS", "Listener", "ListenerError", "listener_setting", "parse_listeners",
           "parse_protocol_map"]
