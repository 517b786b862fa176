"""Each checker catches a deliberate defect, and reports it with a seed that replays it."""

from __future__ import annotations

import pytest

from odradek.sim import defects
from odradek.sim.run import run_seed

# defect -> (the checker that must report it, protocol, seeds to try)
CASES = {
    "assign-before-revoke": ({"coordinator-ownership", "client-ownership"}, "consumer", range(0, 6)),
    "accept-zombie-commits": ({"commit-fencing"}, "consumer", range(0, 12)),
    "unbalanced-assignor": ({"stable-assignment"}, "consumer", range(0, 6)),
    "stuck-revocation": ({"liveness"}, "consumer", range(0, 30)),
    "lost-writes": ({"epochs", "commit-fencing"}, "consumer", range(0, 20)),
    "replay-skips-offsets": ({"replay"}, "consumer", range(0, 6)),
    # With the adaptive heartbeat interval (issue 22) the first seed to catch it is 40.
    "commit-on-write": ({"fenced-coordinator"}, "consumer", range(30, 45)),
    "no-truncation": ({"fenced-coordinator"}, "consumer", range(150, 215)),
    # A zombie answering OffsetFetch from stale state is rare: found by a sweep (seed 7028)
    # before the adaptive heartbeat interval (issue 22), which changes every seed's timing;
    # with it on, seeds 0-2999 do not catch it. The seed is replayed as it was found.
    "no-lease-check": ({"commit-fencing"}, "consumer", range(7028, 7029), {"adaptive_heartbeat": False}),
    # Issue 19: a member fenced out of the group (its session ran out while it was cut off)
    # commits the transaction it had under way; its new owner had processed those records.
    "no-txn-fencing": ({"exactly-once"}, "eos-consumer", range(0, 16)),
}


def _case(name: str):
    """(wanted checkers, protocol, seeds, run_seed options)."""
    wanted, protocol, seeds, *options = CASES[name]
    return wanted, protocol, seeds, (options[0] if options else {})


def _first_caught(name: str):
    wanted, protocol, seeds, options = _case(name)
    with defects.inject(name):
        for seed in seeds:
            r = run_seed(seed, protocol, **options)
            if wanted & set(r.violation_kinds.split(",")):
                return seed, r
    return None, None


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_checker_reports_the_defect_with_a_replayable_seed(name):
    wanted, protocol, _, options = _case(name)
    seed, caught = _first_caught(name)
    assert caught is not None, f"{name}: no seed caught it"
    assert caught.seed == seed and caught.first_violation
    assert any("VIOLATION" in line for line in caught.trace_tail)  # the readable trace of the last events
    with defects.inject(name):
        again = run_seed(seed, protocol, **options)
    assert (again.violation_kinds, again.first_violation) == (caught.violation_kinds, caught.first_violation)
    clean = run_seed(seed, protocol, **options)  # the same seed without the defect passes
    assert clean.violations == 0 and clean.converged, clean.first_violation


def test_the_defect_is_gone_after_the_hook():
    with defects.inject("unbalanced-assignor"):
        pass
    assert run_seed(0, "consumer").violations == 0
