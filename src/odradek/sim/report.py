"""What a sweep's table says, per protocol: numbers (`summarize`), a Markdown table for
SIMULATION.md (`markdown`) and a PNG comparing the protocols (`render_png`).

The per-membership-change ratios only count seeds that had a membership change: a seed
with none reports 0.0 for them (SeedResult), which would drag every median towards zero.
Convergence times only count the seeds that converged (-1 means never); how many did is
the converged percentage beside them.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from .result import PROTOCOLS


def replay_command(seed: int, protocol: str | None = None, adaptive_heartbeat: bool = True) -> str:
    """The one line that reruns a seed exactly. The seed draws its protocol even when told
    one, so naming the protocol it ran replays it just the same; a seed of a sweep's 'off'
    rows ran without the adaptive heartbeat interval."""
    cmd = f"odradek sim run --seed {seed}"
    if protocol in PROTOCOLS:
        cmd += f" --protocol {protocol}"
    return cmd if adaptive_heartbeat else cmd + " --no-adaptive-heartbeat"


def rows_of(table) -> list[dict]:
    """Rows as dicts from a pyarrow Table, a Parquet path or a list of dicts."""
    if isinstance(table, (str, os.PathLike)):
        import pyarrow.parquet as pq

        table = pq.read_table(table)
    if hasattr(table, "to_pylist"):
        return table.to_pylist()
    return list(table)


def failing(rows: list[dict]) -> list[dict]:
    """The seeds that did not pass: a violation, or no convergence."""
    return [r for r in rows if r["violations"] > 0 or not r["converged"]]


def summarize(table) -> list[dict]:
    """One dict per protocol (PROTOCOLS' order first, then any other, e.g. "unknown" for
    seeds that crashed before picking one). Statistics of an empty set are None."""
    rows = rows_of(table)
    by_protocol: dict[tuple[str, bool], list[dict]] = {}
    for row in rows:
        by_protocol.setdefault((row["protocol"], _adaptive(row)), []).append(row)
    names = {p for p, _ in by_protocol}
    order = [p for p in PROTOCOLS if p in names] + sorted(names - set(PROTOCOLS))
    both = _both(rows)
    out = []
    for p in order:
        for adaptive in (True, False):
            if (p, adaptive) in by_protocol:
                s = _summary(_label(p, adaptive, both), by_protocol[(p, adaptive)])
                s["adaptive_heartbeat"] = adaptive
                out.append(s)
    return out


def _adaptive(row: dict) -> bool:
    # A table from before issue 22 has no adaptive_heartbeat column: it was off then.
    return row.get("adaptive_heartbeat", False)


def _both(rows: list[dict]) -> bool:
    """The sweep ran odradek's adaptive heartbeat interval on and off (`--adaptive-heartbeat both`)."""
    return len({_adaptive(r) for r in rows}) > 1


def _label(protocol: str, adaptive: bool, both: bool) -> str:
    """A row's protocol as the summary and the plot name it: with the extension on and off
    in one table, which of the two it is."""
    return f"{protocol} (adaptive heartbeat {'on' if adaptive else 'off'})" if both else protocol


def _summary(protocol: str, rows: list[dict]) -> dict:
    kinds: Counter[str] = Counter()
    for r in rows:
        kinds.update(k for k in r["violation_kinds"].split(",") if k)
    convergence = [r["convergence_ms"] for r in rows if r["converged"] and r["convergence_ms"] >= 0]
    changed = [r for r in rows if r["member_events"] > 0]
    moved = [r["moved_per_member_event"] for r in changed]
    rebalances = [r["rebalances_per_member_event"] for r in changed]
    return {
        "protocol": protocol,
        "seeds": len(rows),
        "seeds_with_violations": sum(1 for r in rows if r["violations"] > 0),
        "violation_kinds": dict(sorted(kinds.items())),
        "converged_pct": 100.0 * sum(1 for r in rows if r["converged"]) / len(rows),
        "convergence_ms_median": _quantile(convergence, 0.5),
        "convergence_ms_p95": _quantile(convergence, 0.95),
        "convergence_ms_max": max(convergence, default=None),
        "partition_movements_mean": _mean([r["partition_movements"] for r in rows]),
        "moved_per_member_event_median": _quantile(moved, 0.5),
        "moved_per_member_event_p95": _quantile(moved, 0.95),
        "rebalances_per_member_event_median": _quantile(rebalances, 0.5),
        "rebalances_per_member_event_p95": _quantile(rebalances, 0.95),
        "revocations_mean": _mean([r["revocations"] for r in rows]),
        "commits_accepted": sum(r["commits_accepted"] for r in rows),
        "commits_rejected": sum(r["commits_rejected"] for r in rows),
        # The EOS workload (issue 19); a table from before it has no such columns.
        "txn_committed": sum(r.get("txn_committed", 0) for r in rows),
        "txn_aborted": sum(r.get("txn_aborted", 0) for r in rows),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _quantile(values: list[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default), without numpy."""
    if not values:
        return None
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def markdown(summary: list[dict]) -> str:
    """A GitHub Markdown table, one row per protocol (with a transactions column when the
    EOS workload ran)."""
    eos = any(s.get("txn_committed") or s.get("txn_aborted") for s in summary)
    header = ["protocol", "seeds", "with violations", "violation kinds", "converged",
              "convergence ms (median / p95 / max)", "moved per member event (median / p95)",
              "rebalances per member event (median / p95)", "partitions moved (mean)", "revocations (mean)",
              "commits (accepted / rejected)"] + (["transactions (committed / aborted)"] if eos else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    for s in summary:
        kinds = ", ".join(f"{k} {n}" for k, n in s["violation_kinds"].items()) or "-"
        cells = [
            s["protocol"], str(s["seeds"]), str(s["seeds_with_violations"]), kinds, f"{s['converged_pct']:.1f}%",
            " / ".join(_num(s[f"convergence_ms_{k}"]) for k in ("median", "p95", "max")),
            " / ".join(_num(s[f"moved_per_member_event_{k}"], 2) for k in ("median", "p95")),
            " / ".join(_num(s[f"rebalances_per_member_event_{k}"], 2) for k in ("median", "p95")),
            _num(s["partition_movements_mean"], 1), _num(s["revocations_mean"], 1),
            f"{s['commits_accepted']:,} / {s['commits_rejected']:,}",
        ] + ([f"{s['txn_committed']:,} / {s['txn_aborted']:,}"] if eos else [])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_png(table, path: str | os.PathLike) -> Path:
    """Two box plots side by side, one box per protocol: convergence time (converged
    seeds; log scale when it spans more than two decades) and partitions moved per
    membership change (seeds that had one). Whiskers at the 5th and 95th percentiles, so
    the p95 of the summary is where a whisker ends."""
    # The object-oriented API with the Agg canvas: no pyplot, so no global backend switch
    # and no GUI, whatever the caller's matplotlib is set up for.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = rows_of(table)
    protocols = [s["protocol"] for s in summarize(rows)]
    both = _both(rows)
    rows = [{**r, "protocol": _label(r["protocol"], _adaptive(r), both)} for r in rows]
    convergence = {p: [r["convergence_ms"] for r in rows
                       if r["protocol"] == p and r["converged"] and r["convergence_ms"] >= 0] for p in protocols}
    moved = {p: [r["moved_per_member_event"] for r in rows if r["protocol"] == p and r["member_events"] > 0]
             for p in protocols}
    total = {p: sum(1 for r in rows if r["protocol"] == p) for p in protocols}

    fig = Figure(figsize=(12, 5), layout="constrained")
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    _boxes(left, convergence, total, "converged")
    left.set_title("convergence after the last fault")
    left.set_ylabel("simulated ms")
    positive = [v for vs in convergence.values() for v in vs if v > 0]
    if positive and max(positive) > 100 * min(positive):
        left.set_yscale("log")
    _boxes(right, moved, total, "seeds with a membership change")
    right.set_title("partitions moved per membership change")
    right.set_ylabel("partitions / member event")
    fig.suptitle(f"odradek sim sweep: {len(rows):,} seeds")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    return path


def _boxes(ax, data: dict[str, list[float]], total: dict[str, int], counted: str) -> None:
    labels = [f"{p}\n{len(vs):,} / {total[p]:,}" for p, vs in data.items()]
    ax.set_xlabel(f"protocol ({counted} / all seeds)")
    # matplotlib draws nothing for an empty list but still takes its slot, so the
    # protocols stay in the same places in both panels.
    ax.boxplot(list(data.values()), whis=(5, 95), showfliers=True, flierprops={"markersize": 2, "alpha": 0.3})
    ax.set_xticks(range(1, len(labels) + 1), labels)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="y", alpha=0.3)
