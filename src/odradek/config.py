"""Broker and topic configuration, with Kafka's key names.

Broker settings come from (lowest to highest precedence) built-in defaults, a Java-style
properties file (`--config`), and command-line flags. Topic settings are the broker's
`log.*` defaults overridden per topic, exactly as Kafka's `LogConfig` derives them; the
table `TOPIC_CONFIGS` maps each topic key to its broker key and type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DAY_MS = 24 * 3600 * 1000
LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


def _bool(v: str | bool) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


def _policy(v: str) -> str:
    parts = sorted(p.strip() for p in str(v).split(",") if p.strip())
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"cleanup.policy must be delete, compact or both, not {v!r}")
    return ",".join(parts)


def _ts_type(v: str) -> str:
    if v not in ("CreateTime", "LogAppendTime"):
        raise ValueError(f"message.timestamp.type must be CreateTime or LogAppendTime, not {v!r}")
    return v


def _compression(v: str) -> str:
    if v not in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
        raise ValueError(f"unknown compression.type {v!r}")
    if v != "producer":
        # Recompressing on the broker would mean per-record work; odradek keeps batches as sent.
        raise ValueError("odradek only supports compression.type=producer")
    return v


def _at_least(minimum: int) -> Callable[[Any], int]:
    """An integer config with Kafka's lower bound (LogConfig's ConfigDef ranges)."""

    def parse(v: Any) -> int:
        n = int(v)
        if n < minimum:
            raise ValueError(f"value {n} is below the minimum {minimum}")
        return n

    return parse


def _between(minimum: int, maximum: int) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        n = int(v)
        if not minimum <= n <= maximum:
            raise ValueError(f"value {n} is outside [{minimum}, {maximum}]")
        return n

    return parse


@dataclass(frozen=True)
class TopicSetting:
    broker_key: str
    parse: Callable[[Any], Any]
    default: Any
    doc: str


# topic key -> how it defaults from the broker (Kafka's LogConfig / ServerLogConfigs)
TOPIC_CONFIGS: dict[str, TopicSetting] = {
    "cleanup.policy": TopicSetting("log.cleanup.policy", _policy, "delete", "delete and/or compact old segments"),
    # segment.bytes is an int in Kafka: a segment's file positions must fit the index's 32 bits.
    "segment.bytes": TopicSetting("log.segment.bytes", _between(14, INT_MAX), 1 << 30, "roll a segment at this size"),
    "segment.ms": TopicSetting("log.roll.ms", _at_least(1), 7 * DAY_MS, "roll a segment at this age"),
    "retention.ms": TopicSetting("log.retention.ms", _at_least(-1), 7 * DAY_MS, "delete segments older than this (-1: never)"),
    "retention.bytes": TopicSetting("log.retention.bytes", int, -1, "delete oldest segments beyond this size per partition (-1: no limit)"),
    "delete.retention.ms": TopicSetting("log.cleaner.delete.retention.ms", _at_least(0), DAY_MS, "how long tombstones survive compaction"),
    "min.compaction.lag.ms": TopicSetting("log.cleaner.min.compaction.lag.ms", _at_least(0), 0, "records younger than this are not compacted"),
    "flush.messages": TopicSetting("log.flush.interval.messages", _at_least(1), (1 << 63) - 1, "fsync after this many messages"),
    "flush.ms": TopicSetting("log.flush.interval.ms", _at_least(0), (1 << 63) - 1, "fsync at least this often"),
    "index.interval.bytes": TopicSetting("log.index.interval.bytes", _at_least(0), 4096, "bytes between offset index entries"),
    "max.message.bytes": TopicSetting("message.max.bytes", _at_least(0), 1048588, "largest record batch accepted"),
    "message.timestamp.type": TopicSetting("log.message.timestamp.type", _ts_type, "CreateTime", "CreateTime or LogAppendTime"),
    "compression.type": TopicSetting("compression.type", _compression, "producer", "only 'producer' (batches are stored as sent)"),
    # KIP-937: CreateTime records further than this before/after the broker's clock are
    # rejected (INVALID_TIMESTAMP). Kafka 4 defaults: no lower bound, one hour ahead.
    "message.timestamp.before.max.ms": TopicSetting(
        "log.message.timestamp.before.max.ms", _at_least(0), LONG_MAX, "largest age of a CreateTime timestamp"),
    "message.timestamp.after.max.ms": TopicSetting(
        "log.message.timestamp.after.max.ms", _at_least(0), 3_600_000, "largest lead of a CreateTime timestamp"),
}


@dataclass
class BrokerConfig:
    node_id: int = 1
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertise_host: str | None = None
    advertise_port: int | None = None
    rack: str | None = None
    data_dir: Path = Path("./data")
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    socket_request_max_bytes: int = 104857600
    retention_check_interval_ms: int = 300_000
    cleaner_backoff_ms: int = 15_000
    # Connection limits (Kafka's SocketServer keys; see README "Limits").
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    connections_max_idle_ms: int = 600_000
    # odradek key: a request frame must arrive whole within this long of its first byte.
    request_timeout_ms: int = 30_000
    # Bytes of request frames held (partly received or waiting) over all connections; at
    # the limit the broker stops reading sockets until memory frees (Kafka's MemoryPool).
    # Kafka's default is -1 (no limit); odradek bounds it at twice socket.request.max.bytes.
    queued_max_request_bytes: int = 2 * 104857600
    # odradek key: segment files kept open at once (-1: derived from the fd limit).
    log_max_open_files: int = -1
    log_defaults: dict[str, Any] = field(default_factory=dict)  # broker key -> value
    extra: dict[str, str] = field(default_factory=dict)  # unrecognised keys, kept for DescribeConfigs

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertise_host or self.listen_host, self.advertise_port or self.listen_port)

    def topic_defaults(self) -> dict[str, Any]:
        """The effective default value of every topic config key."""
        out = {}
        for key, setting in TOPIC_CONFIGS.items():
            out[key] = self.log_defaults.get(setting.broker_key, setting.default)
        return out

    def broker_configs(self) -> dict[str, str]:
        """Broker configs as DescribeConfigs reports them (Kafka key names)."""
        host, port = self.advertised
        out = {
            "node.id": str(self.node_id),
            "broker.id": str(self.node_id),
            "listeners": f"PLAINTEXT://{self.listen_host}:{self.listen_port}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port}",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.num_partitions),
            "default.replication.factor": str(self.default_replication_factor),
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            "socket.request.max.bytes": str(self.socket_request_max_bytes),
            "log.retention.check.interval.ms": str(self.retention_check_interval_ms),
            "max.connections": str(self.max_connections),
            "max.connections.per.ip": str(self.max_connections_per_ip),
            "max.connections.per.ip.overrides": ",".join(f"{h}:{n}" for h, n in self.max_connections_per_ip_overrides.items()),
            "connections.max.idle.ms": str(self.connections_max_idle_ms),
            "request.timeout.ms": str(self.request_timeout_ms),
            "queued.max.request.bytes": str(self.queued_max_request_bytes),
            "log.max.open.files": str(self.log_max_open_files),
        }
        if self.rack is not None:
            out["broker.rack"] = self.rack
        for key, setting in TOPIC_CONFIGS.items():
            out[setting.broker_key] = str(self.log_defaults.get(setting.broker_key, setting.default))
        out.update(self.extra)
        return out


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments, \\ continuation."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            out[line] = ""
    if pending:  # java.util.Properties keeps a continuation that ends the input
        return {**out, **parse_properties(pending)}
    return out


def _hostport(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {s!r}")
    return host.strip("[]"), int(port)


def _listener(s: str) -> tuple[str, int]:
    # "PLAINTEXT://127.0.0.1:9092" or "127.0.0.1:9092"; the first listener wins.
    first = s.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, _, port = first.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {first!r}")
    return host.strip("[]") or "0.0.0.0", int(port)  # Kafka: an empty host binds every interface


_BROKER_KEYS: dict[str, Callable[[BrokerConfig, str], None]] = {
    "node.id": lambda c, v: setattr(c, "node_id", int(v)),
    "broker.id": lambda c, v: setattr(c, "node_id", int(v)),
    "broker.rack": lambda c, v: setattr(c, "rack", v),
    "log.dirs": lambda c, v: setattr(c, "data_dir", Path(v.split(",")[0].strip())),
    "log.dir": lambda c, v: setattr(c, "data_dir", Path(v.strip())),
    "num.partitions": lambda c, v: setattr(c, "num_partitions", int(v)),
    "default.replication.factor": lambda c, v: setattr(c, "default_replication_factor", int(v)),
    "auto.create.topics.enable": lambda c, v: setattr(c, "auto_create_topics", _bool(v)),
    "socket.request.max.bytes": lambda c, v: setattr(c, "socket_request_max_bytes", int(v)),
    "log.retention.check.interval.ms": lambda c, v: setattr(c, "retention_check_interval_ms", int(v)),
    "log.cleaner.backoff.ms": lambda c, v: setattr(c, "cleaner_backoff_ms", int(v)),
    "max.connections": lambda c, v: setattr(c, "max_connections", _positive(v)),
    "max.connections.per.ip": lambda c, v: setattr(c, "max_connections_per_ip", _positive(v, 0)),
    "max.connections.per.ip.overrides": lambda c, v: setattr(c, "max_connections_per_ip_overrides", _ip_overrides(v)),
    "connections.max.idle.ms": lambda c, v: setattr(c, "connections_max_idle_ms", int(v)),
    "request.timeout.ms": lambda c, v: setattr(c, "request_timeout_ms", _positive(v)),
    "queued.max.request.bytes": lambda c, v: setattr(c, "queued_max_request_bytes", int(v)),
    "log.max.open.files": lambda c, v: setattr(c, "log_max_open_files", int(v)),
    "listeners": lambda c, v: _set_listen(c, _listener(v)),
    "advertised.listeners": lambda c, v: _set_advertise(c, _listener(v)),
}

# Kafka's coarser-grained aliases: the finest one given wins, like Kafka's precedence.
_ALIASES = {
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
}


def _positive(v: str, minimum: int = 1) -> int:
    n = int(v)
    if n < minimum:
        raise ValueError(f"value {n} is below the minimum {minimum}")
    return n


def _ip_overrides(v: str) -> dict[str, int]:
    """Kafka's `max.connections.per.ip.overrides`: "host:count,host:count"."""
    out: dict[str, int] = {}
    for item in v.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, count = item.rpartition(":")
        if not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides entry {item!r} is not host:count")
        out[host.strip().strip("[]")] = int(count)
    return out


def _set_listen(c: BrokerConfig, hp: tuple[str, int]) -> None:
    c.listen_host, c.listen_port = hp


def _set_advertise(c: BrokerConfig, hp: tuple[str, int]) -> None:
    c.advertise_host, c.advertise_port = hp


def apply_properties(config: BrokerConfig, props: dict[str, str]) -> BrokerConfig:
    by_broker_key = {s.broker_key: s for s in TOPIC_CONFIGS.values()}
    # Apply aliases coarsest first so a finer key given alongside wins.
    for alias in ("log.retention.hours", "log.retention.minutes", "log.roll.hours"):
        if alias in props and _ALIASES[alias][0] not in props:
            target, factor = _ALIASES[alias]
            value = int(props[alias])
            config.log_defaults[target] = -1 if value < 0 else value * factor  # negative: unlimited
    for key, value in props.items():
        if key in _BROKER_KEYS:
            _BROKER_KEYS[key](config, value)
        elif key in by_broker_key:
            config.log_defaults[key] = by_broker_key[key].parse(value)
        elif key not in _ALIASES:
            config.extra[key] = value
    return config


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
    config = BrokerConfig()
    if path is not None:
        apply_properties(config, parse_properties(Path(path).read_text()))
    for name, value in (overrides or {}).items():
        if value is not None:
            setattr(config, name, value)
    return config


def resolve_topic_config(defaults: dict[str, Any], overrides: dict[str, str]) -> dict[str, Any]:
    """Effective topic config: validated overrides on top of the broker defaults.

    Raises KeyError for an unknown key and ValueError for a bad value (INVALID_CONFIG).
    """
    out = dict(defaults)
    for key, value in overrides.items():
        setting = TOPIC_CONFIGS[key]
        out[key] = setting.parse(value)
    return out
