"""What one simulated seed reports: the row of the sweep's Parquet table.

Theory of operation: `run_seed` (sim/run.py) returns a SeedResult; the sweep turns each into
a row (`as_row`, plain values only, so Spark and pyarrow can take it as is) and the report
groups the rows by protocol. The field list is the table's schema (`COLUMNS`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

PROTOCOLS = ("consumer", "classic-eager", "classic-cooperative", "mixed")


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
    commits_accepted: int = 0
    commits_rejected: int = 0
    coordinator_crashes: int = 0
    coordinator_moves: int = 0  # leadership of __consumer_offsets handed to another broker (issue 18)
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
