"""A stand-in for the simulator: deterministic SeedResults from the seed alone, so the
sweep, the report and the command line are tested without `odradek.sim.run`.

Seeds s with s % 5 == 3 have violations, s % 10 == 9 do not converge, CRASH_SEED raises
and, under `dying_run`, KILLER_SEED ends its worker process outright. Module-level
functions, so multiprocessing pickles them by reference.
"""

from __future__ import annotations

import os

from odradek.sim.result import GROUP_PROTOCOLS, SeedResult

CRASH_SEED = 6
KILLER_SEED = 4
TRACE = 60  # trace lines of every result


def fake_result(seed: int, protocol: str | None = None, adaptive_heartbeat: bool = True) -> SeedResult:
    protocol = protocol or GROUP_PROTOCOLS[seed % len(GROUP_PROTOCOLS)]
    bad = seed % 5 == 3
    converged = seed % 10 != 9
    return SeedResult(
        seed=seed, protocol=protocol, faults="drop,delay" if seed % 2 else "", members=3 + seed % 3, partitions=6,
        sim_ms=1000 + seed, steps=100 + seed, violations=2 if bad else 0,
        violation_kinds="no-double-owner,offsets-monotonic" if bad else "",
        first_violation=f"t-0 owned by m1 and m2 at step {seed}" if bad else "",
        converged=converged, convergence_ms=100 * (seed % 13 + 1) if converged else -1,
        partition_movements=seed % 7, revocations=seed % 4, rebalances=seed % 3 + 1, member_events=seed % 4,
        records_written=20 + seed, commits_accepted=10 + seed, commits_rejected=seed % 2, wall_s=0.01,
        adaptive_heartbeat=adaptive_heartbeat,
        trace_tail=[f"t={i} seed {seed} event {i}" for i in range(TRACE)],
    )


def fake_run(seed: int, protocol: str | None = None, *, trace: bool = False,
             adaptive_heartbeat: bool = True) -> SeedResult:
    if seed == CRASH_SEED:
        raise RuntimeError(f"boom at seed {seed}")
    return fake_result(seed, protocol, adaptive_heartbeat)


def dying_run(seed: int, protocol: str | None = None, *, trace: bool = False,
              adaptive_heartbeat: bool = True) -> SeedResult:
    if seed == KILLER_SEED:
        os._exit(3)  # what a segfault or the OOM killer does to a worker: no exception, no result
    return fake_result(seed, protocol, adaptive_heartbeat)


def violating_run(seed: int, protocol: str | None = None, *, trace: bool = False,
                  adaptive_heartbeat: bool = True) -> SeedResult:
    r = fake_result(seed, protocol, adaptive_heartbeat)
    r.violations, r.violation_kinds, r.first_violation = 1, "lost-commit", f"offset lost at seed {seed}"
    return r
