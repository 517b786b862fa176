"""Listener settings as Kafka reads them (listeners, the protocol map, advertised and inter-broker names)."""

from __future__ import annotations

import pytest

from odradek.config import BrokerConfig, apply_properties, parse_properties
from odradek.security.listeners import ListenerError, listener_setting, parse_listeners


def apply(text: str) -> BrokerConfig:
    return apply_properties(BrokerConfig(), parse_properties(text))


def test_several_listeners_with_the_default_protocol_map():
    ls = parse_listeners({"listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093,SSL://h:9094"})
    assert [(lst.name, lst.host, lst.port, lst.protocol) for lst in ls] == [
        ("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"), ("SASL_SSL", "0.0.0.0", 9093, "SASL_SSL"),
        ("SSL", "h", 9094, "SSL")]
    assert ls[1].tls and ls[1].sasl and ls[2].tls and not ls[2].sasl and not ls[0].tls


def test_custom_names_need_the_protocol_map():
    with pytest.raises(ListenerError, match="listener.security.protocol.map"):
        parse_listeners({"listeners": "CLIENT://:9092"})
    ls = parse_listeners({"listeners": "CLIENT://:9092,INTERNAL://:9093",
                          "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT",
                          "inter.broker.listener.name": "INTERNAL"})
    assert [(lst.name, lst.protocol) for lst in ls] == [("INTERNAL", "PLAINTEXT"), ("CLIENT", "SASL_SSL")]


def test_inter_broker_listener_defaults_to_plaintext_then_the_first():
    assert parse_listeners({"listeners": "SSL://:1,PLAINTEXT://:2"})[0].name == "PLAINTEXT"
    assert parse_listeners({"listeners": "SSL://:1,SASL_SSL://:2"})[0].name == "SSL"
    assert parse_listeners({"listeners": "SSL://:1,SASL_SSL://:2",
                            "security.inter.broker.protocol": "SASL_SSL"})[0].name == "SASL_SSL"


def test_advertised_listeners_per_name():
    ls = parse_listeners({"listeners": "PLAINTEXT://:9092,SSL://:9093",
                          "advertised.listeners": "SSL://kafka.example:19093"})
    assert ls[0].advertised == ("0.0.0.0", 9092)
    assert ls[1].advertised == ("kafka.example", 19093)


@pytest.mark.parametrize("props,why", [
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "twice"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "share a port"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://x:1"}, "not in listeners"),
    ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "SSL"}, "not in listeners"),
    ({"listeners": "A://:1", "listener.security.protocol.map": "A:TLS"}, "NAME:PROTOCOL"),
    ({"listeners": "PLAINTEXT://nohost"}, "no port"),
])
def test_bad_listener_settings(props, why):
    with pytest.raises(ListenerError, match=why):
        parse_listeners(props)


def test_listener_prefixed_settings_win():
    ls = parse_listeners({"listeners": "SASL_SSL://:9093"})
    props = {"listener.name.sasl_ssl.ssl.client.auth": "required", "ssl.client.auth": "none"}
    assert listener_setting(props, ls[0], "ssl.client.auth") == "required"
    assert listener_setting(props, None, "ssl.client.auth") == "none"
    assert listener_setting({}, ls[0], "ssl.client.auth", "none") == "none"


def test_broker_config_keeps_every_listener_and_the_inter_broker_address():
    c = apply("listeners=SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092\n"
              "advertised.listeners=SASL_SSL://kafka.example:9093\n")
    assert (c.listen_host, c.listen_port) == ("127.0.0.1", 9092)
    assert [lst.name for lst in c.effective_listeners()] == ["PLAINTEXT", "SASL_SSL"]
    b = c.broker_configs()
    assert b["listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093"
    assert b["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_SSL://kafka.example:9093"


def test_without_listeners_the_broker_has_one_plaintext_listener():
    c = BrokerConfig(listen_host="127.0.0.1", listen_port=0)
    [only] = c.effective_listeners()
    assert (only.name, only.protocol, only.host, only.port) == ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0)
