"""Executor side of the sink: Arrow batches in, records out through the odradek producer.

Theory of operation: each task opens one producer, sends every row (value required; key,
headers, partition and a topic column optional, the `topic` option otherwise, as Spark's
Kafka sink does) and flushes before returning, so the task only commits after the broker
acknowledged its records. A retried task sends its rows again: the sink is at-least-once,
like Spark's Kafka sink.
"""

from __future__ import annotations

from odradek.client import Producer

from .options import SinkOptions


def _bytes(v):
    return v.encode() if isinstance(v, str) else v


def write_batches(o: SinkOptions, batches) -> int:
    producer = Producer(o.bootstrap, acks=o.acks, compression_type=o.compression, linger_ms=o.linger_ms,
                        client_id="odradek-spark-sink")
    sent = 0
    futures = []
    try:
        for batch in batches:
            cols = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
            n = batch.num_rows
            values = cols["value"]
            keys = cols.get("key", [None] * n)
            topics = cols.get("topic") or [o.topic] * n
            parts = cols.get("partition", [None] * n)
            headers = cols.get("headers", [None] * n)
            for i in range(n):
                topic = o.topic or topics[i]  # Spark-Kafka: the topic option overrides the topic column
                if not topic:
                    raise ValueError("a row has a null topic and no topic option is set")
                hs = [(h["key"], _bytes(h["value"])) for h in headers[i]] if headers[i] else None
                futures.append(producer.send(topic, _bytes(values[i]), _bytes(keys[i]), partition=parts[i],
                                             headers=hs))
            sent += n
            if len(futures) > 50_000:
                for f in futures:
                    f.result()
                futures.clear()
        producer.flush()
        for f in futures:
            f.result()  # raise the first delivery failure: the task fails and Spark retries it
    finally:
        producer.close()
    return sent
