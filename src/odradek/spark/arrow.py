"""The source's schema: Spark's Kafka connector columns, as DDL for Spark and as Arrow for
the executors, which yield `pyarrow.RecordBatch`es rather than rows (about twice the
rows/s, FIELD-NOTES; columnar.py builds them). Timestamps are milliseconds since the epoch
in Kafka and microseconds in Spark's TimestampType.
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
