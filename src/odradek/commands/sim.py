"""`odradek sim run|sweep`: the deterministic simulator of the group protocols.

`run` replays one seed and says what happened; a failure prints its checker reports, the
command that replays it and the last events. `sweep` runs many seeds (on Spark, or in
local processes with --no-spark) into DIR/sweep.parquet, DIR/sweep.png and
DIR/summary.md, prints the summary and the replay command of the failing seeds. Both
exit 1 when a seed failed (a violation, or no convergence), so they can gate CI.

Unlike the client commands, everything here is the command's output and goes to stdout;
the sweep's progress goes to stderr. The simulator is looked up when the command runs
(`odradek.sim.run.run_seed`), so `odradek --help` does not load it.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from . import CommandError, non_negative, positive

TRACE_LINES = 40  # of a failure's trace tail, without --trace
LISTED_FAILURES = 20


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from odradek.sim.result import PROTOCOLS

    p = sub.add_parser("sim", help="deterministic simulation of the group protocols under faults")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = actions.add_parser("run", help="run one seed; on a failure print its reports, replay command and trace",
                           description="Run one seed of the simulator. Exits 1 on a checker violation or when the "
                                       "group did not converge, 0 otherwise.")
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--protocol", choices=PROTOCOLS, help="group protocol (default: the seed picks one)")
    r.add_argument("--trace", action="store_true", help="print every traced event, not only a failure's last ones")
    r.add_argument("--no-adaptive-heartbeat", dest="adaptive_heartbeat", action="store_false",
                   help="every member heartbeats at the regular interval, as in Kafka (replays a sweep's 'off' row)")
    r.set_defaults(func=_run)

    s = actions.add_parser(
        "sweep", help="run many seeds (on Spark); write sweep.parquet, sweep.png and summary.md",
        description="Run seeds START..START+COUNT-1 and write DIR/sweep.parquet (one row per seed), DIR/sweep.png "
                    "(the protocols compared) and DIR/summary.md. Exits 1 if any seed failed.")
    s.add_argument("--seeds", type=positive, required=True, metavar="COUNT", help="how many seeds")
    s.add_argument("--start", type=non_negative, default=0, help="first seed (default 0)")
    s.add_argument("--protocol", choices=PROTOCOLS, help="run every seed with this protocol (default: each seed "
                                                         "picks one)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--spark", metavar="MASTER", default="local[*]",
                       help="Spark master URL (default local[*]); on a cluster, odradek must be installed on the "
                            "executors")
    where.add_argument("--no-spark", dest="spark", action="store_const", const=None,
                       help="run in local processes, one per CPU, without Spark")
    s.add_argument("--out", type=Path, default=Path("sim-out"), metavar="DIR", help="output directory "
                                                                                    "(default ./sim-out)")
    s.add_argument("--adaptive-heartbeat", choices=("on", "off", "both"), default="on",
                   help="odradek's short heartbeat interval for reconciling members: on (the broker's default), "
                        "off (Kafka's behaviour), or both: every seed runs twice and the summary compares "
                        "convergence (default on)")
    s.set_defaults(func=_sweep)


def _run(args: argparse.Namespace) -> int:
    from odradek.sim import run as sim_run
    from odradek.sim.report import replay_command

    try:
        r = sim_run.run_seed(args.seed, args.protocol, trace=args.trace, adaptive_heartbeat=args.adaptive_heartbeat)
    except Exception:  # noqa: BLE001 - a simulator crash is a failing seed: say how to replay it
        traceback.print_exc()
        replay = replay_command(args.seed, args.protocol, args.adaptive_heartbeat)
        print(f"seed {args.seed} crashed\nreplay: {replay}")
        return 1
    converged = f"converged in {r.convergence_ms} ms" if r.converged else "did not converge"
    print(f"seed {r.seed}: {r.protocol}, faults {r.faults or 'none'}, {r.members} members, {r.partitions} partitions, "
          f"{r.steps} steps, {r.sim_ms} ms simulated, {converged}, {r.partition_movements} partitions moved, "
          f"{r.revocations} revoked, {r.rebalances} rebalances for {r.member_events} member events, "
          f"commits {r.commits_accepted} accepted / {r.commits_rejected} rejected")
    failed = r.violations > 0 or not r.converged
    if failed:
        if r.violations:
            print(f"{r.violations} violation(s): {r.violation_kinds or '?'}")
            print(f"first: {r.first_violation}")
        else:
            print("no violation, but the group did not converge after the faults stopped")
        print(f"replay: {replay_command(r.seed, r.protocol, r.adaptive_heartbeat)}")
    if args.trace or failed:
        tail = r.trace_tail if args.trace else r.trace_tail[-TRACE_LINES:]
        if tail:
            print(f"last {len(tail)} events:")
            for line in tail:
                print(f"  {line}")
    return 1 if failed else 0


def _sweep(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        raise CommandError("the sweep needs pyarrow and matplotlib: pip install 'odradek[sim]'") from None
    if args.spark:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            raise CommandError("--spark needs PySpark: pip install 'odradek[spark]' (or use --no-spark)") from None
    from odradek.sim import report
    from odradek.sim.sweep import sweep

    try:
        path = sweep(range(args.start, args.start + args.seeds), protocol=args.protocol, master=args.spark,
                     out_dir=args.out, adaptive=args.adaptive_heartbeat)
    except Exception as exc:
        if type(exc).__module__.startswith(("pyspark", "py4j")):  # e.g. no Java: JAVA_GATEWAY_EXITED
            raise CommandError(f"Spark: {exc}") from None
        raise
    rows = report.rows_of(path)
    text = report.markdown(report.summarize(rows))
    (args.out / "summary.md").write_text(text)
    report.render_png(rows, args.out / "sweep.png")
    print(text, end="")
    bad = report.failing(rows)
    print(f"\n{len(bad)} of {len(rows)} seeds failed; table {path}, plot {args.out / 'sweep.png'}")
    for r in bad[:LISTED_FAILURES]:
        what = f"{r['violation_kinds'] or 'violation'}: {r['first_violation']}" if r["violations"] \
            else "did not converge"
        print(f"  seed {r['seed']} ({r['protocol']}) {_one_line(what)}")
        print(f"    {report.replay_command(r['seed'], r['protocol'], r.get('adaptive_heartbeat', False))}")
    if len(bad) > LISTED_FAILURES:
        print(f"  ... and {len(bad) - LISTED_FAILURES} more (violations > 0 or converged = false in {path})")
    sys.stdout.flush()
    return 1 if bad else 0


def _one_line(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."
