"""Helpers shared by the benchmark scripts: table printing and the machine/commit line."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: int = 1) -> None:
    """Print rows under header; the first `left` columns are left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells) -> str:
        return "  " + "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    print(line(header))
    for r in rows:
        print(line(r))


def git_revision() -> str:
    """The commit the broker code was measured at, '+dirty' when src/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], check=False,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (head or "?") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_line(extra: str = "") -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"nproc={n}  cpu={model}  python={platform.python_version()} ({platform.python_implementation()})  "
            f"{extra + '  ' if extra else ''}loadavg at start {load}  odradek {git_revision()}")
