"""The etcd metadata layout: etcd's keys and values, decoded into a mirror and encoded back.

Theory of operation. `EtcdMirror` is a broker's in-memory copy of everything under the
backend's `<prefix>/`. `load` (everything) and `apply`/`apply_events` (one key, or a watch
response) take what etcd delivered and update the topics registry, the brokers, the
controller, the partition states and the config dicts; `image()` builds the ClusterImage
they amount to. The other direction lives here too: key names, JSON values, and the
transaction items (compares and operations) that create, grow, reconfigure and delete
topics and write partition states and configs, comparing with the revisions the mirror
holds. The backend writes its own single keys (registration, controller, cluster id,
producer id blocks) with the same helpers.

It is separate from EtcdBackend (etcd_store.py) because it is pure: no I/O, no asyncio,
no clock. The backend decides when to talk to etcd (client, lease, watch, campaign,
controller loop, writes) and feeds what etcd answered in here; the mirror only says what
those keys and values mean. So it can be tested without etcd, by feeding it objects with
etcd's KeyValue fields (key, value, create_revision, mod_revision, lease).

Key layout (JSON values), the ZooKeeper layout of Kafka 2.x/3.x moved onto etcd
(/work/shared/CLUSTER.md, "Coordination in the ZooKeeper era"):

    cluster_id                  {"id"}: created once, by whoever comes first
    brokers/<id>                {host, port, rack} on the broker's lease (ZK: ephemeral
                                /brokers/ids/<id>); broker epoch = the key's create_revision
    controller                  {node_id} on the controller's lease (ZK: /controller);
                                controller epoch = its create_revision (ZK: /controller_epoch)
    topics/<name>               {id, partitions: [[replica ids] per partition], configs}
    partitions/<name>/<index>   {leader, leader_epoch, isr}; partition epoch = mod_revision
                                (ZK: .../partitions/<p>/state and its version)
    group_configs/<group>       {key: value}  (names encoded by `_encode_name`)
    broker_configs/<resource>   {key: value}; "" (the cluster default) is "-default"
    user_scram/<user>           {mechanism: "salt=..,stored_key=..,server_key=..,iterations=N"}
    acls/<pattern>              {entry: "1"}: one resource pattern's ACLs (security/acl.py)
    producer_ids                {block_end}: blocks of 1000 handed out by compare-and-set

A partition is in the image only while both its topic key and its state key exist: a
creator writes them in separate transactions when they do not fit in one, and a topic
deletion removes them together, but the watch may show either first.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Collection, Iterable
from typing import Any
from urllib.parse import quote, unquote

from aetcd import rpc
from aetcd.utils import prefix_range_end

from .backend import Fenced
from .controller import initial_state
from .image import BrokerInfo, ClusterImage, PartitionState, TopicPartition
from .metadata import Topic, TopicRegistry

log = logging.getLogger(__name__)

DEFAULT_RESOURCE = "-default"  # the encoded "" (cluster-wide default) resource name
_PUT = rpc.Event.EventType.Value("PUT")

Item = tuple[list[Any], list[Any]]  # (compares, operations) that must commit together


def _encode_name(name: str) -> str:
    """A group or broker resource name as one key segment: "" is "-default", others are
    percent-encoded with a leading '-' escaped, so no name maps onto "-default"."""
    if name == "":
        return DEFAULT_RESOURCE
    enc = quote(name, safe="")
    return "%2D" + enc[1:] if enc.startswith("-") else enc


def _decode_name(seg: str) -> str:
    return "" if seg == DEFAULT_RESOURCE else unquote(seg)


# --- transactions, as data -------------------------------------------------------------------


def _cmp_create(key: bytes, rev: int) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=rev)


def _cmp_mod(key: bytes, rev: int) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=rpc.Compare.EQUAL, mod_revision=rev)


def _put(key: bytes, doc: Any, lease: int = 0) -> Any:
    value = json.dumps(doc, separators=(",", ":")).encode()
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def _delete(key: bytes, range_end: bytes = b"") -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=range_end))


def _get(key: bytes) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key))


class _TxnResult:
    __slots__ = ("succeeded", "revision", "changed", "kvs")

    def __init__(self, resp: Any) -> None:
        self.succeeded: bool = resp.succeeded
        self.revision: int = resp.header.revision
        self.changed = False
        self.kvs: dict[bytes, Any] = {}  # what the failure branch's gets found
        for r in resp.responses:
            kind = r.WhichOneof("response")
            if kind == "response_put" or (kind == "response_delete_range" and r.response_delete_range.deleted):
                self.changed = True
            elif kind == "response_range":
                self.kvs.update((kv.key, kv) for kv in r.response_range.kvs)


def _state_doc(state: PartitionState) -> dict[str, Any]:
    return {"leader": state.leader, "leader_epoch": state.leader_epoch, "isr": list(state.isr)}


def _topic_doc(topic_id: uuid.UUID, assignment: list[tuple[int, ...]], configs: dict[str, str]) -> dict:
    return {"id": str(topic_id), "partitions": [list(r) for r in assignment], "configs": dict(configs)}


def _assignment(name: str, count: int, assignments: dict | None) -> list[tuple[int, ...]]:
    """The replicas the caller placed for topic `name`'s `count` (new) partitions."""
    if not assignments or name not in assignments:
        raise ValueError(f"topic {name!r}: the etcd backend needs its replica assignment")
    replicas = [tuple(int(b) for b in r) for r in assignments[name]]
    if len(replicas) != count or not all(replicas) or any(len(set(r)) != len(r) for r in replicas):
        raise ValueError(f"topic {name!r}: bad replica assignment {assignments[name]!r} for {count} partition(s)")
    return replicas


def _batches(items: list[Item], room: int, max_ops: int) -> list[list[Item]]:
    """`items` in order, split so that no batch has more than `room` compares or `max_ops`
    operations (etcd's --max-txn-ops), unless a single item does."""
    out: list[list[Item]] = [[]]
    used_c = used_o = 0
    for item in items:
        if out[-1] and (used_c + len(item[0]) > room or used_o + len(item[1]) > max_ops):
            out.append([])
            used_c = used_o = 0
        out[-1].append(item)
        used_c += len(item[0])
        used_o += len(item[1])
    return out


# --- the mirror -------------------------------------------------------------------------------


class EtcdMirror(TopicRegistry):
    """Everything under `prefix` (b"<prefix>/"), as far as it was applied (see the module
    docstring). The dicts are changed in place only: the broker holds them."""

    def __init__(self, prefix: bytes) -> None:
        super().__init__()
        self.prefix = prefix
        self.cluster_id = ""
        self.group_configs: dict[str, dict[str, str]] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.user_scram: dict[str, dict[str, str]] = {}
        self.acls: dict[str, dict[str, str]] = {}
        self.acl_version = 0
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller = (-1, 0, 0)  # node id, epoch (create_revision), lease
        self.assign: dict[str, list[tuple[int, ...]]] = {}
        self.topic_revs: dict[str, tuple[int, int]] = {}  # name -> (create, mod) revision
        # Partition state keys, with or without their topic: (leader, epoch, isr, mod_revision).
        self.raw_states: dict[TopicPartition, tuple[int, int, tuple[int, ...], int]] = {}
        self.parts: dict[TopicPartition, PartitionState] = {}
        self.producer_block_end = 0
        self.dirty = False  # the image changed since image() last built it
        # Topics whose partitions may have changed since image() last built it (None: any,
        # after a full load): images carry it so brokers compare only those (Kafka's deltas).
        self.changed: set[str] | None = None

    # --- keys -------------------------------------------------------------------------------

    def key(self, *parts: str) -> bytes:
        return self.prefix + "/".join(parts).encode()

    def topic_key(self, name: str) -> bytes:
        return self.key("topics", name)

    def part_key(self, tp: TopicPartition) -> bytes:
        return self.key("partitions", tp[0], str(tp[1]))

    def config_key(self, kind: str, resource: str) -> bytes:
        """`kind` is "group_configs", "broker_configs", "user_scram" or "acls"."""
        return self.key(kind, _encode_name(resource))

    def _mirrored_keys(self) -> list[bytes]:
        keys = [self.key("brokers", str(b)) for b in self.brokers]
        keys += [self.topic_key(n) for n in self.topics] + [self.part_key(tp) for tp in self.raw_states]
        keys += [self.config_key("group_configs", g) for g in self.group_configs]
        keys += [self.config_key("broker_configs", r) for r in self.broker_configs]
        keys += [self.config_key("user_scram", u) for u in self.user_scram]
        keys += [self.config_key("acls", r) for r in self.acls]
        if self.controller[0] != -1:
            keys.append(self.key("controller"))
        if self.producer_block_end:
            keys.append(self.key("producer_ids"))
        return keys

    # --- decoding: etcd -> the mirror ---------------------------------------------------------

    def load(self, kvs: Iterable[Any]) -> bool:
        """Make the mirror exactly `kvs`, everything under the prefix (keys it holds that
        are not there are deleted), and mark the image changed. True if the controller
        key was among them (see `apply`)."""
        kvs = list(kvs)
        present = {kv.key for kv in kvs}
        controller = False
        for key in self._mirrored_keys():
            if key not in present:
                controller |= self.apply(False, key, None)
        for kv in kvs:
            controller |= self.apply(True, kv.key, kv)
        self.dirty = True
        self.changed = None
        return controller

    def apply_events(self, events: Iterable[Any]) -> bool:
        """A watch response's events, in order. True if the controller key was among them."""
        controller = False
        for ev in events:
            controller |= self.apply(ev.type == _PUT, ev.kv.key, ev.kv)
        return controller

    def apply(self, put: bool, key: bytes, kv: Any) -> bool:
        """One key's new value (or its deletion) into the mirror; `kv` is etcd's KeyValue
        (value, create_revision, mod_revision, lease). Returns True when it was the
        controller key (the backend's campaign then looks again)."""
        rel = key[len(self.prefix):].decode()
        kind, _, rest = rel.partition("/")
        try:
            doc = json.loads(kv.value) if put else None
            if kind == "brokers":
                self._apply_broker(int(rest), doc, kv)
            elif kind == "controller":
                self.controller = (int(doc["node_id"]), kv.create_revision, kv.lease) if put else (-1, 0, 0)
                self.dirty = True
                return True
            elif kind == "topics":
                self._apply_topic(rest, doc, kv)
            elif kind == "partitions":
                name, _, index = rest.rpartition("/")
                tp = (name, int(index))
                if put:
                    self.raw_states[tp] = (int(doc["leader"]), int(doc["leader_epoch"]),
                                           tuple(int(b) for b in doc["isr"]), kv.mod_revision)
                else:
                    self.raw_states.pop(tp, None)
                self._set_part(tp)
            elif kind in ("group_configs", "broker_configs", "user_scram", "acls"):
                target = {"group_configs": self.group_configs, "broker_configs": self.broker_configs,
                          "user_scram": self.user_scram, "acls": self.acls}[kind]
                if kind == "acls":
                    self.acl_version += 1
                if put:
                    target[_decode_name(rest)] = {str(k): str(v) for k, v in doc.items()}
                else:
                    target.pop(_decode_name(rest), None)
            elif kind == "cluster_id" and put:
                self.cluster_id = str(doc["id"])
                self.dirty = True
            elif kind == "producer_ids":
                self.producer_block_end = int(doc["block_end"]) if put else 0
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            log.warning("etcd: ignoring malformed %s: %s", key.decode(errors="replace"), exc)
        return False

    def _apply_broker(self, node_id: int, doc: Any, kv: Any) -> None:
        if doc is None:
            self.brokers.pop(node_id, None)
        else:
            rack = doc.get("rack")
            endpoints = tuple((str(n), str(h), int(p)) for n, h, p in doc.get("endpoints", ()))
            self.brokers[node_id] = BrokerInfo(node_id, str(doc["host"]), int(doc["port"]),
                                               None if rack is None else str(rack), kv.create_revision, endpoints)
        self.dirty = True

    def _apply_topic(self, name: str, doc: Any, kv: Any) -> None:
        old_count = len(self.assign.get(name, ()))
        topic = self.topics.get(name)
        if doc is None:
            if topic is not None:
                self._remove(name)
            self.assign.pop(name, None)
            self.topic_revs.pop(name, None)
        else:
            tid = uuid.UUID(doc["id"])
            assignment = [tuple(int(b) for b in r) for r in doc["partitions"]]
            configs = {str(k): str(v) for k, v in (doc.get("configs") or {}).items()}
            if topic is not None and topic.topic_id != tid:  # deleted and created again
                self._remove(name)
                topic = None
            if topic is None:
                self._add(Topic(name, tid, len(assignment), configs))
            else:  # the same Topic object, changed in place: the broker holds it
                topic.partitions = len(assignment)
                if topic.configs != configs:
                    topic.configs = configs
                    self.dirty = True  # brokers reconfigure their logs from the new image
            self.assign[name] = assignment
            self.topic_revs[name] = (kv.create_revision, kv.mod_revision)
        if self.changed is not None:
            self.changed.add(name)
        for index in range(max(old_count, len(self.assign.get(name, ())))):
            self._set_part((name, index))

    def _set_part(self, tp: TopicPartition) -> None:
        """A partition is in the image when both its topic and its state key exist."""
        if self.changed is not None:
            self.changed.add(tp[0])
        raw = self.raw_states.get(tp)
        assignment = self.assign.get(tp[0])
        if raw is not None and assignment is not None and tp[1] < len(assignment):
            self.parts[tp] = PartitionState(assignment[tp[1]], *raw)
        elif self.parts.pop(tp, None) is None:
            return
        self.dirty = True

    def image(self) -> ClusterImage:
        """A new ClusterImage of the mirror as it is now; clears `dirty`."""
        self.dirty = False
        changed, self.changed = self.changed, set()
        node, epoch, _ = self.controller
        return ClusterImage.of(self.cluster_id, self.brokers.values(), node, epoch, self.parts, changed)

    # --- encoding: writes, as transaction operations ---------------------------------------------
    # Compare-and-set items compare with the revisions the mirror holds now.

    def create_topics_item(self, plans: list[tuple[str, list[tuple[int, ...]], dict[str, str], uuid.UUID]],
                           live: Collection[int], max_ops: int) -> tuple[Item, list[TopicPartition]]:
        """Create the topics `plans` (name, replicas, configs, id), each only if absent, and
        as many of their partition states as fit in `max_ops` operations; also returns the
        partitions whose states did not fit."""
        ops = [self.put_topic(name, tid, a, c) for name, a, c, tid in plans]
        parts = [(name, i, r) for name, a, _, _ in plans for i, r in enumerate(a)]
        room = max_ops - len(ops)
        ops += [self.put_initial_state((n, i), r, live) for n, i, r in parts[:room]]
        return ([_cmp_create(self.topic_key(name), 0) for name, *_ in plans], ops), [(n, i) for n, i, _ in parts[room:]]

    def put_topic(self, name: str, topic_id: uuid.UUID, assignment: list[tuple[int, ...]],
                  configs: dict[str, str]) -> Any:
        return _put(self.topic_key(name), _topic_doc(topic_id, assignment, configs))

    def delete_topic_item(self, name: str, create_rev: int) -> Item:
        """The topic key (if still incarnation `create_rev`) and, by a range delete, all its
        partition states, in one transaction."""
        key, pre = self.topic_key(name), self.key("partitions", name) + b"/"
        return [_cmp_create(key, create_rev)], [_delete(key), _delete(pre, prefix_range_end(pre))]

    def put_initial_state(self, tp: TopicPartition, replicas: tuple[int, ...], live: Collection[int]) -> Any:
        return _put(self.part_key(tp), _state_doc(initial_state(replicas, live)))

    def state_item(self, tp: TopicPartition, partition_epoch: int, state: PartitionState) -> Item:
        """Write `state` if the partition is still at `partition_epoch` (KIP-497)."""
        key = self.part_key(tp)
        return [_cmp_mod(key, partition_epoch)], [_put(key, _state_doc(state))]

    def create_state_items(self, name: str, indexes: list[int], live: Collection[int]) -> list[Item]:
        """Create the absent partition states `indexes` of topic `name`, each only if still
        absent, with the replicas the mirror shows for it."""
        assignment = self.assign.get(name)
        items = []
        for i in indexes:
            replicas = assignment[i] if assignment and i < len(assignment) else None
            if replicas is not None:
                key = self.part_key((name, i))
                items.append(([_cmp_create(key, 0)], [self.put_initial_state((name, i), replicas, live)]))
        return items

    def grow_plans(self, counts: dict[str, int], assignments: dict[str, list[tuple[int, ...]]] | None,
                   ) -> list[tuple[str, int, list[tuple[int, ...]]]]:
        """(name, current count, new partitions' replicas) for each topic `counts` grows;
        `assignments[name]` lists the new partitions' replicas (or all of them). KeyError for
        an unknown topic, ValueError for a shrink or a missing or bad assignment."""
        plans = []
        for name, count in counts.items():
            if name not in self.topics:
                raise KeyError(name)
            base = len(self.assign[name])
            if count < base:
                raise ValueError(f"topic {name!r} has {base} partitions; cannot shrink to {count}")
            given = (assignments or {}).get(name) or []
            if count > base:
                given = given[base:] if len(given) == count else given
                plans.append((name, base, _assignment(name, count - base, {name: given})))
        return plans

    def grow_item(self, name: str, base: int, new: list[tuple[int, ...]], live: Collection[int], room: int) -> Item:
        """Topic `name`, if still at `base` partitions, with `new` added, and the states of
        the first `room` of them. Fenced if the count changed."""
        if len(self.assign[name]) != base:
            raise Fenced(f"topic {name!r} changed its partition count meanwhile")
        topic, key = self.topics[name], self.topic_key(name)
        ops = [self.put_topic(name, topic.topic_id, self.assign[name] + new, topic.configs)]
        ops += [self.put_initial_state((name, base + i), r, live) for i, r in enumerate(new[:room])]
        return [_cmp_mod(key, self.topic_revs[name][1])], ops

    def topic_configs_item(self, configs: dict[str, dict[str, str]]) -> Item:
        """Replace the configs of the named topics (`configs`: name -> configs)."""
        return ([_cmp_mod(self.topic_key(t), self.topic_revs[t][1]) for t in configs],
                [self.put_topic(t, self.topics[t].topic_id, self.assign[t], c) for t, c in configs.items()])

    def config_ops(self, brokers: dict[str, dict[str, str]], groups: dict[str, dict[str, str]],
                   users: dict[str, dict[str, str]] | None = None,
                   acls: dict[str, dict[str, str]] | None = None) -> list[Any]:
        """Replace dynamic broker configs, group overrides and users' SCRAM credentials; an
        empty dict deletes one."""
        return [_put(key, dict(configs)) if configs else _delete(key)
                for kind, entries in (("broker_configs", brokers), ("group_configs", groups),
                                      ("user_scram", users or {}), ("acls", acls or {}))
                for key, configs in ((self.config_key(kind, r), c) for r, c in entries.items())]
