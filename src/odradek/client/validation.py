"""KIP-320 position validation for the consumer, sans-I/O.

Theory of operation. Records carry the leader epoch they were written in, and a position
remembers the epoch of the record before it (`PartitionState.position_epoch`). When
metadata names a new leader for a partition (`observe_leader`), the records read from the
old one may not all exist on the new one: an unclean election, or a leader that never had
them, truncates the log under the position. So, before fetching again, the consumer asks
the new leader with OffsetsForLeaderEpoch (v3+, replica id -1, capped at the high watermark,
KIP-392) where the position's epoch ends in its log (`request_body`), and `on_answer`
decides, exactly as Java's SubscriptionState.maybeCompleteValidation does:

* end offset >= position: the position stands; fetching resumes.
* end offset < position: the log diverged at the end offset. With a reset policy the
  position moves there (with the epoch of the answer) and Java logs the truncation; with
  `auto_offset_reset="none"` it raises LogTruncationError naming the divergent offset.
* an undefined answer (no epoch that old on the leader): the reset policy applies, or
  LogTruncationError with no divergent offset.
* FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER...: metadata is
  refreshed and the validation retried; other retriable errors are retried after a
  backoff.

A position with no epoch (sought, reset, or read from a broker whose batches have none) is
never validated: there is nothing to compare, as in Java. The seed's other use,
validating after a follower's OFFSET_OUT_OF_RANGE past its high watermark (case 4), starts
here too (`require`), from `readreplica`. The driver is `fetching.FetchDriver`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from .cluster import TopicPartition
from .errors import RETRIABLE, STALE_METADATA, KafkaError, LogTruncationError
from .fetcher import PartitionState
from .readreplica import forget

CONSUMER_REPLICA_ID = -1


class Outcome(Enum):
    VALID = "valid"  # the position stands
    TRUNCATED = "truncated"  # the position moved back to where the log diverged
    RESET = "reset"  # the reset policy finds the position again
    ERROR = "error"  # raise to the application (LogTruncationError or the broker's error)
    REFRESH = "refresh"  # refresh metadata, then validate again
    RETRY = "retry"  # validate again after a backoff
    STALE = "stale"  # the answer is about a position that is no longer there


class Verdict(NamedTuple):
    outcome: Outcome
    error: KafkaError | None = None


def observe_leader(s: PartitionState, leader: int, epoch: int) -> bool:
    """Metadata names `leader` at `epoch` for this partition. A change of leader drops the
    preferred read replica (KIP-392; Java maybeValidatePosition) and, when the records
    read were written in an older epoch than the new leader's, the position must be
    validated before the next fetch (KIP-320). Returns whether that just started."""
    if (s.leader, s.leader_epoch) == (leader, epoch):
        return False
    s.leader, s.leader_epoch = leader, epoch
    forget(s)
    if epoch >= 0 and 0 <= s.position_epoch < epoch and s.position is not None:
        s.validate_at = s.position
        return True
    return False


def require(s: PartitionState) -> bool:
    """Validate the position with the leader before fetching it again, if it has an epoch."""
    if s.position is None or s.position_epoch < 0:
        return False
    s.validate_at = s.position
    return True


def complete(s: PartitionState) -> None:
    """The position is taken as valid (validated, or the broker cannot validate it)."""
    s.validate_at = None


def request_body(parts: Iterable[tuple[TopicPartition, PartitionState]]) -> dict:
    """OffsetsForLeaderEpoch (v3+) for partitions awaiting validation: for each, the epoch
    of its position, and the current leader epoch so a stale leader is fenced."""
    topics: dict[str, list[dict]] = {}
    for tp, s in parts:
        topics.setdefault(tp.topic, []).append({
            "partition": tp.partition, "current_leader_epoch": s.leader_epoch, "leader_epoch": s.position_epoch})
    return {"replica_id": CONSUMER_REPLICA_ID,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}


def on_answer(tp: TopicPartition, s: PartitionState, asked: int, code: ErrorCode | int, leader_epoch: int,
              end_offset: int, reset_policy: str) -> Verdict:
    """The leader's answer for `tp`, asked when its position was `asked`."""
    if not s.validating or s.position != asked:
        return Verdict(Outcome.STALE)  # sought, reset or revoked meanwhile
    code = ErrorCode(int(code))
    if code == ErrorCode.none:
        if end_offset < 0 or leader_epoch < 0:
            # Java: "Truncation detected ... resetting offset": the leader knows no epoch that old.
            if reset_policy == "none":
                return Verdict(Outcome.ERROR, LogTruncationError(
                    {tp: None}, f"{tp}: the log was truncated below offset {asked} and auto_offset_reset=none"))
            complete(s)
            s.position, s.reset = None, reset_policy
            return Verdict(Outcome.RESET)
        if end_offset < asked:
            if reset_policy == "none":
                return Verdict(Outcome.ERROR, LogTruncationError(
                    {tp: end_offset}, f"{tp}: the log diverged at offset {end_offset}, below the position "
                                      f"{asked}, and auto_offset_reset=none"))
            # Java: "Truncation detected ... resetting offset to the first offset known to diverge".
            complete(s)
            s.position = end_offset
            s.offset_epoch, s.epoch_of = leader_epoch, end_offset
            return Verdict(Outcome.TRUNCATED)
        complete(s)
        return Verdict(Outcome.VALID)
    if code in STALE_METADATA:
        return Verdict(Outcome.REFRESH)
    if code in RETRIABLE:
        return Verdict(Outcome.RETRY)
    return Verdict(Outcome.ERROR, KafkaError(code, f"OffsetsForLeaderEpoch {tp}"))
