"""The Kafka tools' shared pieces: topic filters, client properties, error texts."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import KafkaError
from odradek.commands.kafka_scripts.common import (
    ToolError,
    TopicFilter,
    client_config,
    error_text,
    key_values,
)


def test_topic_filter_is_kafkas_include_list():
    f = TopicFilter(" 'orders.*, payments' ")  # quotes and spaces dropped, ',' is '|'
    assert f.regex == "orders.*|payments"
    assert f.allows("orders-eu", internal=False, exclude_internal=False)
    assert f.allows("payments", internal=False, exclude_internal=False)
    assert not f.allows("payments-eu", internal=False, exclude_internal=False)  # whole-name match
    assert TopicFilter("__consumer.*").allows("__consumer_offsets", internal=True, exclude_internal=False)
    assert not TopicFilter("__consumer.*").allows("__consumer_offsets", internal=True, exclude_internal=True)
    with pytest.raises(ToolError, match="is an invalid regex"):
        TopicFilter("[")


def test_key_values_split_at_the_first_equals_sign():
    assert key_values(["a=1", "b=x=y", "c", "d="]) == {"a": "1", "b": "x=y", "c": "", "d": ""}


def test_client_config_maps_java_properties(capsys):
    props = {"bootstrap.servers": "ignored", "client.id": "me", "acks": "-1", "linger.ms": "5",
             "enable.idempotence": "false", "buffer.memory": "1", "security.protocol": "plaintext"}
    assert client_config(props, "producer", tool="t") == {"client_id": "me", "acks": "all", "linger_ms": 5.0,
                                                          "enable_idempotence": False,
                                                          "security": {"security.protocol": "plaintext"}}
    assert capsys.readouterr().err == "t: ignoring producer properties odradek's client does not support: " \
                                      "buffer.memory\n"
    consumer = client_config({"group.id": "g", "group.protocol": "CONSUMER", "partition.assignment.strategy":
                              "org.apache.kafka.clients.consumer.RangeAssignor,cooperative-sticky"},
                             "consumer", tool="t")
    assert consumer == {"group_id": "g", "group_protocol": "consumer",
                        "partition_assignment_strategy": ["range", "cooperative-sticky"]}
    with pytest.raises(ToolError, match="Invalid value soon for configuration linger.ms"):
        client_config({"linger.ms": "soon"}, "producer", tool="t")
    # TLS and SASL properties go to the client whole, with Kafka's names.
    tls = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "ssl.ca.location": "/ca.pem"}
    assert client_config(tls, "admin", tool="t") == {"security": tls}


def test_error_text_prefers_the_brokers_words():
    exc = KafkaError(ErrorCode.topic_already_exists, "CreateTopics t: Topic 't' already exists.")
    assert error_text(exc) == "Topic with this name already exists."  # Kafka's default message
    exc.server_message = "Topic 't' already exists."
    assert error_text(exc) == "Topic 't' already exists."
    assert error_text(ToolError("plain")) == "plain"
