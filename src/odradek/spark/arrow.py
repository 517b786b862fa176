"""Records to Arrow, and the source's schema (Spark's Kafka connector columns).

Theory of operation: executors yield `pyarrow.RecordBatch`es rather than rows (about twice
the rows/s, FIELD-NOTES); each column is built from the poll's records in one
`pa.array` call. Timestamps are milliseconds since the epoch in Kafka and microseconds
in Spark's TimestampType.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
              "timestampType int")
HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
SCHEMA = pa.schema(_FIELDS)
SCHEMA_WITH_HEADERS = pa.schema([*_FIELDS, pa.field("headers", HEADER_TYPE)])


def ddl(include_headers: bool) -> str:
    return SCHEMA_DDL + (HEADERS_DDL if include_headers else "")


def to_batch(records, include_headers: bool) -> pa.RecordBatch:
    """ConsumerRecords of one partition (topic, partition, offset, timestamp, timestamp_type,
    key, value, headers, ...) to one RecordBatch."""
    n = len(records)
    topic = records[0].topic if n else ""
    partition = records[0].partition if n else 0
    cols = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([topic])).cast(pa.string())
        if n else pa.array([], pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([r.timestamp_type for r in records], pa.int32()),
    ]
    if include_headers:
        cols.append(pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records], HEADER_TYPE))
        return pa.RecordBatch.from_arrays(cols, schema=SCHEMA_WITH_HEADERS)
    return pa.RecordBatch.from_arrays(cols, schema=SCHEMA)
