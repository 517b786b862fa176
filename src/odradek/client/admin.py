"""The asyncio admin client: topics, partitions, cluster, groups and group offsets.

Theory of operation: each method is one or two requests through the shared `Client`
(topic requests to any broker; group requests to the group's coordinator), with
Kafka's per-item error codes turned into `KafkaError`s. Group descriptions cover both
group types: ConsumerGroupDescribe for KIP-848 groups (epochs, assignor, each
member's current and target assignment), DescribeGroups for classic ones, whose
member assignments are decoded from the embedded consumer protocol. Resetting offsets
computes the target offsets (earliest, latest, an offset, a timestamp, a shift) and
commits them as a simple group, which the coordinator only accepts for an empty group,
as kafka-consumer-groups.sh requires. Configs (DescribeConfigs, IncrementalAlterConfigs)
go to the broker a BROKER resource names, anything else to any broker, as Kafka's admin
client routes them.

A `KafkaError` raised for a per-item error code carries the broker's own message, if
it sent one, as `server_message`: Kafka's tools print exactly that text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Self

from kio.schema.errors import ErrorCode

from odradek.coordinator.consumer_protocol import decode_assignment, decode_subscription

from . import offsets as O
from .cluster import BrokerInfo, TopicInfo, TopicPartition
from .errors import KafkaError, UnsupportedApiError
from .net import Client
from .versions import Api, api_name


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)
    # partition -> broker ids (first = preferred leader); excludes the two counts above
    assignments: dict[int, list[int]] | None = None


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    type: str  # "consumer" (KIP-848) or "classic"


@dataclass
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: set[TopicPartition]
    target: set[TopicPartition] | None = None  # consumer groups only
    epoch: int | None = None
    subscription: list[str] = field(default_factory=list)
    regex: str | None = None
    member_type: str = "consumer"  # KIP-848 member type: consumer, or classic inside a consumer group


@dataclass
class GroupDescription:
    group_id: str
    type: str
    state: str
    protocol_type: str
    protocol: str  # classic: the selected assignor; consumer: the server assignor
    epoch: int | None
    assignment_epoch: int | None
    members: list[MemberDescription]


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type codes."""
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigOp(IntEnum):
    """IncrementalAlterConfigs operations (AlterConfigOp.OpType)."""
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# DescribeConfigsResponse's source ids, named as the Java admin client's ConfigEntry.ConfigSource.
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG",
}


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: str


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None  # None for a sensitive config
    source: str  # a CONFIG_SOURCES name, e.g. DYNAMIC_TOPIC_CONFIG
    is_sensitive: bool = False
    read_only: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"


# APIs only the admin client uses. They are negotiated on a connection when first used
# (one ApiVersions round trip), so producer and consumer connections never pay for them.
DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_USER_SCRAM, ALTER_USER_SCRAM = 50, 51
ADMIN_VERSIONS = {DESCRIBE_CONFIGS: (1, 4), INCREMENTAL_ALTER_CONFIGS: (0, 1), DESCRIBE_ACLS: (1, 3),
                  CREATE_ACLS: (1, 3), DELETE_ACLS: (1, 3), DESCRIBE_USER_SCRAM: (0, 0), ALTER_USER_SCRAM: (0, 0)}


def _error(code, context: str, message: str | None) -> KafkaError:
    exc = KafkaError(code, f"{context}: {message}" if message else context)
    exc.server_message = message  # what Kafka's tools print
    return exc


def _check_all(pairs, what: str) -> None:
    for name, code, message in pairs:
        if code != ErrorCode.none:
            raise _error(code, f"{what} {name}", message)


class AsyncAdmin:
    def __init__(self, bootstrap_servers: str | list[str], *, client_id: str = "odradek-admin",
                 request_timeout_ms: int = 30000, client: Client | None = None,
                 security: dict | None = None) -> None:
        self.client = client or Client(bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
                                       security=security)
        self._own_client = client is None
        self.timeout_ms = request_timeout_ms

    async def start(self) -> AsyncAdmin:
        await self.client.refresh_metadata()
        return self

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_client:
            await self.client.close()

    async def _controller(self) -> int:
        """CreateTopics and friends go to the controller (any broker here, as KRaft forwards)."""
        if self.client.cluster.controller_id in self.client.cluster.brokers:
            return self.client.cluster.controller_id
        await self.client.refresh_metadata()
        return self.client.cluster.controller_id if self.client.cluster.controller_id in self.client.cluster.brokers \
            else next(iter(self.client.cluster.brokers))

    # ------------------------------------------------------------------ topics

    async def create_topics(self, topics: list[NewTopic], *, validate_only: bool = False) -> None:
        body = {"topics": [{"name": t.name, "num_partitions": t.num_partitions,
                            "replication_factor": t.replication_factor,
                            "assignments": [{"partition_index": p, "broker_ids": list(ids)}
                                            for p, ids in sorted((t.assignments or {}).items())],
                            "configs": [{"name": k, "value": v} for k, v in t.configs.items()]} for t in topics],
                "timeout": self.timeout_ms, "validate_only": validate_only}
        resp = await self.client.send(await self._controller(), Api.CREATE_TOPICS, body)
        _check_all(((t.name, t.error_code, t.error_message) for t in resp.topics), "CreateTopics")
        await self.client.refresh_metadata([t.name for t in topics])

    async def delete_topics(self, names: list[str]) -> None:
        body = {"topic_names": list(names), "topics": [{"name": n, "topic_id": None} for n in names],
                "timeout": self.timeout_ms}
        resp = await self.client.send(await self._controller(), Api.DELETE_TOPICS, body)
        _check_all(((r.name, r.error_code, getattr(r, "error_message", None)) for r in resp.responses), "DeleteTopics")
        for n in names:
            self.client._known_topics.discard(n)
        await self.client.refresh_metadata(all_topics=True)

    async def create_partitions(self, counts: dict[str, int], *, validate_only: bool = False,
                                assignments: dict[str, list[list[int]]] | None = None) -> None:
        """Grow topics to the given total partition counts; `assignments` optionally
        gives, per topic, the broker ids of each new partition in order."""
        assignments = assignments or {}
        body = {"topics": [{"name": t, "count": n,
                            "assignments": [{"broker_ids": list(ids)} for ids in assignments[t]]
                            if t in assignments else None} for t, n in counts.items()],
                "timeout": self.timeout_ms, "validate_only": validate_only}
        resp = await self.client.send(await self._controller(), Api.CREATE_PARTITIONS, body)
        _check_all(((r.name, r.error_code, r.error_message) for r in resp.results), "CreatePartitions")
        await self.client.refresh_metadata(list(counts))

    async def auto_create_topics(self, names: list[str]) -> None:
        """A Metadata request that lets the broker create the topics it does not know
        (auto.create.topics.enable), as a Java producer's or consumer's first metadata
        request does; with auto-creation off they simply stay unknown."""
        missing = [n for n in names if n not in self.client.cluster.topics]
        if not missing:
            return
        body = {"topics": [{"name": n, "topic_id": None} for n in missing], "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False, "include_cluster_authorized_operations": False}
        await self.client.send_any(Api.METADATA, body)
        await self.client.refresh_metadata(missing)

    async def list_topics(self, *, internal: bool = False) -> list[str]:
        await self.client.refresh_metadata(all_topics=True)
        return sorted(t for t, info in self.client.cluster.topics.items() if internal or not info.internal)

    async def describe_topics(self, names: list[str] | None = None) -> dict[str, TopicInfo]:
        if names is None:
            await self.client.refresh_metadata(all_topics=True)
            return dict(sorted(self.client.cluster.topics.items()))
        await self.client.refresh_metadata(list(names))
        out = {}
        for n in names:
            info = self.client.cluster.topics.get(n)
            if info is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, n)
            if info.error:
                raise KafkaError(info.error, n)
            out[n] = info
        return out

    async def describe_cluster(self) -> tuple[str | None, int, list[BrokerInfo]]:
        """(cluster id, controller id, brokers)."""
        resp = await self.client.send_any(Api.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False,
                                                                 "endpoint_type": 1})
        if resp.error_code != ErrorCode.none:
            raise KafkaError(resp.error_code, resp.error_message)
        brokers = [BrokerInfo(int(b.broker_id), b.host, int(b.port), b.rack) for b in resp.brokers]
        return resp.cluster_id, int(resp.controller_id), sorted(brokers, key=lambda b: b.node_id)

    # ------------------------------------------------------------------ ACLs and SCRAM users

    async def create_acls(self, bindings) -> None:
        """CreateAcls (security/acl.AclBinding values); a refused one raises its KafkaError."""
        from .security_admin import create_acls

        await create_acls(self, bindings)

    async def describe_acls(self, flt=None) -> list:
        from .security_admin import describe_acls

        return await describe_acls(self, flt)

    async def delete_acls(self, filters) -> list[list]:
        from .security_admin import delete_acls

        return await delete_acls(self, filters)

    async def describe_user_scram_credentials(self, users: list[str] | None = None) -> dict[str, list]:
        from .security_admin import describe_user_scram_credentials

        return await describe_user_scram_credentials(self, users)

    async def alter_user_scram_credentials(self, upsertions=(), deletions=()) -> None:
        from .security_admin import alter_user_scram_credentials

        await alter_user_scram_credentials(self, upsertions, deletions)

    # ------------------------------------------------------------------ configs

    async def _admin_node(self, resource_type: int, name: str):
        """Kafka's admin routes a named BROKER or BROKER_LOGGER resource to that broker."""
        if resource_type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and name:
            try:
                node = int(name)
            except ValueError:
                raise KafkaError(ErrorCode.invalid_request, f"broker id must be an integer, not {name!r}") from None
            if node not in self.client.cluster.brokers:
                await self.client.refresh_metadata()
            if node not in self.client.cluster.brokers:
                raise KafkaError(ErrorCode.broker_not_available, f"broker {node} is not in the cluster")
            return node
        node, _ = await self.client.any_connection()
        return node

    async def _admin_request(self, node, api: int, body: dict):
        conn = await self.client.connection(node)
        if api not in conn.versions:
            resp = await conn.request(Api.API_VERSIONS, {"client_software_name": "odradek",
                                                         "client_software_version": "0.1.0"})
            served = {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}
            for key, (lo, hi) in ADMIN_VERSIONS.items():
                span = served.get(key)
                conn.versions[key] = (min(hi, span[1]) if span and span[0] <= hi and span[1] >= lo else
                                      UnsupportedApiError(api_name(key), key, "not served in a version the client speaks"))
        return await conn.request(api, body)

    async def describe_configs(self, resources: list[tuple[int, str]], *, include_synonyms: bool = False,
                               keys: list[str] | None = None) -> dict[tuple[int, str], list[ConfigEntry]]:
        """(resource type, name) -> its config entries, in the broker's order. An empty
        BROKER name means the cluster-wide defaults."""
        by_node: dict = {}
        for rtype, name in resources:
            by_node.setdefault(await self._admin_node(rtype, name), []).append((int(rtype), name))
        out: dict[tuple[int, str], list[ConfigEntry]] = {}
        for node, items in by_node.items():
            body = {"resources": [{"resource_type": t, "resource_name": n, "configuration_keys": keys}
                                  for t, n in items],
                    "include_synonyms": include_synonyms, "include_documentation": False}
            resp = await self._admin_request(node, DESCRIBE_CONFIGS, body)
            for r in resp.results:
                if r.error_code != ErrorCode.none:
                    raise _error(r.error_code, f"DescribeConfigs {ConfigResourceType(r.resource_type).name} "
                                 f"{r.resource_name!r}", r.error_message)
                out[(int(r.resource_type), r.resource_name)] = [
                    ConfigEntry(c.name, c.value, CONFIG_SOURCES.get(int(getattr(c, "config_source", 0)), "UNKNOWN"),
                                bool(c.is_sensitive), bool(c.read_only),
                                tuple(ConfigSynonym(y.name, y.value, CONFIG_SOURCES.get(int(y.source), "UNKNOWN"))
                                      for y in (getattr(c, "synonyms", None) or ())))
                    for c in r.configs]
        return out

    async def incremental_alter_configs(self, changes: dict[tuple[int, str], list[tuple[str, int, str | None]]],
                                        *, validate_only: bool = False) -> None:
        """(resource type, name) -> [(config name, ConfigOp, value)]."""
        by_node: dict = {}
        for (rtype, name), ops in changes.items():
            by_node.setdefault(await self._admin_node(rtype, name), []).append((int(rtype), name, ops))
        for node, items in by_node.items():
            body = {"resources": [{"resource_type": t, "resource_name": n,
                                   "configs": [{"name": k, "config_operation": int(op), "value": v} for k, op, v in ops]}
                                  for t, n, ops in items],
                    "validate_only": validate_only}
            resp = await self._admin_request(node, INCREMENTAL_ALTER_CONFIGS, body)
            for r in resp.responses:
                if r.error_code != ErrorCode.none:
                    raise _error(r.error_code, f"IncrementalAlterConfigs {ConfigResourceType(r.resource_type).name} "
                                 f"{r.resource_name!r}", r.error_message)

    # ------------------------------------------------------------------ groups

    async def list_groups(self, *, types: list[str] | None = None, states: list[str] | None = None
                          ) -> list[GroupListing]:
        body = {"states_filter": list(states or []), "types_filter": list(types or [])}
        out: dict[str, GroupListing] = {}
        for node in list(self.client.cluster.brokers):
            resp = await self.client.send(node, Api.LIST_GROUPS, body)
            if resp.error_code != ErrorCode.none:
                raise KafkaError(resp.error_code, "ListGroups")
            for g in resp.groups:
                gtype = (getattr(g, "group_type", "") or "classic").lower()
                out[g.group_id] = GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", "") or "",
                                               gtype)
        return sorted(out.values(), key=lambda g: g.group_id)

    async def describe_groups(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        out: dict[str, GroupDescription] = {}
        classic: list[str] = []
        for gid in group_ids:
            node = await self.client.coordinator(gid)
            try:
                resp = await self.client.send(node, Api.CONSUMER_GROUP_DESCRIBE,
                                              {"group_ids": [gid], "include_authorized_operations": False})
            except KafkaError as exc:
                if exc.code != ErrorCode.unsupported_version:
                    raise
                classic.append(gid)
                continue
            g = resp.groups[0]
            if g.error_code == ErrorCode.group_id_not_found:
                classic.append(gid)  # not a consumer group: a classic one, or none at all
                continue
            if g.error_code != ErrorCode.none:
                raise KafkaError(g.error_code, g.error_message or gid)
            out[gid] = self._consumer_description(g)
        for gid in classic:
            node = await self.client.coordinator(gid)
            resp = await self.client.send(node, Api.DESCRIBE_GROUPS, {"groups": [gid],
                                                                      "include_authorized_operations": False})
            g = resp.groups[0]
            if g.error_code != ErrorCode.none:
                raise KafkaError(g.error_code, gid)
            members = []
            for m in g.members:
                try:
                    assignment = decode_assignment(m.member_assignment) if m.member_assignment else {}
                except Exception:  # noqa: BLE001 - a non-consumer embedded protocol: show no assignment
                    assignment = {}
                try:
                    topics = list(decode_subscription(m.member_metadata).topics) if m.member_metadata else []
                except Exception:  # noqa: BLE001
                    topics = []
                members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                                 {TopicPartition(t, p) for t, ps in assignment.items() for p in ps},
                                                 subscription=topics, member_type="classic"))
            out[gid] = GroupDescription(gid, "classic", g.group_state, g.protocol_type, g.protocol_data,
                                        None, None, members)
        return out

    @staticmethod
    def _consumer_description(g) -> GroupDescription:
        def tps(a) -> set[TopicPartition]:
            return {TopicPartition(t.topic_name, int(p)) for t in a.topic_partitions for p in t.partitions}
        members = [MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host, tps(m.assignment),
                                     tps(m.target_assignment), int(m.member_epoch), list(m.subscribed_topic_names),
                                     m.subscribed_topic_regex,
                                     "classic" if getattr(m, "member_type", -1) == 0 else "consumer")
                   for m in g.members]
        return GroupDescription(g.group_id, "consumer", g.group_state, "consumer", g.assignor_name,
                                int(g.group_epoch), int(g.assignment_epoch), members)

    async def delete_groups(self, group_ids: list[str]) -> None:
        for gid in group_ids:
            node = await self.client.coordinator(gid)
            resp = await self.client.send(node, Api.DELETE_GROUPS, {"groups_names": [gid]})
            _check_all(((r.group_id, r.error_code, None) for r in resp.results), "DeleteGroups")

    async def remove_members(self, group_id: str, instance_ids: list[str], reason: str | None = None) -> None:
        """Remove static members by group.instance.id (KIP-345 admin removal, LeaveGroup v3+)."""
        node = await self.client.coordinator(group_id)
        conn = await self.client.connection(node)
        if conn.version(Api.LEAVE_GROUP) < 3:
            raise KafkaError(ErrorCode.unsupported_version, "removing static members needs LeaveGroup v3+",
                             retriable=False)
        body = {"group_id": group_id, "member_id": "",
                "members": [{"member_id": "", "group_instance_id": i, "reason": reason} for i in instance_ids]}
        resp = await self.client.send(node, Api.LEAVE_GROUP, body)
        if resp.error_code != ErrorCode.none:
            raise KafkaError(resp.error_code, f"LeaveGroup {group_id}")
        _check_all(((m.group_instance_id, m.error_code, None) for m in resp.members), f"LeaveGroup {group_id}")

    # ------------------------------------------------------------------ group offsets

    async def list_group_offsets(self, group_id: str, tps: list[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, O.OffsetAndMetadata]:
        return await O.fetch_committed(self.client, group_id, tps)

    async def alter_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        await O.commit(self.client, group_id, {TopicPartition(*tp): o for tp, o in offsets.items()}, retries=3)

    async def delete_group_offsets(self, group_id: str, tps: list[TopicPartition]) -> None:
        top, results = await self.delete_group_offsets_results(group_id, tps)
        if top != ErrorCode.none:
            raise KafkaError(top, f"OffsetDelete {group_id}")
        _check_all(((str(tp), code, None) for tp, code in results.items()), f"OffsetDelete {group_id}")

    async def delete_group_offsets_results(self, group_id: str, tps: list[TopicPartition]
                                           ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete's outcome without raising: (the request's error code, each
        partition's), for tools that report per partition."""
        node = await self.client.coordinator(group_id)
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = {"group_id": group_id, "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]}
                                                 for t, ps in by_topic.items()]}
        resp = await self.client.send(node, Api.OFFSET_DELETE, body)
        results = {TopicPartition(t.name, int(p.partition_index)): ErrorCode(int(p.error_code))
                   for t in resp.topics for p in t.partitions}
        return ErrorCode(int(resp.error_code)), results

    async def find_coordinator(self, group_id: str) -> BrokerInfo:
        """The broker coordinating `group_id`."""
        _, node_id = await self.client.coordinator(group_id)
        return self.client.cluster.brokers[node_id]

    async def plan_offset_reset(self, group_id: str, tps: list[TopicPartition], *, to: str,
                                value: int | dict[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Target offsets for kafka-consumer-groups.sh's --to-earliest/--to-latest/--to-offset/
        --to-datetime (value = ms)/--shift-by (value = delta), clamped to the log's range.
        For "offset", value may also map each partition to its own offset (--from-file)."""
        earliest = {tp: ot.offset for tp, ot in (await O.list_offsets(self.client, {tp: O.EARLIEST for tp in tps})).items()}
        latest = {tp: ot.offset for tp, ot in (await O.list_offsets(self.client, {tp: O.LATEST for tp in tps})).items()}
        if to == "earliest":
            target = earliest
        elif to == "latest":
            target = latest
        elif to == "offset":
            target = {tp: (value[tp] if isinstance(value, dict) else value) for tp in tps}
        elif to == "datetime":
            found = await O.list_offsets(self.client, {tp: int(value) for tp in tps})
            target = {tp: (found[tp].offset if found[tp].offset >= 0 else latest[tp]) for tp in tps}
        elif to == "shift":
            committed = await O.fetch_committed(self.client, group_id, tps)
            target = {tp: (committed[tp].offset if tp in committed else latest[tp]) + value for tp in tps}
        else:
            raise ValueError(f"unknown reset target {to!r}")
        return {tp: max(earliest[tp], min(latest[tp], off)) for tp, off in target.items()}

    async def list_offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, O.OffsetAndTimestamp]:
        """tp -> timestamp in ms, or offsets.EARLIEST (-2) / LATEST (-1) / MAX_TIMESTAMP (-3)."""
        return await O.list_offsets(self.client, {TopicPartition(*tp): ts for tp, ts in specs.items()})

    async def partitions_of(self, topics: list[str]) -> list[TopicPartition]:
        await self.client.refresh_metadata(list(topics))
        out = []
        for t in topics:
            parts = self.client.cluster.partitions(t)
            if not parts:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, t)
            out.extend(parts)
        return out

    async def group_lag(self, group_id: str) -> dict[TopicPartition, tuple[int | None, int]]:
        """tp -> (committed offset or None, log end offset) for every partition the group
        has offsets for or is assigned."""
        committed = await O.fetch_committed(self.client, group_id)
        tps = set(committed)
        desc = (await self.describe_groups([group_id])).get(group_id)
        if desc is not None:
            for m in desc.members:
                tps |= m.assignment
        if not tps:
            return {}
        ends = await O.list_offsets(self.client, {tp: O.LATEST for tp in tps})
        return {tp: (committed[tp].offset if tp in committed else None, ends[tp].offset)
                for tp in sorted(tps)}

