"""Options of the `odradek` Spark source and sink, named as Spark's built-in Kafka connector names them.

Theory of operation: everything a query needs is validated here, on the driver, when the
query starts, so a bad option is one clear `ValueError` and not a task failure later.
Nothing here imports Spark, so it is unit-testable on its own. Offsets specs are parsed
into `offsets.OffsetSpec`s; which partitions they name is checked against the broker by
the reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .offsets import OffsetSpec, parse_offset_spec

SUBSCRIBE_KEYS = ("subscribe", "subscribepattern", "assign")
# kafka.isolation.level -> the Fetch/ListOffsets isolation_level (KIP-98).
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


def _truthy(value: str | None, default: bool, key: str) -> bool:
    if value is None:
        return default
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(f"option {key} must be true or false, not {value!r}")


def _int(value: str | None, key: str, minimum: int = 1) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {value!r}") from None
    if n < minimum:
        raise ValueError(f"option {key} must be >= {minimum}, not {n}")
    return n


@dataclass
class SourceOptions:
    bootstrap: str
    topics: list[str] | None = None  # subscribe
    pattern: str | None = None  # subscribePattern
    assign: dict[str, list[int]] | None = None  # assign
    starting: OffsetSpec = field(default_factory=lambda: OffsetSpec("earliest"))
    ending: OffsetSpec = field(default_factory=lambda: OffsetSpec("latest"))
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    group_id_prefix: str = "spark-kafka-source"
    # Spark's own Kafka source passes kafka.isolation.level to a Java consumer, whose
    # default is read_uncommitted; this source defaults to read_committed (issue 19), as
    # librdkafka and odradek's consumer do: ranges end at the last stable offset and
    # records of aborted transactions are never rows.
    isolation_level: int = ISOLATION_LEVELS["read_committed"]


def _lower(options) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def parse_source_options(options, *, streaming: bool) -> SourceOptions:
    """Validate reader options (batch when `streaming` is false)."""
    o = _lower(options)
    bootstrap = o.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError("option kafka.bootstrap.servers is required")
    given = [k for k in SUBSCRIBE_KEYS if k in o]
    if len(given) != 1:
        raise ValueError("exactly one of the options subscribe, subscribePattern, assign must be given"
                         + (f" (got {', '.join(given)})" if given else ""))
    opts = SourceOptions(bootstrap=bootstrap)
    if "subscribe" in o:
        topics = [t.strip() for t in o["subscribe"].split(",") if t.strip()]
        if not topics:
            raise ValueError("option subscribe names no topic")
        opts.topics = topics
    elif "subscribepattern" in o:
        if not o["subscribepattern"].strip():
            raise ValueError("option subscribePattern is empty")
        opts.pattern = o["subscribepattern"]
    else:
        try:
            raw = json.loads(o["assign"])
            if not isinstance(raw, dict) or not raw:
                raise ValueError("not a non-empty JSON object")
            opts.assign = {str(t): sorted({int(p) for p in ps}) for t, ps in raw.items()}
        except (ValueError, TypeError) as exc:
            raise ValueError(f'option assign must be JSON like {{"topic":[0,1]}}: {exc}') from None
    if streaming and "endingoffsets" in o:
        raise ValueError("option endingOffsets is not allowed in a streaming query")
    if streaming and "endingoffsetsbytimestamp" in o:
        raise ValueError("option endingOffsetsByTimestamp is not allowed in a streaming query")
    by_ts = o.get("startingoffsetsbytimestamp")
    ts = o.get("startingtimestamp")
    if sum(x is not None for x in (by_ts, ts, o.get("startingoffsets"))) > 1:
        raise ValueError("give at most one of startingOffsets, startingOffsetsByTimestamp, startingTimestamp")
    if ts is not None:
        opts.starting = OffsetSpec("timestamp", global_timestamp=_int(ts, "startingTimestamp", 0))
    elif by_ts is not None:
        opts.starting = parse_offset_spec(by_ts, "startingOffsetsByTimestamp", by_timestamp=True)
    else:
        opts.starting = parse_offset_spec(o.get("startingoffsets", "latest" if streaming else "earliest"),
                                          "startingOffsets")
    if opts.starting.kind == "latest" and not streaming:
        raise ValueError("startingOffsets=latest is not allowed in a batch query")
    opts.ending = parse_offset_spec(o.get("endingoffsets", "latest"), "endingOffsets")
    if opts.ending.kind == "earliest":
        raise ValueError("endingOffsets=earliest is not allowed")
    opts.max_offsets_per_trigger = _int(o.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger")
    opts.min_partitions = _int(o.get("minpartitions"), "minPartitions")
    opts.fail_on_data_loss = _truthy(o.get("failondataloss"), True, "failOnDataLoss")
    opts.include_headers = _truthy(o.get("includeheaders"), False, "includeHeaders")
    opts.group_id = o.get("kafka.group.id")
    opts.group_id_prefix = o.get("groupidprefix", opts.group_id_prefix)
    level = o.get("kafka.isolation.level")
    if level is not None:
        if level.strip().lower() not in ISOLATION_LEVELS:
            raise ValueError(f"option kafka.isolation.level must be read_committed or read_uncommitted, "
                             f"not {level!r}")
        opts.isolation_level = ISOLATION_LEVELS[level.strip().lower()]
    return opts


@dataclass
class SinkOptions:
    bootstrap: str
    topic: str | None
    acks: str = "all"
    compression: str = "none"
    linger_ms: int = 5


def parse_sink_options(options) -> SinkOptions:
    o = _lower(options)
    bootstrap = o.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise ValueError("option kafka.bootstrap.servers is required")
    compression = o.get("kafka.compression.type", "none")
    if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise ValueError(f"option kafka.compression.type {compression!r} is not none/gzip/snappy/lz4/zstd")
    return SinkOptions(bootstrap, o.get("topic"), o.get("kafka.acks", "all"), compression,
                       _int(o.get("kafka.linger.ms", "5"), "kafka.linger.ms", 0))
