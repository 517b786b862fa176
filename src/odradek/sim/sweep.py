"""Run many seeds and write their results as one Parquet table (`odradek sim sweep`).

Theory of operation: seeds are independent and deterministic, so a sweep is a plain map
seed -> row. With a Spark master the seeds are parallelize()d into slices and each Python
worker runs a whole slice (mapPartitions), so the simulator's imports are paid once per
slice rather than once per seed; without one, a ProcessPoolExecutor does the same with
chunks. Rows come back to the driver (some 25 plain values each: 10,000 seeds are a few
MB) and are written as one Parquet file sorted by seed, so two sweeps of the same seeds
give equal tables except for `wall_s`.

A seed whose run raises becomes a row with violations=1 and kind "crash": one bad seed
must not cost the results of the others. A worker process that dies outright (a
segfault, the OOM killer) breaks a process pool; its chunks are retried once seed by
seed in a fresh pool, and a seed that kills that one too gets a crash row.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import fields
from functools import partial
from pathlib import Path

from .result import COLUMNS, PROTOCOLS, SeedResult

RunFn = Callable[[int, "str | None"], SeedResult]
PARQUET = "sweep.parquet"
UNKNOWN_PROTOCOL = "unknown"  # a crashed seed's protocol when the seed was to pick it
ADAPTIVE = ("on", "off", "both")

# In-flight chunks per local worker: enough to keep every worker busy, few enough that
# memory stays flat however many seeds there are.
_IN_FLIGHT_PER_WORKER = 2
_MAX_CHUNK = 50


def sweep(seeds: Iterable[int], *, protocol: str | None = None, master: str | None = "local[2]",
          out_dir: str | os.PathLike, run: RunFn | None = None, slices: int | None = None,
          adaptive: str = "on") -> Path:
    """Run `run(seed, protocol)` for every seed and write `out_dir/sweep.parquet` (one row
    per seed, columns `result.COLUMNS`, sorted by seed); return its path.

    master: a Spark master URL, or None to run in this machine's processes. run defaults
    to `odradek.sim.run.run_seed`, looked up now (not at import) so it can be replaced.
    slices: Spark partitions (default 4 per core Spark reports) or local chunks.
    adaptive: odradek's adaptive heartbeat interval "on", "off", or "both" (every seed run
    twice, one row each: the summary compares the two, issue 22); the default run only.
    """
    if adaptive not in ADAPTIVE:
        raise ValueError(f"adaptive must be one of {', '.join(ADAPTIVE)}, not {adaptive!r}")
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    seeds = sorted({int(s) for s in seeds})
    if not seeds:
        raise ValueError("no seeds to run")
    if run is None:
        from . import run as run_module

        run = run_module.run_seed
        runs = [partial(run, adaptive_heartbeat=flag) if not flag else run
                for flag in ((True, False) if adaptive == "both" else (adaptive == "on",))]
    elif adaptive != "on":
        raise ValueError("adaptive applies to the default run only")
    else:
        runs = [run]
    started = time.monotonic()
    where = f"Spark master {master}" if master else f"{os.cpu_count() or 1} local processes"
    _progress(f"sweep: {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}) on {where}"
              + (f", adaptive heartbeat {adaptive}" if adaptive != "on" else ""))
    rows = []
    for one in runs:
        if master:
            rows += _spark_rows(seeds, one, protocol, master, slices)
        else:
            rows += _local_rows(seeds, one, protocol, slices)
    path = write_parquet(rows, Path(out_dir) / PARQUET)
    failed = sum(1 for r in rows if r[_VIOLATIONS] > 0 or not r[_CONVERGED])
    _progress(f"sweep: {len(rows)} seeds done in {time.monotonic() - started:.1f} s, "
              f"{failed} failed (a violation or no convergence); {path}")
    return path


def run_batch(seeds: Iterable[int], run: RunFn, protocol: str | None) -> list[tuple]:
    """Rows (tuples in COLUMNS order) for `seeds`: what one Spark partition or one local
    chunk does. Module-level so Spark and multiprocessing pickle it by reference."""
    return [run_one(seed, run, protocol) for seed in seeds]


def run_one(seed: int, run: RunFn, protocol: str | None) -> tuple:
    started = time.monotonic()
    try:
        row = run(seed, protocol).as_row()
    except Exception as exc:  # noqa: BLE001 - any failure of the run is the seed's result
        return crash_row(seed, protocol, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
    return tuple(row[c] for c in COLUMNS)


def crash_row(seed: int, protocol: str | None, message: str, wall_s: float = 0.0) -> tuple:
    result = SeedResult(seed=seed, protocol=protocol or UNKNOWN_PROTOCOL, faults="", members=0, partitions=0,
                        sim_ms=0, steps=0, violations=1, violation_kinds="crash", first_violation=message,
                        wall_s=wall_s)
    row = result.as_row()
    return tuple(row[c] for c in COLUMNS)


_VIOLATIONS = COLUMNS.index("violations")
_SEED = COLUMNS.index("seed")
_CONVERGED = COLUMNS.index("converged")


def schema():
    """The Parquet schema, from SeedResult's field types (its annotations are strings)."""
    import pyarrow as pa

    types = {"int": pa.int64(), "str": pa.string(), "bool": pa.bool_(), "float": pa.float64()}
    declared = {f.name: f.type for f in fields(SeedResult)}
    declared.update(rebalances_per_member_event="float", moved_per_member_event="float")
    out = []
    for name in COLUMNS:
        if declared[name] not in types:  # a new field type must be mapped here, not guessed
            raise TypeError(f"SeedResult.{name}: no Parquet type for {declared[name]!r}")
        out.append(pa.field(name, types[declared[name]], nullable=False))
    return pa.schema(out)


def write_parquet(rows: list[tuple], path: Path) -> Path:
    """One Parquet file, sorted by seed; written beside and renamed, so a sweep that dies
    leaves the previous table or none, never half a one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sorted(rows, key=lambda r: r[_SEED])
    columns = {name: [r[i] for r in rows] for i, name in enumerate(COLUMNS)}
    table = pa.Table.from_pydict(columns, schema=schema())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return path


def _spark_rows(seeds: list[int], run: RunFn, protocol: str | None, master: str, slices: int | None) -> list[tuple]:
    from pyspark import SparkContext

    import odradek.spark

    # getOrCreate hands back a session someone else made (a notebook, the test suite):
    # stop only the one made here.
    existed = SparkContext._active_spark_context is not None
    spark = odradek.spark.session(master, app_name="odradek-sim-sweep")
    try:
        sc = spark.sparkContext
        n = slices or sc.defaultParallelism * 4
        n = max(1, min(n, len(seeds)))
        return sc.parallelize(seeds, n).mapPartitions(partial(run_batch, run=run, protocol=protocol)).collect()
    finally:
        if not existed:
            spark.stop()


def _local_rows(seeds: list[int], run: RunFn, protocol: str | None, slices: int | None) -> list[tuple]:
    import pickle
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    try:  # here, rather than as one failure per chunk in the pool's feeder thread
        pickle.dumps(run)
    except Exception as exc:  # noqa: BLE001 - PicklingError, AttributeError, TypeError: all mean the same
        raise TypeError(f"run must be picklable (a module-level function) to reach worker processes: {exc}") from None
    workers = os.cpu_count() or 1
    size = -(-len(seeds) // slices) if slices else max(1, min(_MAX_CHUNK, len(seeds) // (workers * 8)))
    # A stack of (chunk, suspect), popped from the end. When a worker dies, every chunk in
    # flight dies with the pool; its seeds come back as one-seed suspects, each run alone,
    # so the seed that dies again is the one that kills, and only it gets a crash row.
    queue = [(seeds[i:i + size], False) for i in range(0, len(seeds), size)][::-1]
    rows: list[tuple] = []
    report = _Progress(len(seeds))
    pending: dict = {}

    def settle(future, chunk: list[int], suspect: bool) -> bool:
        """Take a finished chunk's rows; True when its worker died."""
        exc = future.exception()
        if exc is None:
            rows.extend(future.result())
            report.add(len(chunk))
            return False
        died = isinstance(exc, BrokenProcessPool)
        if suspect:
            why = "worker process died: " if died else ""
            rows.append(crash_row(chunk[0], protocol, f"{why}{type(exc).__name__}: {exc}"))
            report.add(1)
        else:
            queue.extend(([seed], True) for seed in reversed(chunk))
        return died

    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        # Bounded: each chunk is submitted once, and each seed at most once more as a
        # suspect (a suspect is settled whether it dies or not).
        while queue or pending:
            while queue and len(pending) < workers * _IN_FLIGHT_PER_WORKER:
                if pending and (queue[-1][1] or any(s for _, s in pending.values())):
                    break  # a suspect runs alone
                chunk, suspect = queue.pop()
                pending[pool.submit(run_batch, chunk, run, protocol)] = (chunk, suspect)
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            broken = False
            for future in done:
                broken |= settle(future, *pending.pop(future))
            if broken:
                wait(pending)  # the chunks still in flight died with the pool
                for future in list(pending):
                    settle(future, *pending.pop(future))
                pool.shutdown(wait=True)
                pool = ProcessPoolExecutor(max_workers=workers)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return rows


class _Progress:
    """A line at each tenth of the seeds, at most: a sweep of 10,000 seeds should not
    scroll a terminal away."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.next_tenth = 1

    def add(self, n: int) -> None:
        self.done += n
        if self.total >= 100 and self.done * 10 >= self.next_tenth * self.total:
            self.next_tenth = self.done * 10 // self.total + 1
            _progress(f"sweep: {self.done}/{self.total} seeds")


def _progress(message: str) -> None:
    print(f"odradek: {message}", file=sys.stderr, flush=True)
