"""`groups describe --watch` (observability/watch.py): the panel, and the command against a broker."""

from __future__ import annotations

import subprocess
import sys

from rich.console import Console

from odradek.observability.watch import render


def _text(renderable) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_render_shows_epochs_members_partitions_and_history():
    view = {"group_id": "g", "type": "consumer", "state": "Reconciling", "group_epoch": 4, "target_epoch": 4,
            "assignor": "range", "static_members": 1, "total_lag": 7, "protocol_type": "consumer",
            "members": [{"member_id": "member-a", "instance_id": "i-1", "client_id": "c1", "member_epoch": 3,
                         "reconciliation": "revoking", "current": [["foo", 0], ["foo", 1]],
                         "revoking": [["foo", 1]], "assigning": [], "pending": []},
                        {"member_id": "member-b", "instance_id": None, "client_id": "c2", "member_epoch": 4,
                         "reconciliation": "waiting", "current": [], "revoking": [], "assigning": [],
                         "pending": [["foo", 1]]}],
            "lag": [{"topic": "foo", "partition": 0, "committed": 3, "end": 10, "lag": 7}]}
    events = [{"time": 0, "kind": "group-epoch", "from": 3, "to": 4, "triggers": ["member member-b joined"]}]
    out = _text(render(view, events))
    assert "group epoch 4" in out and "target epoch 4" in out and "assignor range" in out
    assert "member-a" in out and "revoking" in out and "waiting" in out
    assert "foo-0 foo-1" in out  # member-a: owned and to revoke
    assert "3 -> 4" in out and "member member-b joined" in out
    assert "lag 7" in out


def test_render_unknown_group():
    assert "not found" in _text(render(None, [], "nope"))


def test_watch_command_against_a_broker(broker, topic_name):
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.polling import wait_until

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    group = f"watch-{topic_name}"
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer"})
    c.subscribe([topic_name])
    try:
        wait_until(lambda: (c.poll(0.1), len(c.assignment()) == 2)[1], 30, what="assignment")
        out = subprocess.run([sys.executable, "-m", "odradek", "groups", "describe", group, "--watch",
                              "--iterations", "2", "--interval", "0.2", "--bootstrap-server", broker.bootstrap],
                             capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""})
    finally:
        c.close()
    assert out.returncode == 0, out.stderr
    assert f"consumer group {group}" in out.stdout
    assert "group epoch 1" in out.stdout and "stable" in out.stdout
    assert f"{topic_name}-0" in out.stdout and f"{topic_name}-1" in out.stdout
    assert "first seen at group epoch 1" in out.stdout
