"""The `odradek` data source for PySpark: batch and streaming reads, batch and streaming writes.

Theory of operation: the driver-side readers talk to the broker through the synchronous
odradek Admin (partitions, offsets, group commits); each input partition is a plain,
picklable range `[start, end)` of one Kafka partition, read on an executor by
`fetch.read_range`. Spark pickles the reader once at query start (FIELD-NOTES), so a
partition carries everything `read` needs, and the Admin connection is never pickled.

Streaming offsets are Spark-Kafka JSON (`{"topic":{"0":23}}`). Each micro-batch:
`latestOffset` lists the subscribed partitions now (a new partition starts at its
earliest offset), takes their log end offsets, clamps them so no partition goes below the
start, caps them at the Trigger.AvailableNow target if there is one, and applies
`maxOffsetsPerTrigger`: through the engine's ReadMaxRows limit where PySpark has
admission control (4.2+), and by this reader's own bookkeeping of the previous end where
it has not (4.0/4.1). After Spark commits a batch, its end offsets are committed to the
consumer group (`kafka.group.id`, or `groupIdPrefix` + a per-query uuid) as a simple
(membership-free) commit, so `odradek groups describe` shows the pipeline's lag; the
checkpoint stays the source of truth.

Isolation (`kafka.isolation.level`, read_committed by default, unlike Spark's own Kafka
source): "latest" offsets come from ListOffsets with isolation level 1, so a range ends at
the last stable offset and never inside an open transaction, and the executors read with
the same level, dropping aborted records (`fetch`).
"""

from __future__ import annotations

import logging
import re
import uuid

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from odradek.client import Admin, KafkaError, TopicPartition
from odradek.client.offsets import list_offsets
from odradek.client.sync import run

from . import offsets as OFF
from .arrow import ddl
from .fetch import read_range
from .options import SourceOptions, parse_sink_options, parse_source_options
from .sink import write_batches

try:  # PySpark 4.2+: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass

log = logging.getLogger("odradek.spark")


class RangePartition(InputPartition):
    def __init__(self, bootstrap: str, topic: str, partition: int, start: int, end: int, fail_on_data_loss: bool,
                 include_headers: bool, isolation_level: int = 1) -> None:
        super().__init__((topic, partition, start, end))
        self.bootstrap, self.topic, self.partition = bootstrap, topic, partition
        self.start, self.end = start, end
        self.fail_on_data_loss, self.include_headers = fail_on_data_loss, include_headers
        self.isolation_level = isolation_level


def _read(p: RangePartition):
    yield from read_range(p.bootstrap, p.topic, p.partition, p.start, p.end,
                          fail_on_data_loss=p.fail_on_data_loss, include_headers=p.include_headers,
                          isolation_level=p.isolation_level)


class _BrokerView:
    """Driver-side lookups; the Admin is created lazily and never pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.o = options
        self._admin: Admin | None = None

    def __getstate__(self):
        return {**self.__dict__, "_admin": None}

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.o.bootstrap, client_id="odradek-spark-driver")
        return self._admin

    def partitions(self, *, strict: bool = False) -> list[TopicPartition]:
        o = self.o
        if o.assign is not None:
            existing = {}
            for t in o.assign:
                try:
                    existing[t] = {tp.partition for tp in self.admin.partitions_of([t])}
                except KafkaError:
                    raise ValueError(f"option assign names topic {t!r}, which does not exist") from None
            missing = [f"{t}-{p}" for t, ps in o.assign.items() for p in ps if p not in existing[t]]
            if missing:
                raise ValueError(f"option assign names partitions that do not exist: {', '.join(missing)}")
            return [TopicPartition(t, p) for t, ps in sorted(o.assign.items()) for p in ps]
        if o.topics is not None:
            out = []
            for t in o.topics:
                try:
                    out.extend(self.admin.partitions_of([t]))
                except KafkaError:
                    if strict:
                        raise ValueError(f"option subscribe: topic {t!r} does not exist") from None
            return sorted(out)
        pattern = re.compile(o.pattern)
        topics = [t for t in self.admin.list_topics() if pattern.fullmatch(t)]
        return sorted(self.admin.partitions_of(topics)) if topics else []

    def list_offsets(self, specs: dict[TopicPartition, int]):
        """ListOffsets with the query's isolation level: "latest" is the last stable offset
        for read_committed (the Admin's own list_offsets asks read_uncommitted)."""
        return run(list_offsets(self.admin.client, specs, isolation_level=self.o.isolation_level))

    def offsets(self, tps: list[TopicPartition], which: int) -> OFF.Offsets:
        if not tps:
            return {}
        found = self.list_offsets({tp: which for tp in tps})
        out: OFF.Offsets = {}
        for tp, ot in found.items():
            out.setdefault(tp.topic, {})[tp.partition] = ot.offset
        return out

    def resolve(self, spec: OFF.OffsetSpec, tps: list[TopicPartition], *, default: int) -> OFF.Offsets:
        """Concrete offsets of `tps` for a starting/ending spec."""
        if spec.kind in ("earliest", "latest"):
            return self.offsets(tps, OFF.EARLIEST if spec.kind == "earliest" else OFF.LATEST)
        if spec.kind == "timestamp":
            stamps = {tp: (spec.global_timestamp if spec.global_timestamp is not None
                           else spec.per_partition.get(tp.topic, {}).get(tp.partition)) for tp in tps}
            missing = [str(tp) for tp, ts in stamps.items() if ts is None]
            if missing:
                raise ValueError(f"startingOffsetsByTimestamp has no timestamp for {', '.join(missing)}")
            found = self.list_offsets(stamps)
            latest = self.offsets(tps, OFF.LATEST)
            out: OFF.Offsets = {}
            for tp in tps:  # no record at or after the timestamp: start at the end
                off = found[tp].offset
                out.setdefault(tp.topic, {})[tp.partition] = off if off >= 0 else latest[tp.topic][tp.partition]
            return out
        named = {TopicPartition(t, p) for t, ps in spec.per_partition.items() for p in ps}
        unknown = sorted(str(tp) for tp in named - set(tps))
        if unknown:
            raise ValueError(f"offsets are given for partitions this query does not read: {', '.join(unknown)}")
        out = {}
        symbolic = {tp: spec.per_partition.get(tp.topic, {}).get(tp.partition, default) for tp in tps}
        resolved = {}
        for which in (OFF.EARLIEST, OFF.LATEST):
            need = [tp for tp, v in symbolic.items() if v == which]
            for t, ps in self.offsets(need, which).items():
                for p, off in ps.items():
                    resolved[TopicPartition(t, p)] = off
        for tp, v in symbolic.items():
            out.setdefault(tp.topic, {})[tp.partition] = resolved[tp] if v < 0 else v
        return out

    def commit_group(self, group_id: str, end: OFF.Offsets) -> None:
        try:
            self.admin.alter_group_offsets(group_id, {TopicPartition(t, p): o for t, ps in end.items()
                                                      for p, o in ps.items()})
        except KafkaError as exc:  # the checkpoint is the source of truth: report, go on
            log.warning("committing offsets of group %s failed: %s", group_id, exc)


def _partitions(o: SourceOptions, start: OFF.Offsets, end: OFF.Offsets) -> list[RangePartition]:
    return [RangePartition(o.bootstrap, r.topic, r.partition, r.start, r.end, o.fail_on_data_loss,
                           o.include_headers, o.isolation_level)
            for r in OFF.ranges(start, end, o.min_partitions)]


class OdradekBatchReader(DataSourceReader):
    def __init__(self, o: SourceOptions) -> None:
        self.o = o
        view = _BrokerView(o)
        tps = view.partitions(strict=True)
        self.start = view.resolve(o.starting, tps, default=OFF.EARLIEST)
        self.end = view.resolve(o.ending, tps, default=OFF.LATEST)
        for t, ps in self.start.items():  # an ending before its start reads nothing there
            for p in ps:
                self.end.setdefault(t, {})[p] = max(self.end.get(t, {}).get(p, ps[p]), ps[p])
        view.admin.close()  # planning is done; executors open their own connections

    def partitions(self):
        return _partitions(self.o, self.start, self.end)

    def read(self, partition: RangePartition):
        return _read(partition)


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, o: SourceOptions) -> None:
        self.o = o
        self.view = _BrokerView(o)
        self.group_id = o.group_id or f"{o.group_id_prefix}-{uuid.uuid4()}"
        self._prev_end: OFF.Offsets | None = None  # PySpark < 4.2: our own record of the start
        self._target: OFF.Offsets | None = None  # Trigger.AvailableNow
        self._committed: OFF.Offsets | None = None  # last offsets committed to the group
        self.view.partitions(strict=o.assign is not None)  # unknown assigned partitions fail at start
        # PySpark builds this reader in a short-lived planning worker and never stops that
        # copy: close the connection now (it reopens lazily where the reader lives on).
        self.stop()

    def initialOffset(self) -> dict:
        tps = self.view.partitions()
        start = self.view.resolve(self.o.starting, tps, default=OFF.LATEST)
        self._prev_end = start
        return OFF.to_json(start)

    def getDefaultReadLimit(self):
        if ReadMaxRows is not None and self.o.max_offsets_per_trigger:
            return ReadMaxRows(self.o.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.view.partitions()
        self._target = self.view.offsets(tps, OFF.LATEST)

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        if start is not None:
            begin = OFF.from_json(start)
            # `start` is the end of the last batch Spark completed; commit() for that batch
            # only comes once the next batch is planned, so this is what keeps the group's
            # lag current when the stream goes idle or the query ends.
            self._commit_once(begin)
        elif self._prev_end is not None:
            begin = self._prev_end
        else:  # PySpark < 4.2 after a restart: the group's commits track the checkpoint
            tps = self.view.partitions()
            committed = self.view.admin.list_group_offsets(self.group_id) if self.o.group_id else {}
            begin = {}
            for tp in tps:
                if tp in committed:
                    begin.setdefault(tp.topic, {})[tp.partition] = committed[tp].offset
        tps = self.view.partitions()
        latest = self.view.offsets(tps, OFF.LATEST)
        new = [tp for tp in tps if tp.partition not in begin.get(tp.topic, {})]
        if new:  # partitions that appeared since the last batch start at their earliest offset
            for t, ps in self.view.offsets(new, OFF.EARLIEST).items():
                begin.setdefault(t, {}).update(ps)
        if self._target is not None:
            latest = {t: {p: min(o, self._target.get(t, {}).get(p, begin[t][p])) for p, o in ps.items()}
                      for t, ps in latest.items()}
        # Never below the start (Spark does not check that offsets are monotonic).
        latest = {t: {p: max(o, begin.get(t, {}).get(p, o)) for p, o in ps.items()} for t, ps in latest.items()}
        budget = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif limit is None:
            budget = self.o.max_offsets_per_trigger
        end = OFF.rate_limit(begin, latest, budget) if budget else latest
        self._prev_end = end
        return OFF.to_json(end)

    def partitions(self, start: dict, end: dict):
        begin, stop = OFF.from_json(start), OFF.from_json(end)
        new = [TopicPartition(t, p) for t, ps in stop.items() for p in ps if p not in begin.get(t, {})]
        if new:
            for t, ps in self.view.offsets(new, OFF.EARLIEST).items():
                begin.setdefault(t, {}).update(ps)
        return _partitions(self.o, begin, stop)

    def read(self, partition: RangePartition):
        return _read(partition)

    def commit(self, end: dict) -> None:
        self._commit_once(OFF.from_json(end))

    def _commit_once(self, offsets: OFF.Offsets) -> None:
        if offsets and offsets != self._committed:
            self.view.commit_group(self.group_id, offsets)
            self._committed = offsets

    def stop(self) -> None:
        if self.view._admin is not None:
            self.view._admin.close()
            self.view._admin = None


class _Written(WriterCommitMessage):
    def __init__(self, records: int) -> None:
        self.records = records


class _ArrowSink(DataSourceArrowWriter):
    """What both writers do: check the columns at query start, send each task's rows."""

    def __init__(self, options, schema) -> None:
        self.o = parse_sink_options(options)
        self.schema = schema
        _check_sink_schema(self.o, schema)

    def write(self, iterator):
        return _Written(write_batches(self.o, iterator))


class OdradekBatchWriter(_ArrowSink):
    pass


class OdradekStreamWriter(_ArrowSink, DataSourceStreamWriter):
    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass


def _check_sink_schema(o, schema) -> None:
    """Spark-Kafka's column rules: value required; key, headers, partition, topic optional."""
    names = {f.name.lower(): f for f in schema.fields}
    if "value" not in names:
        raise ValueError("the sink needs a 'value' column (string or binary)")
    if "topic" not in names and not o.topic:
        raise ValueError("the sink needs a 'topic' column or the topic option")
    for name in ("key", "value"):
        if name in names and names[name].dataType.typeName() not in ("string", "binary"):
            raise ValueError(f"column {name!r} must be string or binary, not {names[name].dataType.simpleString()}")
    if "partition" in names and names["partition"].dataType.typeName() != "integer":
        raise ValueError("column 'partition' must be int")


class OdradekDataSource(DataSource):
    """`spark.read.format("odradek")`: options as Spark's Kafka connector takes them."""

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return ddl(include)

    def reader(self, schema):
        return OdradekBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema):
        return OdradekStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema, overwrite: bool):
        return OdradekBatchWriter(self.options, schema)

    def streamWriter(self, schema, overwrite: bool):
        return OdradekStreamWriter(self.options, schema)
