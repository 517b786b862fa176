"""Offsets in Spark's Kafka JSON form, and how a micro-batch's ranges are planned.

Theory of operation: Spark's Kafka connector writes offsets as `{"topic":{"0":23}}`, with -2
meaning earliest and -1 latest in user-given specs; checkpointed offsets are always
concrete. `OffsetSpec` is a parsed user spec; `resolve` turns one into concrete offsets
given what the broker reports. `rate_limit` splits a `maxOffsetsPerTrigger` budget over
partitions in proportion to their backlog, as Spark's KafkaMicroBatchStream does.
`ranges` cuts `[start, end)` per partition into input partitions, splitting large ones
when `minPartitions` asks for more parallelism, in a deterministic order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import NamedTuple

EARLIEST, LATEST = -2, -1

Offsets = dict[str, dict[int, int]]  # topic -> partition -> offset


@dataclass
class OffsetSpec:
    kind: str  # "earliest" | "latest" | "json" | "timestamp"
    per_partition: Offsets = field(default_factory=dict)  # json: offsets (-2/-1 allowed); timestamp: ms
    global_timestamp: int | None = None  # startingTimestamp


def parse_offset_spec(value: str, key: str, *, by_timestamp: bool = False) -> OffsetSpec:
    v = value.strip()
    if not by_timestamp and v.lower() in ("earliest", "latest"):
        return OffsetSpec(v.lower())
    try:
        raw = json.loads(v)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")  # noqa: TRY004 - reported as a bad option
        per: Offsets = {}
        for topic, parts in raw.items():
            if not isinstance(parts, dict):
                raise ValueError(f"topic {topic!r} maps to {parts!r}, not an object")  # noqa: TRY004 - reported as a bad option
            per[str(topic)] = {int(p): int(o) for p, o in parts.items()}
    except (ValueError, TypeError) as exc:
        raise ValueError(f'option {key} must be earliest, latest or JSON like {{"topic":{{"0":23}}}}: '
                         f"{exc}") from None
    for topic, parts in per.items():
        for p, o in parts.items():
            if p < 0 or (o < -2 and not by_timestamp) or (by_timestamp and o < 0):
                raise ValueError(f"option {key}: bad offset {o} for {topic}-{p}")
    return OffsetSpec("timestamp" if by_timestamp else "json", per)


def to_json(offsets: Offsets) -> dict:
    """Spark-Kafka checkpoint form: partition keys are strings."""
    return {t: {str(p): int(o) for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())}


def from_json(raw: dict) -> Offsets:
    return {t: {int(p): int(o) for p, o in ps.items()} for t, ps in raw.items()}


def rate_limit(start: Offsets, latest: Offsets, budget: int) -> Offsets:
    """The end of a micro-batch that reads at most `budget` records, shared in proportion to
    each partition's backlog (Spark's KafkaMicroBatchStream.rateLimit)."""
    backlog = {(t, p): max(0, o - start.get(t, {}).get(p, o)) for t, ps in latest.items() for p, o in ps.items()}
    total = sum(backlog.values())
    if total <= budget:
        return {t: dict(ps) for t, ps in latest.items()}
    end: Offsets = {}
    given = 0
    keys = sorted(backlog)
    shares = {k: (budget * backlog[k]) // total for k in keys}
    given = sum(shares.values())
    for k in keys:  # hand out the rounding remainder deterministically
        if given >= budget:
            break
        if shares[k] < backlog[k]:
            shares[k] += 1
            given += 1
    for (t, p) in keys:
        begin = start.get(t, {}).get(p, latest[t][p])
        end.setdefault(t, {})[p] = begin + shares[(t, p)]
    return end


class Range(NamedTuple):
    topic: str
    partition: int
    start: int
    end: int  # exclusive


def ranges(start: Offsets, end: Offsets, min_partitions: int | None = None) -> list[Range]:
    """Input ranges for [start, end), sorted by topic and partition; split into more pieces
    when `min_partitions` exceeds the number of non-empty partitions."""
    out = [Range(t, p, start[t][p], o) for t, ps in sorted(end.items()) for p, o in sorted(ps.items())
           if t in start and p in start[t] and o > start[t][p]]
    if not min_partitions or min_partitions <= len(out) or not out:
        return out
    total = sum(r.end - r.start for r in out)
    split: list[Range] = []
    for r in out:
        pieces = max(1, round(min_partitions * (r.end - r.start) / total))
        size = -(-(r.end - r.start) // pieces)
        split.extend(Range(r.topic, r.partition, s, min(r.end, s + size)) for s in range(r.start, r.end, size))
    return split
