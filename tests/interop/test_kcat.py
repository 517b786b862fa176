"""Interop: the kcat command-line tool (librdkafka inside) against `odradek broker`.

`make test` installs kcat from Debian; without it these tests skip. Every kcat run has a
subprocess timeout, and consumers run with -e (exit at the end of every partition).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

KCAT = shutil.which("kcat")
pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(KCAT is None, reason="kcat not found on PATH (`make test` installs it: apt-get install kcat)"),
]

TIMEOUT = 30  # seconds per kcat run


def kcat(*args: str, stdin: bytes | None = None, timeout: float = TIMEOUT) -> bytes:
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, f"kcat {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}"
    return proc.stdout


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin_mod = pytest.importorskip("confluent_kafka.admin")
    admin = admin_mod.AdminClient({"bootstrap.servers": bootstrap})
    assert admin.create_topics([admin_mod.NewTopic(name, partitions, 1)])[name].result(30) is None


def test_produce_lines_consume_exactly(broker, topic_name):
    lines = [f"line {i} " + "x" * (i % 50) for i in range(5000)] + ["ünïcödé ✓", "tab\there", "last"]
    stdin = ("\n".join(lines) + "\n").encode()
    # the topic does not exist yet: kcat's metadata request auto-creates it (1 partition)
    kcat("-P", "-b", broker.bootstrap, "-t", topic_name, stdin=stdin)
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-e", "-q", "-o", "beginning", "-f", "%p|%o|%s\n")
    got = out.decode().split("\n")
    assert got[-1] == ""
    assert got[:-1] == [f"0|{i}|{line}" for i, line in enumerate(lines)]

    # relative and absolute start offsets
    n = len(lines)
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-e", "-q", "-o", "-3", "-f", "%o|%s\n")
    assert out.decode().splitlines() == [f"{i}|{lines[i]}" for i in range(n - 3, n)]
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-e", "-q", "-o", "4990", "-c", "5", "-f", "%o\n")
    assert out.decode().splitlines() == [str(i) for i in range(4990, 4995)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_compressed_with_headers(broker, topic_name, codec):
    create_topic(broker.bootstrap, topic_name, 3)
    n = 3000
    records = [(f"key-{i}", f"value {i} " + codec * (i % 7)) for i in range(n)]
    records.append(("empty-value", ""))
    records.append(("", "empty-key"))
    stdin = "".join(f"{k}:{v}\n" for k, v in records).encode()
    kcat("-P", "-b", broker.bootstrap, "-t", topic_name, "-K:", "-z", codec, "-H", "codec=" + codec, "-H", "nullhdr",
         stdin=stdin)
    # %K/%S: key/value lengths (-1 for null); %h: headers as k=v, comma separated
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-e", "-q", "-o", "beginning",
               "-f", "%p|%o|%K|%k|%S|%s|%h\n")
    rows = [line.split("|") for line in out.decode().splitlines()]
    assert len(rows) == len(records), f"{len(rows)} records consumed, {len(records)} produced"
    by_key = {}
    per_partition: dict[int, list[int]] = {}
    for p, o, klen, k, vlen, v, h in rows:
        assert k not in by_key, f"key {k!r} consumed twice"
        by_key[k] = v
        assert int(klen) == len(k.encode()) and int(vlen) == len(v.encode())
        assert h == f"codec={codec},nullhdr=NULL", f"headers {h!r}"
        per_partition.setdefault(int(p), []).append(int(o))
    assert by_key == dict(records)
    for p, offsets in per_partition.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not 0..n-1 in order"
    # the same key always lands on the same partition: produce "key-0" again and check
    first_partition = next(int(p) for p, _, _, k, *_ in rows if k == "key-0")
    kcat("-P", "-b", broker.bootstrap, "-t", topic_name, "-K:", "-z", codec, stdin=b"key-0:again\n")
    out = kcat("-C", "-b", broker.bootstrap, "-t", topic_name, "-p", str(first_partition), "-e", "-q", "-o", "-1",
               "-f", "%k|%s\n")
    assert out.decode() == "key-0|again\n"


def test_metadata_listing_and_json(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 4)
    text = kcat("-L", "-b", broker.bootstrap, "-t", topic_name).decode()
    assert "1 brokers:" in text
    assert f"broker 1 at 127.0.0.1:{broker.port}" in text
    assert f'topic "{topic_name}" with 4 partitions:' in text
    for p in range(4):
        assert f"partition {p}, leader 1, replicas: 1, isrs: 1" in text

    doc = json.loads(kcat("-L", "-J", "-b", broker.bootstrap, "-t", topic_name))
    assert doc["brokers"] == [{"id": 1, "name": f"127.0.0.1:{broker.port}"}]
    assert doc["controllerid"] == 1
    assert doc["originating_broker"]["id"] == 1
    [topic] = doc["topics"]
    assert topic["topic"] == topic_name
    assert "error" not in topic
    assert topic["partitions"] == [
        {"partition": p, "leader": 1, "replicas": [{"id": 1}], "isrs": [{"id": 1}]} for p in range(4)
    ]

    # all topics: ours is among them, with the same partitions
    everything = json.loads(kcat("-L", "-J", "-b", broker.bootstrap))
    listed = {t["topic"]: t for t in everything["topics"]}
    assert topic_name in listed
    assert len(listed[topic_name]["partitions"]) == 4
