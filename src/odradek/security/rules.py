"""What every API odradek serves asks the authorizer, as Kafka 4's KafkaApis asks it: the
one table to read (each handler carries out its rows; tests/broker/test_authorization.py
sends each API as a principal with and without the row's ACL and checks the answer).

A row: the resource type, how the resource is named in the request, the operation, and
the error a refusal gets. Several rows for one API are checked in order (the first
refusal answers). Notes on the shape of refusals:
- per-item rows (topics, groups in a batch) refuse only their items;
- "filter" rows leave items out silently (Kafka hides what the principal may not see);
- DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS.
Where Kafka has an alternative (CLUSTER CREATE or TOPIC CREATE; CLUSTER_ACTION for a
follower), the row says "or".
"""

from __future__ import annotations

from dataclasses import dataclass

from .acl import Operation, ResourceType

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
O = Operation


@dataclass(frozen=True)
class Rule:
    resource: ResourceType
    name_from: str  # the request field naming the resource ("-" for the cluster)
    operation: Operation
    refusal: str  # the Kafka error a refusal gets; "filter": left out silently
    scope: str = "request"  # "request", "item" (per topic/group/id) or "filter"
    note: str = ""


RULES: dict[str, tuple[Rule, ...]] = {
    "Produce": (Rule(X, "transactional_id", O.WRITE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                     note="only a transactional producer"),
                Rule(T, "topic_data.name", O.WRITE, "TOPIC_AUTHORIZATION_FAILED", "item")),
    "Fetch": (Rule(T, "topics.topic", O.READ, "TOPIC_AUTHORIZATION_FAILED", "item", "a consumer"),
              Rule(C, "-", O.CLUSTER_ACTION, "TOPIC_AUTHORIZATION_FAILED", note="a follower: every partition")),
    "ListOffsets": (Rule(T, "topics.name", O.DESCRIBE, "TOPIC_AUTHORIZATION_FAILED", "item"),),
    "Metadata": (Rule(T, "topics.name", O.DESCRIBE, "TOPIC_AUTHORIZATION_FAILED", "item",
                      "left out when all topics are asked for"),
                 Rule(C, "-", O.CREATE, "TOPIC_AUTHORIZATION_FAILED", "item", "or CREATE on the topic: auto-creation")),
    "OffsetCommit": (Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED", note="every partition"),
                     Rule(T, "topics.name", O.READ, "TOPIC_AUTHORIZATION_FAILED", "item")),
    "OffsetFetch": (Rule(G, "group_id", O.DESCRIBE, "GROUP_AUTHORIZATION_FAILED", "item"),
                    Rule(T, "topics.name", O.DESCRIBE, "TOPIC_AUTHORIZATION_FAILED", "item",
                         "left out of an all-topics fetch")),
    "FindCoordinator": (Rule(G, "key", O.DESCRIBE, "GROUP_AUTHORIZATION_FAILED", "item", "key_type 0"),
                        Rule(X, "key", O.DESCRIBE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "item", "key_type 1")),
    "JoinGroup": (Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED"),),
    "Heartbeat": (Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED"),),
    "LeaveGroup": (Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED"),),
    "SyncGroup": (Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED"),),
    "DescribeGroups": (Rule(G, "groups", O.DESCRIBE, "GROUP_AUTHORIZATION_FAILED", "item"),),
    "ListGroups": (Rule(C, "-", O.DESCRIBE, "filter", "filter", "or DESCRIBE on each group listed"),),
    "CreateTopics": (Rule(C, "-", O.CREATE, "TOPIC_AUTHORIZATION_FAILED", "item", "or CREATE on the topic"),),
    "DeleteTopics": (Rule(C, "-", O.DELETE, "TOPIC_AUTHORIZATION_FAILED", "item",
                          "or DESCRIBE and DELETE on the topic"),),
    "DeleteRecords": (Rule(T, "topics.name", O.DELETE, "TOPIC_AUTHORIZATION_FAILED", "item"),),
    "InitProducerId": (Rule(X, "transactional_id", O.WRITE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                            note="transactional"),
                       Rule(C, "-", O.IDEMPOTENT_WRITE, "CLUSTER_AUTHORIZATION_FAILED",
                            note="idempotent: or WRITE on any topic")),
    "OffsetForLeaderEpoch": (Rule(C, "-", O.CLUSTER_ACTION, "TOPIC_AUTHORIZATION_FAILED", "item",
                                  "or DESCRIBE on each topic"),),
    "AddPartitionsToTxn": (Rule(X, "transactional_id", O.WRITE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
                           Rule(T, "topics.name", O.WRITE, "TOPIC_AUTHORIZATION_FAILED", "item",
                                "the others OPERATION_NOT_ATTEMPTED")),
    "AddOffsetsToTxn": (Rule(X, "transactional_id", O.WRITE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
                        Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED")),
    "EndTxn": (Rule(X, "transactional_id", O.WRITE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),),
    "WriteTxnMarkers": (Rule(C, "-", O.CLUSTER_ACTION, "CLUSTER_AUTHORIZATION_FAILED", note="or ALTER"),),
    "TxnOffsetCommit": (Rule(X, "transactional_id", O.WRITE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
                        Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED"),
                        Rule(T, "topics.name", O.READ, "TOPIC_AUTHORIZATION_FAILED", "item")),
    "DescribeAcls": (Rule(C, "-", O.DESCRIBE, "CLUSTER_AUTHORIZATION_FAILED"),),
    "CreateAcls": (Rule(C, "-", O.ALTER, "CLUSTER_AUTHORIZATION_FAILED"),),
    "DeleteAcls": (Rule(C, "-", O.ALTER, "CLUSTER_AUTHORIZATION_FAILED"),),
    "DescribeConfigs": (Rule(T, "resources", O.DESCRIBE_CONFIGS, "TOPIC_AUTHORIZATION_FAILED", "item",
                             "GROUP resources: GROUP_AUTHORIZATION_FAILED; BROKER: CLUSTER_..."),),
    "AlterConfigs": (Rule(T, "resources", O.ALTER_CONFIGS, "TOPIC_AUTHORIZATION_FAILED", "item",
                          "GROUP resources: GROUP_AUTHORIZATION_FAILED; BROKER: CLUSTER_..."),),
    "IncrementalAlterConfigs": (Rule(T, "resources", O.ALTER_CONFIGS, "TOPIC_AUTHORIZATION_FAILED", "item",
                                     "GROUP resources: GROUP_AUTHORIZATION_FAILED; BROKER: CLUSTER_..."),),
    "CreatePartitions": (Rule(T, "topics.name", O.ALTER, "TOPIC_AUTHORIZATION_FAILED", "item"),),
    "DeleteGroups": (Rule(G, "groups_names", O.DELETE, "GROUP_AUTHORIZATION_FAILED", "item"),),
    "OffsetDelete": (Rule(G, "group_id", O.DELETE, "GROUP_AUTHORIZATION_FAILED"),
                     Rule(T, "topics.name", O.READ, "TOPIC_AUTHORIZATION_FAILED", "item")),
    "DescribeUserScramCredentials": (Rule(C, "-", O.DESCRIBE, "CLUSTER_AUTHORIZATION_FAILED"),),
    "AlterUserScramCredentials": (Rule(C, "-", O.ALTER, "CLUSTER_AUTHORIZATION_FAILED"),),
    "DescribeCluster": (Rule(C, "-", O.DESCRIBE, "filter", "filter", "only its authorized operations field"),),
    "DescribeTransactions": (Rule(X, "transactional_ids", O.DESCRIBE, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                                  "item", "topics it may not describe are left out"),),
    "ListTransactions": (Rule(X, "-", O.DESCRIBE, "filter", "filter"),),
    "ConsumerGroupHeartbeat": (Rule(G, "group_id", O.READ, "GROUP_AUTHORIZATION_FAILED"),
                               Rule(T, "subscribed_topic_names", O.DESCRIBE, "TOPIC_AUTHORIZATION_FAILED",
                                    note="all or nothing; a regex resolves to describable topics only")),
    "ConsumerGroupDescribe": (Rule(G, "group_ids", O.DESCRIBE, "GROUP_AUTHORIZATION_FAILED", "item"),
                              Rule(T, "assignments", O.DESCRIBE, "TOPIC_AUTHORIZATION_FAILED", "item",
                                   "a group assigned a topic it may not describe")),
    # Before authentication (security/authentication.py); no ACL.
    "ApiVersions": (),
    "SaslHandshake": (),
    "SaslAuthenticate": (),
}

__all__ = ["RULES", "Rule"]
