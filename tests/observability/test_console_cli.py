"""`odradek console` standalone against a broker: it serves the overview and a group's JSON."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request

import pytest

from odradek.config import BrokerConfig, apply_properties
from tests.polling import wait_until


def test_console_command_serves_a_cluster(broker, topic_name):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(30)
    proc = subprocess.Popen([sys.executable, "-m", "odradek", "console", "--listen", "127.0.0.1:0", "--interval", "0.2",
                             "--bootstrap-server", broker.bootstrap], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"odradek console on (http://\S+)", line)
        assert m, line
        url = m.group(1)

        def overview():
            with urllib.request.urlopen(url + "api/overview", timeout=10) as resp:
                data = json.loads(resp.read())
            topics = {t["name"]: t for t in (data.get("cluster") or {}).get("topics", [])}
            return topics.get(topic_name)

        topic = wait_until(overview, 30, what="the topic in the console's overview")
        assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
        assert all(p["isr"] == p["replicas"] for p in topic["partitions"])
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert topic_name in resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(20)
        proc.stdout.close()


def test_http_listener_settings_are_checked():
    assert apply_properties(BrokerConfig(), {"metrics.listener": ""}).metrics_listener == ""
    assert apply_properties(BrokerConfig(), {"console.listener": "0.0.0.0:9500"}).console_listener == "0.0.0.0:9500"
    assert apply_properties(BrokerConfig(), {"console.enable": "true"}).console_enable is True
    with pytest.raises(ValueError):
        apply_properties(BrokerConfig(), {"metrics.listener": "no-port"})
