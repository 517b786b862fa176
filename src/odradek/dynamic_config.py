"""Dynamic broker configs: which keys AlterConfigs may change on a BROKER resource, and
how Kafka validates such a change.

Theory of operation (Kafka's DynamicBrokerConfig and ConfigAdminManager): a BROKER
resource is either the cluster-wide default (name "") or one broker (its node id). A
change names the complete set of dynamic configs that resource should hold; it is
checked, in Kafka's order, by `validate_broker_configs`:

1. keys that exist but cannot change at runtime: "Cannot update these configs
   dynamically: Set(...)" (DynamicBrokerConfig.validateConfigs, nonDynamicConfigs);
2. SSL keystore/truststore keys without a listener prefix;
3. the values, parsed with the key's ConfigDef type and validator;
4. per-broker keys (listener, SSL and SASL settings) at the cluster default level;
5. the reconfiguration checks: thread pools may at most halve or double
   (DynamicThreadPool), log.local.retention.* within log.retention.* (DynamicLogConfig),
   min.cleaner compaction lag within the max.

Every failure is a ConfigError; the handler answers INVALID_REQUEST for it, as Kafka
does (KAFKA-13609: ConfigAdminManager wraps ConfigException in InvalidRequestException).

Keys odradek knows: the `log.*` (and message.max.bytes, compression.type, ...) broker
synonyms of topic configs, which change the defaults of every topic that does not
override them; and Kafka's other dynamic keys, which odradek accepts and stores but
does not act on (`IGNORED_DYNAMIC`, for README's "accepted but ignored"). Keys Kafka
does not know are accepted as Kafka does (DynamicConfig.Broker allows custom props).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .configdef import (
    BOOLEAN,
    CLASS,
    DOUBLE,
    INT,
    LIST,
    LONG,
    PASSWORD,
    SHORT,
    STRING,
    ConfigError,
    ConfigKey,
    at_least,
    between,
    scala_set,
)
from .config import STATIC_KEYS
from .log_config import BY_BROKER_KEY, check_values

_LISTENER_PREFIX = re.compile(r"listener\.name\.[^.]*\.(.*)")


def _k(name: str, type_: str, default: Any = None, validator=None) -> tuple[str, ConfigKey]:
    return name, ConfigKey(name, type_, default, validator)


# Kafka's dynamic broker keys that odradek accepts, validates and stores, but does not act
# on: odradek has no thread pools to resize, no SSL/SASL, no log cleaner threads or
# buffers, no tiered storage, no replication quotas.
IGNORED_DYNAMIC: dict[str, ConfigKey] = dict([
    # DynamicThreadPool
    _k("num.io.threads", INT, 8, at_least(1)),
    _k("num.replica.fetchers", INT, 1),
    _k("num.recovery.threads.per.data.dir", INT, 2, at_least(1)),
    _k("background.threads", INT, 10, at_least(1)),
    # LogCleaner.ReconfigurableConfigs (message.max.bytes is a topic default, below)
    _k("log.cleaner.threads", INT, 1, at_least(0)),
    _k("log.cleaner.dedupe.buffer.size", LONG, 128 * 1024 * 1024),
    _k("log.cleaner.io.buffer.load.factor", DOUBLE, 0.9),
    _k("log.cleaner.io.buffer.size", INT, 512 * 1024, at_least(0)),
    _k("log.cleaner.io.max.bytes.per.second", DOUBLE, 1.7976931348623157e308),
    # ...except this one, which broker/maintenance.compaction re-reads every round
    _k("log.cleaner.backoff.ms", LONG, 15_000, at_least(0)),
    # metrics, producer state, socket server
    _k("metric.reporters", LIST, ""),
    _k("producer.id.expiration.ms", INT, 86_400_000, at_least(1)),
    _k("transaction.partition.verification.enable", BOOLEAN, True),
    _k("max.connection.creation.rate", INT, (1 << 31) - 1, at_least(0)),
    _k("num.network.threads", INT, 3, at_least(1)),
    # DynamicRemoteLogConfig
    _k("remote.log.index.file.cache.total.size.bytes", LONG, 1024 * 1024 * 1024, at_least(1)),
    _k("remote.fetch.max.wait.ms", INT, 500, at_least(1)),
    _k("remote.log.manager.copy.max.bytes.per.second", LONG, (1 << 63) - 1, at_least(1)),
    _k("remote.log.manager.fetch.max.bytes.per.second", LONG, (1 << 63) - 1, at_least(1)),
    _k("remote.list.offsets.request.timeout.ms", LONG, 30_000, at_least(1)),
    # QuotaConfig.brokerQuotaConfigs
    _k("leader.replication.throttled.rate", LONG, (1 << 63) - 1, at_least(0)),
    _k("follower.replication.throttled.rate", LONG, (1 << 63) - 1, at_least(0)),
    _k("replica.alter.log.dirs.io.max.bytes.per.second", LONG, (1 << 63) - 1, at_least(0)),
    # DynamicListenerConfig: SSL and SASL (per broker; odradek speaks PLAINTEXT only)
    _k("principal.builder.class", CLASS),
    _k("ssl.protocol", STRING, "TLSv1.3"),
    _k("ssl.provider", STRING),
    _k("ssl.cipher.suites", LIST),
    _k("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3"),
    _k("ssl.keymanager.algorithm", STRING, "SunX509"),
    _k("ssl.trustmanager.algorithm", STRING, "PKIX"),
    _k("ssl.endpoint.identification.algorithm", STRING, "https"),
    _k("ssl.secure.random.implementation", STRING),
    _k("ssl.client.auth", STRING, "none"),
    _k("ssl.engine.factory.class", CLASS),
    _k("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI"),
    _k("sasl.jaas.config", PASSWORD),
    _k("sasl.enabled.mechanisms", LIST, "GSSAPI"),
    _k("sasl.kerberos.service.name", STRING),
    _k("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit"),
    _k("sasl.kerberos.ticket.renew.window.factor", DOUBLE, 0.8),
    _k("sasl.kerberos.ticket.renew.jitter", DOUBLE, 0.05),
    _k("sasl.kerberos.min.time.before.relogin", LONG, 60_000),
    _k("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT"),
    _k("sasl.login.refresh.window.factor", DOUBLE, 0.8, between(0.5, 1.0)),
    _k("sasl.login.refresh.window.jitter", DOUBLE, 0.05, between(0.0, 0.25)),
    _k("sasl.login.refresh.min.period.seconds", SHORT, 60, between(0, 900)),
    _k("sasl.login.refresh.buffer.seconds", SHORT, 300, between(0, 3600)),
])

# Kafka's DynamicSecurityConfigs (SslConfigs.RECONFIGURABLE_CONFIGS): only with a
# listener.name.<listener>. prefix.
LISTENER_ONLY = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})

# Kafka's PerBrokerConfigs: DynamicSecurityConfigs and DynamicListenerConfig's keys but
# the cluster-level ones; never at the cluster default level.
CLUSTER_LEVEL_LISTENER = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
PER_BROKER_ONLY = frozenset(
    {k for k in IGNORED_DYNAMIC if k.startswith(("ssl.", "sasl."))}
    | {"principal.builder.class", "listeners", "advertised.listeners", "listener.security.protocol.map"}
    | LISTENER_ONLY)

# Dynamic in Kafka, not (yet) in odradek: it would have to rebind or re-read them live.
NOT_DYNAMIC_HERE = frozenset({
    "listeners", "advertised.listeners", "listener.security.protocol.map",
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
})

# Kafka broker keys that cannot change at runtime (KafkaConfig keys outside
# DynamicBrokerConfig.AllDynamicConfigs) that odradek knows of: its own static keys,
# the coarser synonyms of topic defaults, the group coordinator's keys, and Kafka's
# best-known others. A key in none of these tables is a custom key, stored as given.
STATIC_KAFKA_KEYS = (STATIC_KEYS - {"log.cleaner.backoff.ms"}) | frozenset({
    "node.id", "broker.id", "broker.rack", "log.dirs", "log.dir", "num.partitions", "default.replication.factor",
    "auto.create.topics.enable", "socket.request.max.bytes", "log.retention.check.interval.ms",
    "connections.max.idle.ms", "request.timeout.ms", "queued.max.request.bytes",
    "log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.roll.jitter.hours",
    "log.flush.scheduler.interval.ms", "log.flush.offset.checkpoint.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms", "log.cleaner.enable", "log.cleanup.interval.ms",
    "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers", "controller.listener.names",
    "inter.broker.listener.name", "security.inter.broker.protocol", "cluster.id", "zookeeper.connect",
    "metadata.log.dir", "num.replica.alter.log.dirs.threads", "replica.lag.time.max.ms",
    "replica.fetch.max.bytes", "replica.fetch.wait.max.ms", "replica.socket.timeout.ms",
    "socket.send.buffer.bytes", "socket.receive.buffer.bytes", "socket.listen.backlog.size",
    "queued.max.requests", "offsets.topic.num.partitions", "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes", "offsets.retention.minutes", "offsets.retention.check.interval.ms",
    "offsets.commit.timeout.ms", "offsets.load.buffer.size", "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr", "transactional.id.expiration.ms",
    "transaction.max.timeout.ms", "delete.topic.enable", "auto.leader.rebalance.enable",
    "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms", "group.max.session.timeout.ms",
    "group.max.size", "group.classic.max.size", "group.coordinator.rebalance.protocols",
    "group.coordinator.threads", "group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
    "group.consumer.max.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
    "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
    "group.consumer.reconciling.heartbeat.interval.ms",
    "group.consumer.max.size", "group.consumer.assignors", "group.consumer.migration.policy",
    "compression.type.producer", "create.topic.policy.class.name", "alter.config.policy.class.name",
})

# DynamicThreadPool.ReconfigurableConfigs: a change may at most halve or double the pool.
THREAD_POOLS = ("num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads")


def base_name(key: str) -> str:
    """`listener.name.<l>.<config>` -> `<config>`; other keys unchanged."""
    m = _LISTENER_PREFIX.fullmatch(key)
    return m.group(1) if m else key


def key_def(key: str) -> ConfigKey | None:
    """The ConfigDef of a dynamic broker key odradek knows, or None (custom keys)."""
    name = base_name(key)
    return BY_BROKER_KEY.get(name) or IGNORED_DYNAMIC.get(name)


def is_dynamic(key: str) -> bool:
    """Whether AlterConfigs may set `key` on a BROKER resource of odradek."""
    if _LISTENER_PREFIX.fullmatch(key):
        return True  # a per-listener setting: dynamic in Kafka (accepted, ignored here)
    return key not in NOT_DYNAMIC_HERE and key not in STATIC_KAFKA_KEYS


def per_broker_only(key: str) -> bool:
    m = _LISTENER_PREFIX.fullmatch(key)
    if m:
        return m.group(1) not in CLUSTER_LEVEL_LISTENER
    return key in PER_BROKER_ONLY


def is_list(key: str) -> bool:
    d = key_def(key)
    return d is not None and d.type == LIST


def list_default(key: str) -> str:
    """The ConfigDef default of a LIST key, as APPEND/SUBTRACT start from it."""
    d = key_def(key)
    return d.to_string(d.default) if d is not None and d.default is not None else ""


def _values(props: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in props.items():
        d = key_def(key)
        if d is not None:
            out[key] = d.parse(value, name=key)
    return out


def effective_values(config) -> dict[str, Any]:
    """The value of every dynamic broker key odradek knows, as `config` (a BrokerConfig)
    resolves it now: per-broker dynamic, cluster default, static, built-in default."""
    defaults = config.topic_defaults()
    out: dict[str, Any] = {s.broker_key: defaults[s.name] for s in BY_BROKER_KEY.values()}
    # The static level is every key the broker reads (log.cleaner.backoff.ms among them)
    # plus the unrecognised ones it keeps (config.extra): broker_configs() holds both.
    levels = (*(values for values, _ in config.dynamic_levels()), config.broker_configs())
    for key, d in IGNORED_DYNAMIC.items():
        out[key] = d.default
        for values in levels:
            if key in values:
                try:
                    out[key] = d.parse(values[key], name=key)
                    break
                except ConfigError:
                    continue
    return out


def validate_broker_configs(props: Mapping[str, str], per_broker: bool, current: Mapping[str, Any],
                            proposed: Mapping[str, Any]) -> dict[str, Any]:
    """Kafka's checks of the complete new set of dynamic configs of one BROKER resource.

    `current` and `proposed`: effective_values() before and after the change (for the
    thread-pool bounds and the cross-key checks). Returns the parsed values of the keys
    odradek knows; raises ConfigError with Kafka's message.
    """
    non_dynamic = [k for k in props if not is_dynamic(k)]
    if non_dynamic:
        raise ConfigError(None, None, f"Cannot update these configs dynamically: {scala_set(non_dynamic)}")
    bare_security = [k for k in props if k in LISTENER_ONLY]
    if bare_security:
        raise ConfigError(None, None, "These security configs can be dynamically updated only per-listener using "
                                      f"the listener prefix: {scala_set(bare_security)}")
    values = _values(props)
    if not per_broker:
        broker_only = [k for k in props if per_broker_only(k)]
        if broker_only:
            raise ConfigError(None, None, "Cannot update these configs at default cluster level, broker id must be "
                                          f"specified: {scala_set(broker_only)}")
    for key in THREAD_POOLS:
        if proposed.get(key) != current.get(key):
            _check_pool(key, int(proposed[key]), int(current[key]))
    _check_local_retention(proposed)
    _check_compaction_lag(proposed)
    return values


def _check_pool(key: str, new: int, old: int) -> None:
    # DynamicThreadPool.validateReconfiguration
    prefix = f"Dynamic thread count update validation failed for {key}={new}"
    if new <= 0:
        raise ConfigError(None, None, f"{prefix}, value should be at least 1")
    if new < old // 2:
        raise ConfigError(None, None, f"{prefix}, value should be at least half the current value {old}")
    if new > old * 2:
        raise ConfigError(None, None, f"{prefix}, value should not be greater than double the current value {old}")


def _check_local_retention(v: Mapping[str, Any]) -> None:
    # DynamicLogConfig.validateReconfiguration
    for kind, total_key, local_key, unlimited in (
            ("ms", "log.retention.ms", "log.local.retention.ms", lambda n: n == -1),
            ("bytes", "log.retention.bytes", "log.local.retention.bytes", lambda n: n <= -1)):
        total, local = v.get(total_key), v.get(local_key)
        if total is None or local is None or unlimited(total) or local == -2:
            continue
        if local == -1:
            raise ConfigError(local_key, local, f"Value must not be -1 as {total_key} value is set as {total}.")
        if local > total:
            raise ConfigError(local_key, local, f"Value must not be more than {total_key} property value: {total}")


def _check_compaction_lag(v: Mapping[str, Any]) -> None:
    lo, hi = v.get("log.cleaner.min.compaction.lag.ms"), v.get("log.cleaner.max.compaction.lag.ms")
    if lo is not None and hi is not None:
        check_values({"min.compaction.lag.ms": lo, "max.compaction.lag.ms": hi})
