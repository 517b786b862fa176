"""The admin client's config calls (DescribeConfigs, IncrementalAlterConfigs) and the
calls Kafka's tools need (auto-creating metadata request, per-partition OffsetDelete
outcome, the coordinator's address, replica assignments), against a real broker.

Group configs alter on today's broker; TOPIC and BROKER alters need the broker's
IncrementalAlterConfigs for those resources."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.client import (
    Admin,
    Consumer,
    KafkaError,
    NewTopic,
    Producer,
    TopicPartition,
)
from odradek.client.admin import ConfigOp
from odradek.client.admin import ConfigResourceType as R

pytestmark = pytest.mark.interop


def test_describe_configs(broker, topic_name):
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic_name, 1, configs={"retention.ms": "12345"})])
        node = admin.describe_cluster()[2][0].node_id
        got = admin.describe_configs([(R.TOPIC, topic_name), (R.BROKER, str(node)), (R.GROUP, f"g-{topic_name}")],
                                     include_synonyms=True)
        topic = {e.name: e for e in got[(R.TOPIC, topic_name)]}
        assert topic["retention.ms"].value == "12345" and topic["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
        assert not topic["retention.ms"].is_default and topic["cleanup.policy"].is_default
        assert topic["retention.ms"].synonyms[0].source == "DYNAMIC_TOPIC_CONFIG"
        brokers = {e.name: e for e in got[(R.BROKER, str(node))]}
        assert brokers["broker.id"].value == str(node)
        group = {e.name: e for e in got[(R.GROUP, f"g-{topic_name}")]}
        assert set(group) >= {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"}
        only = admin.describe_configs([(R.TOPIC, topic_name)], keys=["retention.ms"])[(R.TOPIC, topic_name)]
        assert [e.name for e in only] == ["retention.ms"] and only[0].synonyms == ()

        with pytest.raises(KafkaError) as info:
            admin.describe_configs([(R.TOPIC, f"missing-{topic_name}")])
        assert info.value.code == ErrorCode.unknown_topic_or_partition
        assert info.value.server_message  # the broker's words, for Kafka's tools to print
        with pytest.raises(KafkaError, match="BROKER_NOT_AVAILABLE"):
            admin.describe_configs([(R.BROKER, "999")])


def test_alter_group_configs(broker, topic_name):
    group = f"g-{topic_name}"
    with Admin(broker.bootstrap) as admin:
        def dynamic() -> dict[str, str]:
            return {e.name: e.value for e in admin.describe_configs([(R.GROUP, group)])[(R.GROUP, group)]
                    if e.source == "DYNAMIC_GROUP_CONFIG"}

        admin.incremental_alter_configs({(R.GROUP, group): [("consumer.session.timeout.ms", ConfigOp.SET, "50000")]})
        assert dynamic() == {"consumer.session.timeout.ms": "50000"}
        admin.incremental_alter_configs({(R.GROUP, group): [("consumer.session.timeout.ms", ConfigOp.SET, "60000")]},
                                        validate_only=True)
        assert dynamic() == {"consumer.session.timeout.ms": "50000"}
        admin.incremental_alter_configs({(R.GROUP, group): [("consumer.session.timeout.ms", ConfigOp.DELETE, None)]})
        assert dynamic() == {}
        with pytest.raises(KafkaError) as info:
            admin.incremental_alter_configs({(R.GROUP, group): [("no.such.config", ConfigOp.SET, "1")]})
        assert info.value.code == ErrorCode.invalid_config and info.value.server_message


def test_alter_topic_configs(broker, topic_name):
    """Needs the broker's IncrementalAlterConfigs for TOPIC resources."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic_name, 1, configs={"retention.ms": "12345"})])
        admin.incremental_alter_configs({(R.TOPIC, topic_name): [("retention.ms", ConfigOp.DELETE, None),
                                                                 ("cleanup.policy", ConfigOp.SET, "compact")]})
        entries = {e.name: e for e in admin.describe_configs([(R.TOPIC, topic_name)])[(R.TOPIC, topic_name)]}
        assert entries["cleanup.policy"].value == "compact" and entries["retention.ms"].is_default


def test_tool_calls(broker, topic_name):
    placed, auto = f"{topic_name}-placed", f"{topic_name}-auto"
    group = f"g-{topic_name}"
    with Admin(broker.bootstrap) as admin:
        node = admin.describe_cluster()[2][0]
        admin.create_topics([NewTopic(placed, configs={}, assignments={0: [node.node_id], 1: [node.node_id]})])
        admin.create_partitions({placed: 3}, assignments={placed: [[node.node_id]]})
        assert sorted(admin.describe_topics([placed])[placed].partitions) == [0, 1, 2]

        # The broker auto-creates (auto.create.topics.enable is on by default).
        admin.auto_create_topics([auto])
        assert auto in admin.list_topics()

        with Producer(broker.bootstrap, linger_ms=0) as producer:
            producer.send(placed, b"x", partition=0)
        with Consumer(broker.bootstrap, group_id=group, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(placed, 0)])
            consumer.commit({TopicPartition(placed, 0): 1})
        assert admin.find_coordinator(group) == node
        top, results = admin.delete_group_offsets_results(group, [TopicPartition(placed, 0)])
        assert top == ErrorCode.none and results == {TopicPartition(placed, 0): ErrorCode.none}
        assert admin.list_group_offsets(group) == {}
