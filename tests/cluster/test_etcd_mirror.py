"""cluster/etcd_mirror: the pure side of the etcd store, fed key/values without etcd."""

import json
import uuid
from types import SimpleNamespace

from odradek.cluster.etcd_mirror import EtcdMirror

P = b"/odradek/"


def kv(key: str, doc, rev: int, create: int | None = None):
    return SimpleNamespace(key=P + key.encode(), value=json.dumps(doc).encode(), create_revision=create or rev,
                           mod_revision=rev, lease=0)


def test_images_name_the_topics_a_change_touched():
    m = EtcdMirror(P)
    m.load([kv("cluster_id", {"id": "c"}, 1)])
    assert m.image().changed is None  # after a full load, anything may have changed
    tid = str(uuid.uuid4())
    m.apply(True, P + b"topics/t", kv("topics/t", {"id": tid, "partitions": [[1, 2]], "configs": {}}, 2))
    m.apply(True, P + b"partitions/t/0", kv("partitions/t/0", {"leader": 1, "leader_epoch": 0, "isr": [1, 2]}, 2))
    m.apply(True, P + b"topics/u", kv("topics/u", {"id": str(uuid.uuid4()), "partitions": [[1]], "configs": {}}, 3))
    img = m.image()
    assert img.changed == {"t", "u"}
    assert img.partition("t", 0).isr == (1, 2) and img.partition("u", 0) is None  # u has no state yet
    m.apply(True, P + b"brokers/3", kv("brokers/3", {"host": "h", "port": 1, "rack": "r"}, 4))
    img = m.image()
    assert img.changed == frozenset() and 3 in img.brokers  # a broker change touches no partition
    m.apply(True, P + b"partitions/t/0", kv("partitions/t/0", {"leader": 2, "leader_epoch": 1, "isr": [2]}, 5, 2))
    img = m.image()
    assert img.changed == {"t"} and img.partition("t", 0).partition_epoch == 5
