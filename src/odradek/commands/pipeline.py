"""`odradek pipeline demo`: a Spark Structured Streaming job on odradek, end to end.

The logic lives in `odradek.spark.pipeline` (testable without the command line); this
module is the argparse subtree, the live progress display (rich, on stderr) and the
summary table (stdout). Without --bootstrap-server the demo starts its own broker on a
free loopback port with a temporary data directory and stops it at the end; it does not
read $ODRADEK_BOOTSTRAP, so a stray environment variable cannot send the demo's topics to
a real cluster. Needs `pip install odradek[spark]` and a Java 17+ runtime.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from . import CommandError, bootstrap_servers, note, positive, print_table


def _duration(value: str) -> str:
    from odradek.spark.pipeline import parse_duration

    try:
        parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _positive_float(value: str) -> float:
    try:
        n = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return n


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("pipeline", help="Spark Structured Streaming demo on odradek (needs odradek[spark] and Java)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    d = actions.add_parser(
        "demo", help="clicks -> Spark (JSON, windowed page counts, watermark) -> Parquet and topic page-counts",
        description="Produce synthetic click events to topic 'clicks' for --duration seconds, count them per page "
                    "and event-time window in a Spark streaming query (odradek source, watermark, append mode), "
                    "write the finished windows to Parquet under --output and to topic 'page-counts' (odradek "
                    "sink), show progress, then print a summary. Exits 0 when every window was written.")
    d.add_argument("--bootstrap-server", metavar="HOST:PORT", type=bootstrap_servers, default=None,
                   help="use this broker (default: start an embedded one on a free loopback port, stopped at the "
                        "end)")
    d.add_argument("--master", default="local[2]",
                   help="Spark master URL (default local[2]); with a cluster, odradek must be installed on the "
                        "executors and --output must be on storage they share")
    d.add_argument("--partitions", type=positive, default=4, help="partitions of topic clicks (default 4)")
    d.add_argument("--rate", type=_positive_float, default=2000.0, help="click events per second (default 2000)")
    d.add_argument("--duration", type=_positive_float, default=30.0,
                   help="seconds of producing (default 30); the run takes Spark's start-up and the last "
                        "windows longer")
    d.add_argument("--window", type=_duration, default="10 seconds",
                   help="event-time window of the counts (default '10 seconds', so a short demo writes several; "
                        "'1 minute' gives per-minute counts)")
    d.add_argument("--watermark", type=_duration, default="10 seconds",
                   help="how late an event may be and still count (default '10 seconds')")
    d.add_argument("--trigger", type=_duration, default="1 second", help="micro-batch interval (default '1 second')")
    d.add_argument("--output", type=Path, default=Path("pipeline-output"),
                   help="Parquet output directory, one batch=N directory per micro-batch (default ./pipeline-output; "
                        "an earlier demo's output there is replaced, any other non-empty directory refused)")
    d.add_argument("--group", default="odradek-pipeline-demo",
                   help="kafka.group.id the source commits to (default odradek-pipeline-demo)")
    d.add_argument("--seed", type=int, help="seed for the synthetic events (default: random)")
    d.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise CommandError("the pipeline needs PySpark: pip install 'odradek[spark]' (make demo does it)") from None
    from odradek.spark.pipeline import PipelineConfig, PipelineError, run_pipeline

    cfg = PipelineConfig(bootstrap=args.bootstrap_server, master=args.master, partitions=args.partitions,
                         rate=args.rate, duration=args.duration, window=args.window, watermark=args.watermark,
                         trigger=args.trigger, output=args.output, group_id=args.group,
                         seed=args.seed)
    display = _Display(cfg)
    # SIGTERM unwinds like Ctrl-C, so the query, Spark and the embedded broker are stopped.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        result = run_pipeline(cfg, on_status=display.update)
    except PipelineError as exc:
        raise CommandError(str(exc)) from None
    except Exception as exc:
        if _is_spark_error(exc):  # e.g. no Java: JAVA_GATEWAY_EXITED
            raise CommandError(f"Spark: {exc}") from None
        raise
    finally:
        display.close()
        signal.signal(signal.SIGTERM, previous)
    _summary(cfg, result)
    return 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _is_spark_error(exc: BaseException) -> bool:
    mod = type(exc).__module__
    return mod.startswith(("pyspark", "py4j"))


class _Display:
    """Phase changes as `odradek:` lines until the stream runs, then a rich Live panel on
    stderr (a terminal redraws it; elsewhere only its last state is printed)."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.phase: str | None = None
        self.live = None
        self.progress = None

    def update(self, s) -> None:
        if s.phase != self.phase:
            self.phase = s.phase
            if self.live is None and s.phase in ("starting", "starting Spark"):
                note(f"{s.phase} (master {self.cfg.master})..." if s.phase == "starting Spark"
                     else f"starting the pipeline on {self.cfg.bootstrap or 'an embedded broker'}")
            elif self.live is None and s.phase == "producing":
                self._start_live()
        if self.live is not None:
            self.progress.update(self.task, completed=min(s.elapsed, self.cfg.duration), phase=s.phase)
            self.live.update(self._render(s))

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.progress import BarColumn, Progress, TextColumn

        console = Console(stderr=True, highlight=False)
        self.progress = Progress(TextColumn("[bold]{task.fields[phase]}"), BarColumn(),
                                 TextColumn("{task.completed:.0f}/{task.total:.0f} s of producing"),
                                 console=console)
        self.task = self.progress.add_task("produce", total=self.cfg.duration, phase="producing")
        self.live = Live(console=console, refresh_per_second=4, transient=False)
        self.live.start()

    def _render(self, s):
        from rich.console import Group
        from rich.table import Table

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim")
        grid.add_column(justify="right")
        grid.add_column(style="dim")
        grid.add_column(justify="right")
        lag = "-" if s.lag is None else f"{s.lag:,}"
        grid.add_row("events produced", f"{s.produced:,}", "micro-batches", f"{s.batches:,}")
        grid.add_row("records read", f"{s.input_rows:,}", "input rows/s", f"{s.input_rate:,.0f}")
        grid.add_row("window rows out", f"{s.rows_out:,}", "processed rows/s", f"{s.processed_rate:,.0f}")
        grid.add_row("group lag", lag, "watermark", s.watermark or "-")
        return Group(self.progress, grid)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def _summary(cfg, r) -> None:
    lag_parts = " ".join(f"{p}:{lag}" for p, lag in sorted(r.lag_by_partition.items()))
    rows = [
        ("broker", f"{r.bootstrap} ({'embedded, stopped' if r.embedded_broker else 'external'})"),
        ("events produced", f"{r.produced} in {r.produce_seconds:.1f} s ({r.produced / max(r.produce_seconds, 1e-9):.0f}/s)"),
        ("records in", f"{r.records_in} (read by Spark from {cfg.source_topic}, end-of-stream marker included)"),
        ("records out", f"{r.rows_out} window rows (Parquet {r.parquet_rows}, {cfg.sink_topic} {r.sink_records})"),
        ("micro-batches", str(r.batches)),
        ("group lag", f"{r.lag} ({cfg.group_id} on {cfg.source_topic}; per partition {lag_parts})"),
        ("throughput", (f"{r.throughput:.0f} records/s over {r.stream_seconds:.1f} s of streaming "
                        f"(peak batch {r.peak_processed_rate:.0f} rows/s)")),
        ("output", str(r.output.resolve())),
    ]
    print_table(["METRIC", "VALUE"], rows)
    sys.stdout.flush()
    problems = []
    if r.rows_out == 0:
        problems.append("no window rows were written")
    if r.parquet_rows != r.rows_out:
        problems.append(f"Parquet holds {r.parquet_rows} rows, {r.rows_out} were written")
    if r.sink_records < r.rows_out:
        problems.append(f"{cfg.sink_topic} got {r.sink_records} records, {r.rows_out} were written")
    if r.records_in < r.produced:
        problems.append(f"Spark read {r.records_in} records of the {r.produced} produced")
    if problems:
        raise CommandError("; ".join(problems))
