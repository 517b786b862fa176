"""Topic configs: every key Kafka 4.x's LogConfig defines, with its ConfigDef type,
default, validator and broker synonym (ServerTopicConfigSynonyms).

Theory of operation: `TOPIC_CONFIGS` is the table; a topic's effective config is its
overrides on top of the broker's defaults for the synonyms (see config.BrokerConfig).
`validate_topic_config` is what CreateTopics, AlterConfigs and IncrementalAlterConfigs
run on a topic's complete set of overrides, answering Kafka's messages:

- LogConfig.validateNames: "Unknown topic config name: x"
- ConfigDef.parse: "Invalid value v for configuration k: <why>"
- LogConfig.validateValues: min.compaction.lag.ms must not exceed max.compaction.lag.ms
- LogConfig.validateRemoteStorageOnlyIfSystemEnabled: odradek has no tiered storage,
  which is Kafka's default (remote.log.storage.system.enable=false), so
  remote.storage.enable=true is refused with Kafka's message.

The list is Kafka 4.0-4.3's: message.format.version and message.downconversion.enable
were removed in 4.0 (KIP-724), remote.copy.lag.* arrive only in 4.4 (KIP-1241).
segment.bytes keeps Kafka 4.0's lower bound (14 bytes, one legacy record) rather than
the 1 MiB of 4.1+, so tests can roll small segments.

Which keys odradek acts on is listed in `IGNORED_TOPIC_CONFIGS` (the rest it applies).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .configdef import (
    BOOLEAN,
    DOUBLE,
    INT,
    LIST,
    LONG,
    LONG_MAX,
    STRING,
    ConfigError,
    ConfigKey,
    at_least,
    between,
    each_one_of,
    one_of,
)

DAY_MS = 24 * 3600 * 1000
INT_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class TopicSetting(ConfigKey):
    """A LogConfig key with its broker synonym (None: no broker-wide default, e.g.
    remote.storage.enable, whose default is the ConfigDef's)."""

    broker_key: str | None = None


def _gzip_level(name: str, value: int) -> None:
    # Kafka CompressionType.GZIP.levelValidator: Deflater levels 1-9, or -1 (its default).
    if value > 9 or (value < 1 and value != -1):
        raise ConfigError(name, value, "Value must be between 1 and 9 or equal to -1")


def _throttled_replicas(name: str, items: list[str]) -> None:
    # Kafka ThrottledReplicaListValidator: "*" or partition:broker pairs.
    if not (all(re.fullmatch(r"([0-9]+:[0-9]+)?", s.strip()) for s in items) or "".join(items) == "*"):
        raise ConfigError(name, items, f"{name} must be the literal '*' or a list of replicas in the following "
                                       "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


# BrokerCompressionType names: what compression.type may say, topic or broker.
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _s(name, broker_key, type_, default, validator=None, doc=""):
    return name, TopicSetting(name, type_, default, validator, doc, broker_key)


# topic key -> setting, in Kafka's LogConfig order (storage/.../LogConfig.java).
TOPIC_CONFIGS: dict[str, TopicSetting] = dict([
    # segment.bytes is an int in Kafka: a segment's file positions must fit the index's 32 bits.
    _s("segment.bytes", "log.segment.bytes", INT, 1 << 30, at_least(14), "roll a segment at this size"),
    _s("segment.ms", "log.roll.ms", LONG, 7 * DAY_MS, at_least(1), "roll a segment at this age"),
    _s("segment.jitter.ms", "log.roll.jitter.ms", LONG, 0, at_least(0), "random jitter subtracted from segment.ms"),
    _s("segment.index.bytes", "log.index.size.max.bytes", INT, 10 * 1024 * 1024, at_least(4),
       "size of a segment's offset index"),
    _s("flush.messages", "log.flush.interval.messages", LONG, LONG_MAX, at_least(1), "fsync after this many messages"),
    _s("flush.ms", "log.flush.interval.ms", LONG, LONG_MAX, at_least(0), "fsync at least this often"),
    _s("retention.bytes", "log.retention.bytes", LONG, -1, None,
       "delete oldest segments beyond this size per partition (-1: no limit)"),
    _s("retention.ms", "log.retention.ms", LONG, 7 * DAY_MS, at_least(-1), "delete segments older than this (-1: never)"),
    _s("max.message.bytes", "message.max.bytes", INT, 1048588, at_least(0), "largest record batch accepted"),
    _s("index.interval.bytes", "log.index.interval.bytes", INT, 4096, at_least(0), "bytes between offset index entries"),
    _s("delete.retention.ms", "log.cleaner.delete.retention.ms", LONG, DAY_MS, at_least(0),
       "how long tombstones survive compaction"),
    _s("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", LONG, 0, at_least(0),
       "records younger than this are not compacted"),
    _s("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", LONG, LONG_MAX, at_least(1),
       "a dirty segment older than this is compacted whatever the dirty ratio"),
    _s("file.delete.delay.ms", "log.segment.delete.delay.ms", LONG, 60000, at_least(0),
       "delay before a deleted segment's files are removed"),
    _s("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", DOUBLE, 0.5, between(0, 1),
       "compact once the dirty part of the log is at least this share of it"),
    _s("cleanup.policy", "log.cleanup.policy", LIST, "delete", each_one_of("compact", "delete"),
       "delete and/or compact old segments"),
    _s("unclean.leader.election.enable", "unclean.leader.election.enable", BOOLEAN, False, None,
       "elect an out-of-sync replica when no in-sync one is left"),
    _s("min.insync.replicas", "min.insync.replicas", INT, 1, at_least(1), "in-sync replicas an acks=all write needs"),
    _s("compression.type", "compression.type", STRING, "producer", one_of(*COMPRESSION_TYPES),
       "codec batches are stored with ('producer': as sent)"),
    _s("compression.gzip.level", "compression.gzip.level", INT, -1, _gzip_level, "gzip level when compressing"),
    _s("compression.lz4.level", "compression.lz4.level", INT, 9, between(1, 17), "lz4 level when compressing"),
    _s("compression.zstd.level", "compression.zstd.level", INT, 3, between(-131072, 22), "zstd level when compressing"),
    _s("preallocate", "log.preallocate", BOOLEAN, False, None, "preallocate segment files"),
    _s("message.timestamp.type", "log.message.timestamp.type", STRING, "CreateTime",
       one_of("CreateTime", "LogAppendTime"), "CreateTime or LogAppendTime"),
    # KIP-937: CreateTime records further than this before/after the broker's clock are
    # rejected (INVALID_TIMESTAMP). Kafka 4 defaults: no lower bound, one hour ahead.
    _s("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", LONG, LONG_MAX, at_least(0),
       "largest age of a CreateTime timestamp"),
    _s("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", LONG, 3_600_000, at_least(0),
       "largest lead of a CreateTime timestamp"),
    _s("leader.replication.throttled.replicas", None, LIST, "", _throttled_replicas,
       "replicas whose leader-side replication is throttled"),
    _s("follower.replication.throttled.replicas", None, LIST, "", _throttled_replicas,
       "replicas whose follower-side replication is throttled"),
    _s("remote.storage.enable", None, BOOLEAN, False, None, "tier the topic's segments to remote storage"),
    _s("local.retention.ms", "log.local.retention.ms", LONG, -2, at_least(-2),
       "local retention with tiered storage (-2: retention.ms)"),
    _s("local.retention.bytes", "log.local.retention.bytes", LONG, -2, at_least(-2),
       "local retention with tiered storage (-2: retention.bytes)"),
    _s("remote.log.copy.disable", None, BOOLEAN, False, None, "stop copying segments to remote storage"),
    _s("remote.log.delete.on.disable", None, BOOLEAN, False, None,
       "delete remote data when remote storage is disabled"),
])

# Accepted, validated, stored and described, but without effect in odradek (README:
# "accepted but ignored"). Everything else in TOPIC_CONFIGS changes what the log does.
IGNORED_TOPIC_CONFIGS = {
    "segment.jitter.ms": "segments roll at segment.ms exactly",
    "segment.index.bytes": "indexes grow as needed; they are not preallocated",
    "file.delete.delay.ms": "deleted segments are removed at once",
    "preallocate": "segment files grow as they are written",
    "leader.replication.throttled.replicas": "replication is not throttled",
    "follower.replication.throttled.replicas": "replication is not throttled",
    "local.retention.ms": "no tiered storage: retention.ms governs",
    "local.retention.bytes": "no tiered storage: retention.bytes governs",
    "remote.log.copy.disable": "no tiered storage",
    "remote.log.delete.on.disable": "no tiered storage",
    "remote.storage.enable": "no tiered storage (only false is accepted, as Kafka with it disabled)",
}

BY_BROKER_KEY: dict[str, TopicSetting] = {s.broker_key: s for s in TOPIC_CONFIGS.values() if s.broker_key}


def resolve_topic_config(defaults: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """Effective topic config: parsed overrides on top of the broker defaults.

    Raises KeyError for an unknown key and ConfigError (a ValueError) for a bad value.
    """
    out = dict(defaults)
    for key, value in overrides.items():
        out[key] = TOPIC_CONFIGS[key].parse(value)
    return out


def validate_topic_config(defaults: Mapping[str, Any], overrides: Mapping[str, str | None]) -> dict[str, Any]:
    """Kafka's LogConfig.validate for a topic's complete set of overrides on this broker's
    defaults; returns the effective config. Raises ConfigError with Kafka's message
    (every failure is INVALID_CONFIG on the wire)."""
    unknown = [k for k in overrides if k not in TOPIC_CONFIGS]
    if unknown:
        raise ConfigError(None, None, f"Unknown topic config name: {unknown[0]}")
    nulls = [k for k, v in overrides.items() if v is None]
    if nulls:
        raise ConfigError(None, None, "Null value not supported for topic configs: " + ",".join(nulls))
    effective = resolve_topic_config(defaults, overrides)  # type: ignore[arg-type]
    check_values(effective)
    return effective


def check_values(effective: Mapping[str, Any]) -> None:
    """LogConfig.validateValues and the tiered-storage check, on effective values."""
    lo, hi = effective["min.compaction.lag.ms"], effective["max.compaction.lag.ms"]
    if lo > hi:
        raise ConfigError(None, None, f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                                      f"max.compaction.lag.ms ({hi})")
    if effective.get("remote.storage.enable"):
        raise ConfigError(None, None, "Tiered Storage functionality is disabled in the broker. "
                                      "Topic cannot be configured with remote log storage.")
