"""Broker and topic configuration, with Kafka's key names.

Broker settings come from (lowest to highest precedence) built-in defaults, a Java-style
properties file (`--config`), and command-line flags: the static configuration. Dynamic
broker configs (AlterConfigs on a BROKER resource, stored in the cluster metadata) sit
above it: the cluster-wide default (resource name "") and, above that, this broker's
own (its node id), as in Kafka's DynamicBrokerConfig.

Topic settings are the broker's `log.*` defaults overridden per topic, exactly as
Kafka's `LogConfig` derives them (KafkaConfigSchema.resolveEffectiveTopicConfig: topic
override, dynamic per-broker, dynamic cluster default, static, ConfigDef default); the
table `log_config.TOPIC_CONFIGS` maps each topic key to its broker key and type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .configdef import LONG_MAX, ConfigError  # noqa: F401  (LONG_MAX re-exported)
from .log_config import (  # noqa: F401  (re-exported: the historical home of these names)
    BY_BROKER_KEY,
    DAY_MS,
    INT_MAX,
    TOPIC_CONFIGS,
    TopicSetting,
    resolve_topic_config,
    validate_topic_config,
)

# DescribeConfigs ConfigSource (DescribeConfigsResponse.ConfigSource)
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

CLUSTER_DEFAULT = ""  # the BROKER resource name of the cluster-wide dynamic default


def _bool(v: str | bool) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


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
    # A cluster: `etcd://HOST:PORT[,...]` (cluster/backend.py); None is the embedded file store.
    metadata_url: str | None = None
    # KRaft's names for the registration lease: a broker whose lease is not refreshed for
    # broker.session.timeout.ms is gone, and the controller moves its partitions.
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    # Kafka ReplicaManager / ReplicaFetcherThread settings.
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_backoff_ms: int = 1000
    # KIP-392: None (Kafka's default) lets the leader serve every consumer; a selector name
    # (replication/selector.py) sends consumers to a replica in their rack.
    replica_selector_class: str | None = None
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
    static_keys: set[str] = field(default_factory=set)  # keys the properties file set
    # Dynamic broker configs: resource name ("" or a node id) -> {key: value as given}. The
    # broker attaches the cluster metadata's own dict (attach_dynamic), so a change the
    # metadata journal applies is seen here at once, and after a restart.
    dynamic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # `listeners` and its kin as given (security/listeners.py), and what they configure:
    # the inter-broker listener first, its address also in listen_host/listen_port and
    # advertise_host/advertise_port. Empty: one PLAINTEXT listener at listen_host:listen_port.
    listener_props: dict[str, str] = field(default_factory=dict)
    listeners: list = field(default_factory=list)
    # odradek keys (README "Observability"): Prometheus /metrics (empty: off, and nothing is
    # counted), and the live console (off unless console.enable).
    metrics_listener: str = "127.0.0.1:9404"
    console_listener: str = "127.0.0.1:9405"
    console_enable: bool = False

    @property
    def advertised(self) -> tuple[str, int]:
        return (self.advertise_host or self.listen_host, self.advertise_port or self.listen_port)

    # --- dynamic broker configs ----------------------------------------------------------

    def attach_dynamic(self, store: dict[str, dict[str, str]]) -> None:
        """Read dynamic broker configs from `store` (MetadataStore.broker_configs) from now on."""
        self.dynamic_configs = store

    def dynamic_default(self) -> dict[str, str]:
        return self.dynamic_configs.get(CLUSTER_DEFAULT) or {}

    def dynamic_broker(self) -> dict[str, str]:
        return self.dynamic_configs.get(str(self.node_id)) or {}

    def dynamic_levels(self) -> tuple[tuple[dict[str, str], int], ...]:
        """The dynamic broker configs, highest precedence first, each with the ConfigSource
        DescribeConfigs reports for it (Kafka's DynamicBrokerConfig: per-broker over the
        cluster-wide default)."""
        return ((self.dynamic_broker(), DYNAMIC_BROKER_CONFIG), (self.dynamic_default(), DYNAMIC_DEFAULT_BROKER_CONFIG))

    # --- topic defaults ----------------------------------------------------------------

    def log_default_synonyms(self, setting: TopicSetting) -> list[tuple[str, Any, int]]:
        """(broker key, value, ConfigSource) for a topic key's broker synonym, highest
        precedence first, as Kafka's ConfigHelper.configSynonyms lists them: dynamic
        per-broker, dynamic cluster default, static, default. A stored dynamic value
        that no longer parses is skipped, as Kafka ignores invalid dynamic configs."""
        if setting.broker_key is None:
            return []
        key = setting.broker_key
        out: list[tuple[str, Any, int]] = []
        for values, source in self.dynamic_levels():
            if key in values:
                try:
                    out.append((key, setting.parse(values[key], name=key), source))
                except ConfigError:
                    pass
        if key in self.log_defaults:
            out.append((key, self.log_defaults[key], STATIC_BROKER_CONFIG))
        out.append((key, setting.default, DEFAULT_CONFIG))
        return out

    def topic_defaults(self) -> dict[str, Any]:
        """The effective default value of every topic config key."""
        per_broker, cluster = self.dynamic_broker(), self.dynamic_default()
        out = {}
        for key, setting in TOPIC_CONFIGS.items():
            broker_key = setting.broker_key
            if broker_key is not None and (broker_key in per_broker or broker_key in cluster):
                out[key] = self.log_default_synonyms(setting)[0][1]
            else:
                out[key] = self.log_defaults.get(broker_key, setting.default) if broker_key else setting.default
        return out

    def effective_listeners(self) -> list:
        """Every listener, the inter-broker one first. listen_host/listen_port (which
        --listen and a bound port 0 set) are the inter-broker listener's address."""
        from .security.listeners import Listener

        if not self.listeners:
            self.listeners = [Listener("PLAINTEXT", self.listen_host, self.listen_port, "PLAINTEXT")]
        first = self.listeners[0]
        first.host, first.port = self.listen_host, self.listen_port
        first.advertised_host, first.advertised_port = self.advertise_host, self.advertise_port
        return self.listeners

    def _listeners_value(self, advertised: bool) -> str:
        out = []
        for lst in self.listeners:
            host, port = lst.advertised if advertised else (lst.host, lst.port)
            out.append(f"{lst.name}://{host}:{port}")
        return ",".join(out)

    def broker_configs(self) -> dict[str, str]:
        """The static broker configs (file, flags, defaults) with Kafka key names."""
        host, port = self.advertised
        out = {
            "node.id": str(self.node_id),
            "broker.id": str(self.node_id),
            "listeners": self._listeners_value(False) or f"PLAINTEXT://{self.listen_host}:{self.listen_port}",
            "advertised.listeners": self._listeners_value(True) or f"PLAINTEXT://{host}:{port}",
            "log.dirs": str(self.data_dir),
            "num.partitions": str(self.num_partitions),
            "default.replication.factor": str(self.default_replication_factor),
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            "socket.request.max.bytes": str(self.socket_request_max_bytes),
            "log.retention.check.interval.ms": str(self.retention_check_interval_ms),
            "log.cleaner.backoff.ms": str(self.cleaner_backoff_ms),
            "max.connections": str(self.max_connections),
            "max.connections.per.ip": str(self.max_connections_per_ip),
            "max.connections.per.ip.overrides": ",".join(f"{h}:{n}" for h, n in self.max_connections_per_ip_overrides.items()),
            "connections.max.idle.ms": str(self.connections_max_idle_ms),
            "request.timeout.ms": str(self.request_timeout_ms),
            "queued.max.request.bytes": str(self.queued_max_request_bytes),
            "log.max.open.files": str(self.log_max_open_files),
            "broker.session.timeout.ms": str(self.broker_session_timeout_ms),
            "broker.heartbeat.interval.ms": str(self.broker_heartbeat_interval_ms),
            "replica.lag.time.max.ms": str(self.replica_lag_time_max_ms),
            "replica.fetch.wait.max.ms": str(self.replica_fetch_wait_max_ms),
            "replica.fetch.min.bytes": str(self.replica_fetch_min_bytes),
            "replica.fetch.max.bytes": str(self.replica_fetch_max_bytes),
            "replica.fetch.backoff.ms": str(self.replica_fetch_backoff_ms),
            "metrics.listener": self.metrics_listener,
            "console.listener": self.console_listener,
            "console.enable": "true" if self.console_enable else "false",
        }
        if self.replica_selector_class:
            out["replica.selector.class"] = self.replica_selector_class
        if self.rack is not None:
            out["broker.rack"] = self.rack
        for setting in BY_BROKER_KEY.values():
            out[setting.broker_key] = setting.to_string(self.log_defaults.get(setting.broker_key, setting.default))
        out.update(self.extra)
        return out

    def static_broker_keys(self) -> set[str]:
        """Keys of broker_configs() that the static configuration sets (Kafka's
        STATIC_BROKER_CONFIG); the rest are built-in defaults (DEFAULT_CONFIG)."""
        mine, default = self.broker_configs(), BrokerConfig().broker_configs()
        return {k for k, v in mine.items() if k in self.static_keys or default.get(k) != v}


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


LISTENER_KEYS = ("listeners", "advertised.listeners", "listener.security.protocol.map", "inter.broker.listener.name",
                 "security.inter.broker.protocol")


def _named(value: str) -> str:
    # odradek has always taken a bare "HOST:PORT" as the PLAINTEXT listener.
    return ",".join(item if "://" in item or not item.strip() else f"PLAINTEXT://{item.strip()}"
                    for item in value.split(","))


def _resolve_listeners(c: BrokerConfig) -> None:
    from .security.listeners import parse_listeners

    raw = dict(c.listener_props)
    raw["listeners"] = _named(raw.get("listeners", "") or f"PLAINTEXT://{c.listen_host}:{c.listen_port}")
    raw["advertised.listeners"] = _named(raw.get("advertised.listeners", ""))
    c.listeners = parse_listeners(raw)
    first = c.listeners[0]  # the inter-broker listener
    c.listen_host, c.listen_port = first.host, first.port
    c.advertise_host, c.advertise_port = first.advertised_host, first.advertised_port


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
    "listeners": lambda c, v: c.listener_props.__setitem__("listeners", v),
    "broker.session.timeout.ms": lambda c, v: setattr(c, "broker_session_timeout_ms", _positive(v, 1000)),
    "broker.heartbeat.interval.ms": lambda c, v: setattr(c, "broker_heartbeat_interval_ms", _positive(v)),
    "replica.lag.time.max.ms": lambda c, v: setattr(c, "replica_lag_time_max_ms", _positive(v)),
    "replica.fetch.wait.max.ms": lambda c, v: setattr(c, "replica_fetch_wait_max_ms", _positive(v, 0)),
    "replica.fetch.min.bytes": lambda c, v: setattr(c, "replica_fetch_min_bytes", _positive(v)),
    "replica.fetch.max.bytes": lambda c, v: setattr(c, "replica_fetch_max_bytes", _positive(v, 0)),
    "replica.fetch.backoff.ms": lambda c, v: setattr(c, "replica_fetch_backoff_ms", _positive(v, 0)),
    "advertised.listeners": lambda c, v: c.listener_props.__setitem__("advertised.listeners", v),
    "replica.selector.class": lambda c, v: setattr(c, "replica_selector_class", _selector(v)),
    "metrics.listener": lambda c, v: setattr(c, "metrics_listener", _http_listener(v)),
    "console.listener": lambda c, v: setattr(c, "console_listener", _http_listener(v)),
    "console.enable": lambda c, v: setattr(c, "console_enable", _bool(v)),
}


def _http_listener(v: str) -> str:
    """HOST:PORT for an HTTP listener (port 0: any free port); empty turns it off."""
    v = v.strip()
    if v:
        _hostport(v.removeprefix("http://"))
    return v.removeprefix("http://")

# The broker keys odradek reads from its static configuration (besides the log.* topic
# defaults and the group coordinator's keys).
STATIC_KEYS = frozenset(_BROKER_KEYS)

# Kafka's coarser-grained aliases: the finest one given wins, like Kafka's precedence.
_ALIASES = {
    # Applied in this order, so a finer key given alongside a coarser one wins.
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
    "log.roll.jitter.hours": ("log.roll.jitter.ms", 3_600_000),
    # Kafka: log.flush.interval.ms falls back to log.flush.scheduler.interval.ms.
    "log.flush.scheduler.interval.ms": ("log.flush.interval.ms", 1),
}


def _selector(v: str) -> str | None:
    from .replication.selector import selector_named

    selector_named(v)  # Kafka refuses to start on a class it cannot load; so do we (ValueError)
    return v.strip() or None


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


def apply_properties(config: BrokerConfig, props: dict[str, str]) -> BrokerConfig:
    by_broker_key = BY_BROKER_KEY
    config.static_keys.update(props)
    for alias, (target, factor) in _ALIASES.items():
        if alias in props and target not in props:
            value = int(props[alias])
            config.log_defaults[target] = -1 if value < 0 else value * factor  # negative: unlimited
    for key, value in props.items():
        if key in _BROKER_KEYS:
            _BROKER_KEYS[key](config, value)
        elif key in by_broker_key:
            config.log_defaults[key] = by_broker_key[key].parse(value, name=key)
        elif key not in _ALIASES:
            config.extra[key] = value
        if key in LISTENER_KEYS:
            config.listener_props[key] = value
    if any(k in props for k in LISTENER_KEYS):
        _resolve_listeners(config)
    return config


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
    config = BrokerConfig()
    if path is not None:
        apply_properties(config, parse_properties(Path(path).read_text()))
    for name, value in (overrides or {}).items():
        if value is not None:
            setattr(config, name, value)
    return config

