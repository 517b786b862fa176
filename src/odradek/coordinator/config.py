"""Group coordinator settings, with Kafka's key names, and per-group overrides.

Broker-level keys (KIP-848 "Broker Configurations") are read from the broker's
properties; `group.consumer.session.timeout.ms` and `group.consumer.heartbeat.interval.ms`
may be overridden per group through IncrementalAlterConfigs with resource type GROUP
(KIP-848 "Dynamic Group Configuration"), within the broker's min/max bounds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

KNOWN_ASSIGNORS = ("uniform", "range")

# Kafka's full class names are accepted in group.consumer.assignors and mapped to our names.
_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
    "org.apache.kafka.coordinator.group.api.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.server.group.consumer.UniformAssignor": "uniform",
    "org.apache.kafka.server.group.consumer.RangeAssignor": "range",
}

MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")
GROUP_CONFIG_KEYS = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")


class GroupConfigError(ValueError):
    pass


def _assignors(v: str) -> tuple[str, ...]:
    names = []
    for raw in str(v).split(","):
        name = _CLASS_NAMES.get(raw.strip(), raw.strip())
        if not name:
            continue
        if name not in KNOWN_ASSIGNORS:
            raise ValueError(f"unknown assignor {raw.strip()!r} in group.consumer.assignors (known: uniform, range)")
        names.append(name)
    if not names:
        raise ValueError("group.consumer.assignors must name at least one assignor")
    return tuple(names)


@dataclass(frozen=True)
class CoordinatorConfig:
    offsets_topic_partitions: int = 50
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    # Kafka's default is 5 s; odradek's 250 ms lets the reconciling interval below sit under
    # the regular one (README "Heartbeat interval while reconciling").
    min_heartbeat_interval_ms: int = 250
    max_heartbeat_interval_ms: int = 15_000
    # odradek's extension (consumer/interval.py): the interval answered to a member with
    # partitions to revoke or to receive, never below the min nor above the group's regular
    # interval; 0 answers the regular interval to everyone, as Kafka does.
    reconciling_heartbeat_interval_ms: int = 250
    max_size: int = 2**31 - 1
    assignors: tuple[str, ...] = KNOWN_ASSIGNORS
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # classic groups (consumer-0.9 design; Kafka's group.* keys)
    classic_min_session_timeout_ms: int = 6_000
    classic_max_session_timeout_ms: int = 1_800_000
    classic_max_size: int = 2**31 - 1
    initial_rebalance_delay_ms: int = 3_000
    # KIP-848 "Online Migration": bidirectional, upgrade, downgrade or disabled
    migration_policy: str = "bidirectional"
    # Kafka 4.1+ `group.consumer.regex.refresh.interval.ms`: resolved regexes older than
    # this are refreshed at the next heartbeat (consumer/regex.py).
    regex_refresh_interval_ms: int = 10 * 60 * 1000
    extra: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> CoordinatorConfig:
        keys = {
            "offsets.topic.num.partitions": ("offsets_topic_partitions", int),
            "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", int),
            "group.consumer.session.timeout.ms": ("session_timeout_ms", int),
            "group.consumer.min.session.timeout.ms": ("min_session_timeout_ms", int),
            "group.consumer.max.session.timeout.ms": ("max_session_timeout_ms", int),
            "group.consumer.heartbeat.interval.ms": ("heartbeat_interval_ms", int),
            "group.consumer.min.heartbeat.interval.ms": ("min_heartbeat_interval_ms", int),
            "group.consumer.max.heartbeat.interval.ms": ("max_heartbeat_interval_ms", int),
            "group.consumer.reconciling.heartbeat.interval.ms": ("reconciling_heartbeat_interval_ms", int),
            "group.consumer.max.size": ("max_size", int),
            "group.consumer.assignors": ("assignors", _assignors),
            "offsets.retention.minutes": ("offsets_retention_ms", lambda v: int(v) * 60_000),
            "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", int),
            "group.min.session.timeout.ms": ("classic_min_session_timeout_ms", int),
            "group.max.session.timeout.ms": ("classic_max_session_timeout_ms", int),
            "group.max.size": ("classic_max_size", int),
            "group.classic.max.size": ("classic_max_size", int),
            "group.initial.rebalance.delay.ms": ("initial_rebalance_delay_ms", int),
            "group.consumer.regex.refresh.interval.ms": ("regex_refresh_interval_ms", int),
            "group.consumer.migration.policy": ("migration_policy", lambda v: str(v).strip().lower()),
        }
        kwargs = {}
        for key, value in props.items():
            if key in keys:
                attr, parse = keys[key]
                kwargs[attr] = parse(value)
        cfg = cls(**kwargs)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.offsets_topic_partitions < 1:
            raise ValueError("offsets.topic.num.partitions must be at least 1")
        if not self.min_session_timeout_ms <= self.session_timeout_ms <= self.max_session_timeout_ms:
            raise ValueError("group.consumer.session.timeout.ms must lie within its min/max bounds")
        if not self.min_heartbeat_interval_ms <= self.heartbeat_interval_ms <= self.max_heartbeat_interval_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must lie within its min/max bounds")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be below the session timeout")
        if self.reconciling_heartbeat_interval_ms < 0:
            raise ValueError("group.consumer.reconciling.heartbeat.interval.ms must be 0 (off) or more")
        if self.migration_policy not in MIGRATION_POLICIES:
            raise ValueError(f"group.consumer.migration.policy must be one of {', '.join(MIGRATION_POLICIES)}")
        if self.classic_min_session_timeout_ms > self.classic_max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        if self.initial_rebalance_delay_ms < 0:
            raise ValueError("group.initial.rebalance.delay.ms must be at least 0")
        for key, value in (
            ("group.max.size", self.classic_max_size),
            ("group.min.session.timeout.ms", self.classic_min_session_timeout_ms),
            ("group.consumer.max.size", self.max_size),
            ("offsets.retention.minutes", self.offsets_retention_ms),
            ("offsets.retention.check.interval.ms", self.offsets_retention_check_interval_ms),
            ("offsets.topic.segment.bytes", self.offsets_topic_segment_bytes),
            ("group.consumer.heartbeat.interval.ms", self.heartbeat_interval_ms),
            ("group.consumer.min.heartbeat.interval.ms", self.min_heartbeat_interval_ms),
            ("group.consumer.session.timeout.ms", self.session_timeout_ms),
        ):
            if value < 1:  # Kafka's atLeast(1) on each of these
                raise ValueError(f"{key} must be at least 1")

    def properties(self) -> dict[str, str]:
        """The broker-level keys as DescribeConfigs reports them."""
        return {
            "offsets.topic.num.partitions": str(self.offsets_topic_partitions),
            "offsets.topic.segment.bytes": str(self.offsets_topic_segment_bytes),
            "group.consumer.session.timeout.ms": str(self.session_timeout_ms),
            "group.consumer.min.session.timeout.ms": str(self.min_session_timeout_ms),
            "group.consumer.max.session.timeout.ms": str(self.max_session_timeout_ms),
            "group.consumer.heartbeat.interval.ms": str(self.heartbeat_interval_ms),
            "group.consumer.min.heartbeat.interval.ms": str(self.min_heartbeat_interval_ms),
            "group.consumer.max.heartbeat.interval.ms": str(self.max_heartbeat_interval_ms),
            "group.consumer.reconciling.heartbeat.interval.ms": str(self.reconciling_heartbeat_interval_ms),
            "group.consumer.max.size": str(self.max_size),
            "group.consumer.assignors": ",".join(self.assignors),
            "group.consumer.regex.refresh.interval.ms": str(self.regex_refresh_interval_ms),
            "offsets.retention.minutes": str(self.offsets_retention_ms // 60_000),
            "offsets.retention.check.interval.ms": str(self.offsets_retention_check_interval_ms),
            "group.min.session.timeout.ms": str(self.classic_min_session_timeout_ms),
            "group.max.session.timeout.ms": str(self.classic_max_session_timeout_ms),
            "group.max.size": str(self.classic_max_size),
            "group.initial.rebalance.delay.ms": str(self.initial_rebalance_delay_ms),
            "group.consumer.migration.policy": self.migration_policy,
        }

    def allows_upgrade(self) -> bool:
        return self.migration_policy in ("bidirectional", "upgrade")

    def allows_downgrade(self) -> bool:
        return self.migration_policy in ("bidirectional", "downgrade")

    # --- per-group values -----------------------------------------------------------------

    def group_defaults(self) -> dict[str, int]:
        return {
            "consumer.session.timeout.ms": self.session_timeout_ms,
            "consumer.heartbeat.interval.ms": self.heartbeat_interval_ms,
        }

    def validate_group_config(self, values: Mapping[str, str]) -> dict[str, int]:
        """Check a group's overrides (Kafka's GroupConfig bounds); raise GroupConfigError."""
        out = {}
        for key, raw in values.items():
            if key not in GROUP_CONFIG_KEYS:
                raise GroupConfigError(f"unknown group config {key!r}")
            text = str(raw).strip()
            # Java's Integer.parseInt: optional sign and digits only (Python's int() also takes "45_000").
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                raise GroupConfigError(f"{key} must be an integer, not {raw!r}")
            v = int(text)
            lo, hi = (
                (self.min_session_timeout_ms, self.max_session_timeout_ms)
                if key == "consumer.session.timeout.ms"
                else (self.min_heartbeat_interval_ms, self.max_heartbeat_interval_ms)
            )
            if not lo <= v <= hi:
                raise GroupConfigError(f"{key} must be between {lo} and {hi}, not {v}")
            out[key] = v
        merged = {**self.group_defaults(), **out}
        if merged["consumer.heartbeat.interval.ms"] >= merged["consumer.session.timeout.ms"]:
            raise GroupConfigError("consumer.heartbeat.interval.ms must be below consumer.session.timeout.ms")
        return out
