"""`odradek cluster up`: a local etcd and N brokers on loopback, for trying a cluster out.

Each broker is its own process (`odradek broker --node-id N --rack R --metadata etcd://...`)
with its own data directory, so killing one (kill -9, SIGSTOP) is a real broker failure.
The command prints the bootstrap string once every broker listens and stops them all,
then etcd, on Ctrl-C or SIGTERM. `make cluster` runs it with three brokers on racks a, b, c.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

READY_LINE = "odradek broker listening on"


def register(sub, common) -> None:
    c = sub.add_parser("cluster", help="run a local cluster: etcd and brokers on loopback")
    csub = c.add_subparsers(dest="cluster_command", required=True)
    up = csub.add_parser("up", help="start etcd and the brokers; Ctrl-C stops them all")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--racks", default="a,b,c", help="comma-separated racks, assigned round-robin")
    up.add_argument("--data-dir", help="where etcd and the brokers keep their data (default: a temporary directory)")
    up.add_argument("--port", type=int, default=9092, help="the first broker's port; the others follow")
    up.add_argument("--etcd-port", type=int, default=0, help="etcd's client port (default: a free one)")
    up.add_argument("-o", "--override", action="append", metavar="KEY=VALUE", help="a property for every broker")
    up.set_defaults(func=_up)


class LocalCluster:
    """etcd plus broker processes; also what the process-level tests and benchmarks use."""

    def __init__(self, data_dir: Path, brokers: int = 3, racks: list[str] | None = None, port: int = 9092,
                 etcd_port: int = 0, overrides: list[str] | None = None, log_level: str = "INFO") -> None:
        self.data_dir = Path(data_dir)
        self.count = brokers
        self.racks = racks or []
        self.port = port
        self.etcd_port = etcd_port
        self.overrides = list(overrides or [])
        self.log_level = log_level
        self.etcd = None
        self.procs: dict[int, subprocess.Popen] = {}
        self.ports: dict[int, int] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[n]}" for n in sorted(self.ports))

    def rack_of(self, node_id: int) -> str | None:
        return self.racks[(node_id - 1) % len(self.racks)] if self.racks else None

    def start(self, timeout: float = 30.0) -> LocalCluster:
        from ..cluster.etcd_process import EtcdProcess, free_port

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.etcd = EtcdProcess(self.data_dir / "etcd", client_port=self.etcd_port)
        self.etcd.start()
        for n in range(1, self.count + 1):
            self.ports[n] = self.port + n - 1 if self.port else free_port()
            self.start_broker(n, wait=False)
        for n in range(1, self.count + 1):
            self.wait_ready(n, timeout)
        return self

    def command(self, node_id: int) -> list[str]:
        cmd = [sys.executable, "-m", "odradek", "--log-level", self.log_level, "broker", "--node-id", str(node_id),
               "--metadata", self.etcd.url, "--listen", f"127.0.0.1:{self.ports[node_id]}",
               "--data-dir", str(self.data_dir / f"broker-{node_id}")]
        if self.rack_of(node_id):
            cmd += ["--rack", self.rack_of(node_id)]
        for item in self.overrides:
            cmd += ["-o", item]
        return cmd

    def start_broker(self, node_id: int, wait: bool = True, timeout: float = 30.0) -> None:
        log_path = self.data_dir / f"broker-{node_id}.log"
        out = open(log_path, "ab")
        self.procs[node_id] = subprocess.Popen(self.command(node_id), stdout=out, stderr=subprocess.STDOUT)
        out.close()
        self._log_offsets = getattr(self, "_log_offsets", {})
        self._log_offsets[node_id] = log_path.stat().st_size
        if wait:
            self.wait_ready(node_id, timeout)

    def log_of(self, node_id: int) -> str:
        return (self.data_dir / f"broker-{node_id}.log").read_text(errors="replace")

    def wait_ready(self, node_id: int, timeout: float = 30.0) -> None:
        path = self.data_dir / f"broker-{node_id}.log"
        start = getattr(self, "_log_offsets", {}).get(node_id, 0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = path.read_bytes()[start:].decode(errors="replace")
            if READY_LINE in text:
                return
            proc = self.procs[node_id]
            if proc.poll() is not None:
                raise RuntimeError(f"broker {node_id} exited with {proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"broker {node_id} did not start in {timeout}s:\n{self.log_of(node_id)[-3000:]}")

    def signal(self, node_id: int, sig: int) -> None:
        self.procs[node_id].send_signal(sig)

    def kill(self, node_id: int) -> None:
        proc = self.procs[node_id]
        proc.kill()
        proc.wait(10)

    def stop_broker(self, node_id: int, timeout: float = 20.0) -> None:
        proc = self.procs.get(node_id)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)  # a paused broker cannot handle SIGTERM
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def stop(self) -> None:
        threads = [threading.Thread(target=self.stop_broker, args=(n,)) for n in list(self.procs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _up(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="odradek-cluster-"))
    racks = [r.strip() for r in args.racks.split(",") if r.strip()]
    cluster = LocalCluster(data_dir, args.brokers, racks, args.port, args.etcd_port, args.override,
                           (args.log_level or "INFO").upper())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Ctrl-C stops the cluster even when this process was started with SIGINT ignored (a
    # parent that ignores it hands that on through fork and exec).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        cluster.start()
        print(f"etcd: {cluster.etcd.url}", flush=True)
        for n in sorted(cluster.ports):
            print(f"broker {n}: 127.0.0.1:{cluster.ports[n]} rack={cluster.rack_of(n)} "
                  f"(log {data_dir / f'broker-{n}.log'}, pid {cluster.procs[n].pid})", flush=True)
        print(f"bootstrap: {cluster.bootstrap}", flush=True)
        print("Ctrl-C stops the cluster", flush=True)
        while not stop.is_set():
            stop.wait(0.5)
    except KeyboardInterrupt:
        pass
    except (RuntimeError, TimeoutError) as exc:
        print(f"odradek cluster: {exc}", file=sys.stderr)
        cluster.stop()
        return 1
    print("stopping the cluster", flush=True)
    cluster.stop()
    print(f"stopped; data kept in {data_dir}", flush=True)
    return 0


__all__ = ["LocalCluster", "register"]
