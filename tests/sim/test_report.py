"""The sweep's report on a small hand-made table: the per-protocol numbers, the Markdown
table, the PNG, and the replay command."""

from __future__ import annotations

import pytest

from odradek.sim.report import failing, markdown, render_png, replay_command, summarize
from odradek.sim.result import SeedResult

pa = pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")


def row(seed, protocol, *, converged=True, convergence_ms=100, moved=0, events=0, rebalances=0, revocations=0,
        violations=0, kinds="", accepted=0, rejected=0) -> dict:
    return SeedResult(seed=seed, protocol=protocol, faults="", members=3, partitions=6, sim_ms=5000, steps=50,
                      violations=violations, violation_kinds=kinds, first_violation="x" if violations else "",
                      converged=converged, convergence_ms=convergence_ms if converged else -1,
                      partition_movements=moved, revocations=revocations, rebalances=rebalances,
                      member_events=events, commits_accepted=accepted, commits_rejected=rejected).as_row()


ROWS = [
    # consumer: three converged seeds, one of them without a membership change
    row(1, "consumer", convergence_ms=100, moved=2, events=1, rebalances=1, revocations=1, accepted=5),
    row(2, "consumer", convergence_ms=200, moved=6, events=2, rebalances=4, revocations=0, accepted=7, rejected=1),
    row(3, "consumer", convergence_ms=1000, moved=4, events=0, rebalances=0, revocations=2),
    # classic-eager: one violating seed that never converged, one with two kinds
    row(4, "classic-eager", converged=False, violations=1, kinds="lost-commit", moved=9, events=3, rebalances=3),
    row(5, "classic-eager", convergence_ms=50, violations=2, kinds="double-owner,lost-commit", moved=1, events=1,
        rebalances=2),
    # a crash row, whose protocol the seed never got to pick
    row(6, "unknown", converged=False, violations=1, kinds="crash"),
]


def test_summary_numbers():
    consumer, eager, unknown = summarize(pa.Table.from_pylist(ROWS))
    assert consumer.pop("violation_kinds") == {}
    assert consumer == pytest.approx({
        "protocol": "consumer", "seeds": 3, "seeds_with_violations": 0, "converged_pct": 100.0,
        "convergence_ms_median": 200, "convergence_ms_p95": 920.0, "convergence_ms_max": 1000,  # 200 + 0.9 * 800
        "partition_movements_mean": 4.0,
        # seed 3 had no membership change: left out of the ratios
        "moved_per_member_event_median": 2.5, "moved_per_member_event_p95": 2.95,
        "rebalances_per_member_event_median": 1.5, "rebalances_per_member_event_p95": 1.95,
        "revocations_mean": 1.0, "commits_accepted": 12, "commits_rejected": 1,
        "txn_committed": 0, "txn_aborted": 0,
        "adaptive_heartbeat": True,  # SeedResult's default, the broker's
    })
    assert eager["seeds"] == 2 and eager["seeds_with_violations"] == 2
    assert eager["violation_kinds"] == {"double-owner": 1, "lost-commit": 2}
    assert eager["converged_pct"] == 50.0
    assert (eager["convergence_ms_median"], eager["convergence_ms_p95"], eager["convergence_ms_max"]) == (50, 50, 50)
    assert eager["moved_per_member_event_median"] == 2.0  # 3.0 and 1.0
    assert unknown["protocol"] == "unknown" and unknown["violation_kinds"] == {"crash": 1}
    assert unknown["convergence_ms_median"] is None and unknown["moved_per_member_event_p95"] is None


def test_failing_seeds():
    assert [r["seed"] for r in failing(ROWS)] == [4, 5, 6]


def test_markdown_table():
    text = markdown(summarize(ROWS))
    lines = text.splitlines()
    assert len(lines) == 2 + 3 and all(line.startswith("|") and line.endswith("|") for line in lines)
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert lines[2].startswith("| consumer | 3 | 0 | - | 100.0% | 200 / 920 / 1,000 | 2.50 / 2.95 |")
    assert "| classic-eager | 2 | 2 | double-owner 1, lost-commit 2 | 50.0% |" in lines[3]
    assert "| unknown | 1 | 1 | crash 1 | 0.0% | - / - / - | - / - |" in lines[4]


def is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_from_a_table_and_from_parquet(tmp_path):
    import pyarrow.parquet as pq

    assert render_png(ROWS, tmp_path / "a.png") == tmp_path / "a.png"
    assert is_png(tmp_path / "a.png")
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "t.parquet")
    render_png(tmp_path / "t.parquet", tmp_path / "sub" / "b.png")
    assert is_png(tmp_path / "sub" / "b.png")


def test_png_when_nothing_converged_or_moved(tmp_path):
    rows = [row(s, "mixed", converged=False) for s in range(3)]
    render_png(rows, tmp_path / "empty.png")
    assert is_png(tmp_path / "empty.png")


def test_replay_command():
    assert replay_command(42, "classic-cooperative") == "odradek sim run --seed 42 --protocol classic-cooperative"
    assert replay_command(42, "unknown") == replay_command(42) == "odradek sim run --seed 42"
    off = replay_command(42, "consumer", False)
    assert off == "odradek sim run --seed 42 --protocol consumer --no-adaptive-heartbeat"
