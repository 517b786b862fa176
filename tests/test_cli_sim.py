"""`odradek sim run|sweep` as a user runs them, in process, with the simulator replaced by
the fake of tests/sim/fakes.py (monkeypatched where the command looks it up), so the
output and exit codes are tested without the simulator itself."""

from __future__ import annotations

import pytest

from odradek.sim.result import PROTOCOLS

from odradek import cli
from tests.sim import fakes

pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("matplotlib")


@pytest.fixture
def fake_sim(monkeypatch):
    import odradek.sim.run

    monkeypatch.setattr(odradek.sim.run, "run_seed", fakes.fake_run)


def sim(capsys, *args: str) -> tuple[int, str]:
    rc = cli.main(["sim", *args])
    out = capsys.readouterr().out
    assert "Traceback" not in out
    return rc, out


def test_run_a_passing_seed(fake_sim, capsys):
    rc, out = sim(capsys, "run", "--seed", "1")
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith("seed 1: classic-eager, faults drop,delay, 4 members, 6 partitions, 101 steps, "
                               "1001 ms simulated, converged in 200 ms, 1 partitions moved, 1 revoked, "
                               "2 rebalances for 1 member events, commits 11 accepted / 1 rejected")


def test_run_a_violating_seed(fake_sim, capsys):
    rc, out = sim(capsys, "run", "--seed", "3", "--protocol", "consumer")
    assert rc == 1
    assert out.startswith("seed 3: consumer,")
    assert "2 violation(s): no-double-owner,offsets-monotonic\n" in out
    assert "first: t-0 owned by m1 and m2 at step 3\n" in out
    assert "replay: odradek sim run --seed 3 --protocol consumer\n" in out
    # the last events only
    assert "last 40 events:\n" in out
    assert f"  t={fakes.TRACE - 1} seed 3 event {fakes.TRACE - 1}\n" in out
    assert "  t=0 seed 3 event 0\n" not in out


def test_run_trace_prints_the_whole_tail(fake_sim, capsys):
    rc, out = sim(capsys, "run", "--seed", "3", "--trace")
    assert rc == 1
    assert "replay: odradek sim run --seed 3 --protocol mixed\n" in out  # the protocol the seed picked
    assert sum(1 for line in out.splitlines() if line.startswith("  t=")) == fakes.TRACE
    rc, out = sim(capsys, "run", "--seed", "1", "--trace")
    assert rc == 0 and f"last {fakes.TRACE} events:\n" in out and "  t=0 seed 1 event 0\n" in out


def test_run_without_convergence_fails(fake_sim, capsys):
    rc, out = sim(capsys, "run", "--seed", "9")
    assert rc == 1
    assert "did not converge" in out and "replay: odradek sim run --seed 9 --protocol classic-eager\n" in out


def test_run_a_crashing_seed(fake_sim, capsys):
    rc = cli.main(["sim", "run", "--seed", str(fakes.CRASH_SEED)])
    captured = capsys.readouterr()
    assert rc == 1
    assert f"RuntimeError: boom at seed {fakes.CRASH_SEED}" in captured.err  # the traceback, for the simulator's bug
    assert f"replay: odradek sim run --seed {fakes.CRASH_SEED}\n" in captured.out


def test_bad_arguments_exit_2(capsys):
    for args in (["run"], ["run", "--seed", "1", "--protocol", "nope"], ["sweep", "--seeds", "0"],
                 ["sweep", "--seeds", "3", "--spark", "local[1]", "--no-spark"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(["sim", *args])
        assert exc.value.code == 2, args
    capsys.readouterr()


def test_sweep_writes_the_table_plot_and_summary_and_lists_failures(fake_sim, capsys, tmp_path):
    out_dir = tmp_path / "out"
    rc, out = sim(capsys, "sweep", "--seeds", "12", "--no-spark", "--out", str(out_dir))
    assert rc == 1
    rows = pq.read_table(out_dir / "sweep.parquet").to_pylist()
    assert [r["seed"] for r in rows] == list(range(12))
    png = (out_dir / "sweep.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    summary = (out_dir / "summary.md").read_text()
    assert summary.startswith("| protocol | seeds |") and summary in out
    assert "| unknown | 1 | 1 | crash 1 |" in summary
    assert "4 of 12 seeds failed" in out
    # seeds 3 and 8 violate, 9 never converges, 6 crashed (its protocol is unknown)
    for seed in (3, 8, 9):
        assert f"\n    odradek sim run --seed {seed} --protocol {PROTOCOLS[seed % 4]}\n" in out
    assert f"\n    odradek sim run --seed {fakes.CRASH_SEED}\n" in out
    assert "seed 3 (mixed) no-double-owner,offsets-monotonic: t-0 owned by m1 and m2 at step 3\n" in out
    assert f"seed {fakes.CRASH_SEED} (unknown) crash: RuntimeError: boom at seed {fakes.CRASH_SEED}" in out
    assert "seed 9 (classic-eager) did not converge" in out
    assert out.count("odradek sim run --seed") == 4


def test_sweep_replays_with_the_protocol_it_was_told(fake_sim, capsys, tmp_path):
    rc, out = sim(capsys, "sweep", "--seeds", "5", "--protocol", "classic-cooperative", "--no-spark",
                  "--out", str(tmp_path))
    assert rc == 1
    assert "  seed 3 (classic-cooperative) " in out
    assert "\n    odradek sim run --seed 3 --protocol classic-cooperative\n" in out


def test_sweep_of_passing_seeds_exits_0(fake_sim, capsys, tmp_path):
    rc, out = sim(capsys, "sweep", "--seeds", "3", "--start", "0", "--protocol", "consumer", "--no-spark",
                  "--out", str(tmp_path))
    assert rc == 0
    assert "0 of 3 seeds failed" in out
    assert {r["protocol"] for r in pq.read_table(tmp_path / "sweep.parquet").to_pylist()} == {"consumer"}


def test_sweep_lists_at_most_20_failures(monkeypatch, capsys, tmp_path):
    import odradek.sim.run

    monkeypatch.setattr(odradek.sim.run, "run_seed", fakes.violating_run)
    rc, out = sim(capsys, "sweep", "--seeds", "25", "--start", "100", "--no-spark", "--out", str(tmp_path))
    assert rc == 1
    assert out.count("odradek sim run --seed") == 20
    assert f"odradek sim run --seed 119 --protocol {PROTOCOLS[119 % 4]}\n" in out and "--seed 120" not in out
    assert "... and 5 more" in out


def test_sweep_both_ways_compares_the_adaptive_heartbeat_interval(fake_sim, capsys, tmp_path):
    rc, out = sim(capsys, "sweep", "--seeds", "5", "--protocol", "consumer", "--no-spark", "--out", str(tmp_path),
                  "--adaptive-heartbeat", "both")
    assert rc == 1  # fake seed 3 has a violation, in both modes
    rows = pq.read_table(tmp_path / "sweep.parquet").to_pylist()
    both = [(s, f) for s in range(5) for f in (False, True)]
    assert sorted((r["seed"], r["adaptive_heartbeat"]) for r in rows) == both
    assert "| consumer (adaptive heartbeat on) | 5 |" in out and "| consumer (adaptive heartbeat off) | 5 |" in out
    # the off row's failure replays with the extension off
    assert "\n    odradek sim run --seed 3 --protocol consumer --no-adaptive-heartbeat\n" in out


def test_run_without_the_adaptive_heartbeat_interval(monkeypatch, capsys):
    import odradek.sim.run

    seen = []
    monkeypatch.setattr(odradek.sim.run, "run_seed",
                        lambda seed, protocol=None, **kw: seen.append(kw) or fakes.fake_run(seed, protocol, **kw))
    rc, _ = sim(capsys, "run", "--seed", "1", "--no-adaptive-heartbeat")
    assert rc == 0 and seen[-1]["adaptive_heartbeat"] is False
    sim(capsys, "run", "--seed", "1")
    assert seen[-1]["adaptive_heartbeat"] is True
