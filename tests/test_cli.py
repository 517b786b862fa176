"""`odradek broker` flags and properties file, against the real process."""

import pytest

from tests.wire import RawClient

pytestmark = pytest.mark.interop


def test_properties_file_and_flags(broker_factory, tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(
        "# Kafka key names\n"
        f"log.dirs={tmp_path / 'ignored-by-data-dir-flag'}\n"
        "num.partitions=3\n"
        "auto.create.topics.enable=true\n"
        "log.retention.hours=5\n"
        "socket.request.max.bytes=65536\n"
    )
    b = broker_factory("cfg", ["--config", str(props), "--node-id", "7", "--rack", "rack-a", "--advertise", "localhost:1234"])
    c = RawClient(b.bootstrap)
    md = c.call(3, 12, {"topics": [{"name": "auto", "topic_id": None}], "allow_auto_topic_creation": True,
                        "include_topic_authorized_operations": False})
    assert [(x.node_id, x.host, x.port, x.rack) for x in md.brokers] == [(7, "localhost", 1234, "rack-a")]
    assert len(md.topics[0].partitions) == 3 and md.topics[0].partitions[0].leader_id == 7
    cfg = c.call(32, 4, {"resources": [{"resource_type": 4, "resource_name": "7", "configuration_keys": None}],
                         "include_synonyms": False, "include_documentation": False})
    values = {e.name: e.value for e in cfg.results[0].configs}
    assert values["log.retention.ms"] == str(5 * 3600 * 1000)
    assert values["socket.request.max.bytes"] == "65536"
    assert values["broker.rack"] == "rack-a"
    # --data-dir wins over log.dirs
    assert (b.data_dir / "__cluster_metadata.json").exists()
    assert not (tmp_path / "ignored-by-data-dir-flag").exists()


def test_topic_ids_are_stable_across_restart_and_new_after_recreate(broker_factory):
    b = broker_factory("ids")
    c = RawClient(b.bootstrap)
    body = {"topics": [{"name": "stable", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout": 5000, "validate_only": False}
    first = c.call(19, 7, body).topics[0].topic_id
    assert first.int != 0
    c.close()
    assert b.stop() == 0
    b.start()
    c = RawClient(b.bootstrap)
    md = c.call(3, 12, {"topics": [{"name": None, "topic_id": first}], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    assert md.topics[0].name == "stable" and md.topics[0].topic_id == first
    assert int(c.call(20, 6, {"topics": [{"name": "stable", "topic_id": first}], "timeout": 5000}).responses[0].error_code) == 0
    second = c.call(19, 7, body).topics[0].topic_id
    assert second.int != 0 and second != first
