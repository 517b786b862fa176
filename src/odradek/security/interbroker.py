"""How a broker connects to the others (replica fetchers, transaction markers): as a client
of their inter-broker listener, with that listener's security, as Kafka's brokers do.

- the protocol is the inter-broker listener's (`inter.broker.listener.name`);
- TLS: the broker trusts `ssl.truststore.location` (or `ssl.truststore.certificates`) of
  that listener and presents its own keystore as its client certificate (for
  `ssl.client.auth`); `ssl.endpoint.identification.algorithm` (https by default) checks the
  other broker's host name against its certificate;
- SASL: `sasl.mechanism.inter.broker.protocol` (Kafka's default GSSAPI is not offered here,
  so odradek's default is the listener's first enabled mechanism), with the `username` and
  `password` options of that mechanism's JAAS entry of the listener
  (`listener.name.<name>.<mechanism>.sasl.jaas.config`: a PlainLoginModule or
  ScramLoginModule entry, as in Kafka's broker configs).
"""

from __future__ import annotations

from ..client.security import ClientSecurity
from .listeners import Listener, listener_setting
from .plain import parse_jaas


def client_security(props, listener: Listener) -> ClientSecurity:
    def get(key: str, default: str | None = None) -> str | None:
        return listener_setting(props, listener, key, default)

    out: dict[str, str] = {"security.protocol": listener.protocol}
    if listener.tls:
        trust = get("ssl.truststore.location")
        if trust:
            out["ssl.ca.location"] = trust
        elif get("ssl.truststore.certificates"):
            out["ssl.truststore.certificates"] = get("ssl.truststore.certificates")
        keystore = get("ssl.keystore.location")
        if keystore:
            out["ssl.keystore.location"] = keystore  # one PEM file with the key and the chain
            if get("ssl.key.password"):
                out["ssl.key.password"] = get("ssl.key.password")
        out["ssl.endpoint.identification.algorithm"] = get("ssl.endpoint.identification.algorithm", "https") or ""
    if listener.sasl:
        enabled = [m.strip().upper() for m in (get("sasl.enabled.mechanisms") or "").split(",") if m.strip()]
        mechanism = (props.get("sasl.mechanism.inter.broker.protocol") or (enabled[0] if enabled else "PLAIN")).upper()
        jaas = get(f"{mechanism.lower()}.sasl.jaas.config")
        options = parse_jaas(jaas)[0].options if jaas else {}
        if "username" not in options or "password" not in options:
            raise ValueError(f"the inter-broker listener {listener.name} speaks SASL/{mechanism}: its "
                             f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config needs "
                             "username and password (the broker's own credentials)")
        out.update({"sasl.mechanism": mechanism, "sasl.username": options["username"],
                    "sasl.password": options["password"]})
    return ClientSecurity.from_properties(out)


__all__ = ["client_security"]
