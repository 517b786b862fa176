"""What one simulated seed reports: the row of the sweep's Parquet table.

Theory of operation: `run_seed` (sim/run.py) returns a SeedResult; the sweep turns each into
a row (`as_row`, plain values only, so Spark and pyarrow can take it as is) and the report
groups the rows by protocol. The field list is the table's schema (`COLUMNS`).

Protocols: the four group protocols a seed picks from (`GROUP_PROTOCOLS`), and the EOS
workload (issue 19) on each of them, `eos-<protocol>`; `eos` alone runs the EOS workload
on the protocol the seed picks (its result names that one, `eos-<picked>`, which replays
it). `PROTOCOLS` is every name `--protocol` takes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

GROUP_PROTOCOLS = ("consumer", "classic-eager", "classic-cooperative", "mixed")
EOS = "eos"
EOS_PROTOCOLS = (EOS, *(f"{EOS}-{p}" for p in GROUP_PROTOCOLS))
PROTOCOLS = GROUP_PROTOCOLS + EOS_PROTOCOLS


def split_protocol(protocol: str | None) -> tuple[str | None, bool]:
    """(group protocol or None to let the seed pick, whether the EOS workload runs)."""
    if protocol == EOS:
        return None, True
    if protocol is not None and protocol.startswith(EOS + "-"):
        return protocol[len(EOS) + 1:], True
    return protocol, False


@dataclass(slots=True)
class SeedResult:
    seed: int
    protocol: str  # one of PROTOCOLS
    faults: str  # the fault kinds this seed switched on, comma-separated (swarm testing)
    members: int  # member processes the seed started with
    partitions: int  # subscribed partitions at the end
    sim_ms: int  # simulated time the run covered
    steps: int  # events processed
    violations: int  # checker reports (0 is a pass)
    violation_kinds: str = ""  # comma-separated checker names, sorted, unique
    first_violation: str = ""  # the first report's message
    converged: bool = False  # liveness: stable within the bound after the faults stopped
    convergence_ms: int = -1  # simulated ms from the end of the faults to a stable group (-1: never)
    partition_movements: int = 0  # partitions a member started consuming, after the first assignment
    revocations: int = 0  # partitions members gave up (revoked or lost)
    rebalances: int = 0  # group epoch bumps (consumer) or new generations (classic)
    member_events: int = 0  # joins, leaves, crashes and restarts of members
    records_written: int = 0  # coordinator records written to the simulated __consumer_offsets
    commits_accepted: int = 0  # OffsetCommit partitions (EOS: TxnOffsetCommit) the coordinator accepted
    commits_rejected: int = 0
    coordinator_crashes: int = 0
    coordinator_moves: int = 0  # leadership of __consumer_offsets handed to another broker (issue 18)
    txn_committed: int = 0  # EOS workload: transactions committed (issue 19)
    txn_aborted: int = 0  # ... and aborted by their producer (timed-out ones the coordinator aborts are not counted)
    # odradek's adaptive heartbeat interval for reconciling members (issue 22) was on
    adaptive_heartbeat: bool = True
    wall_s: float = 0.0  # real seconds the seed took (not deterministic; everything else is)
    trace_tail: list[str] = field(default_factory=list)  # the last events, for a failure's report

    @property
    def rebalances_per_member_event(self) -> float:
        return self.rebalances / self.member_events if self.member_events else 0.0

    @property
    def moved_per_member_event(self) -> float:
        return self.partition_movements / self.member_events if self.member_events else 0.0

    def as_row(self) -> dict:
        row = asdict(self)
        row.pop("trace_tail")
        row["rebalances_per_member_event"] = self.rebalances_per_member_event
        row["moved_per_member_event"] = self.moved_per_member_event
        return row


COLUMNS = tuple(f.name for f in fields(SeedResult) if f.name != "trace_tail") + (
    "rebalances_per_member_event", "moved_per_member_event")
