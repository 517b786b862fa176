"""A local etcd server as a child process: for `odradek cluster up` and for tests.

Theory of operation: etcd is one Go binary (Debian's `etcd-server` package installs it as
/usr/bin/etcd). `EtcdProcess` starts a single-member cluster on loopback with its data in
`data_dir`, waits until its `/health` endpoint answers (the client port serves HTTP as
well as gRPC), and stops it with SIGTERM (then SIGKILL). Tests also need the failures a
real deployment meets: `kill()` (a crash), `pause()`/`resume()` (SIGSTOP/SIGCONT: a
server that stops answering but keeps its connections open, like a long GC pause or a
partition), and a restart on the same ports and data after either.

etcd writes its log to stderr; it goes to a file beside the data directory, whose tail
is quoted when etcd does not come up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ETCD_BINARY = "etcd"
DEFAULT_PATHS = ("/usr/bin/etcd", "/usr/local/bin/etcd")


class EtcdNotFound(RuntimeError):
    pass


class EtcdStartError(RuntimeError):
    pass


def find_etcd() -> str:
    """The etcd server binary: $ODRADEK_ETCD, else `etcd` on PATH, else Debian's path."""
    explicit = os.environ.get("ODRADEK_ETCD")
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise EtcdNotFound(f"ODRADEK_ETCD={explicit!r} is not an executable file")
    found = shutil.which(ETCD_BINARY)
    if found:
        return found
    for path in DEFAULT_PATHS:
        if os.access(path, os.X_OK):
            return path
    raise EtcdNotFound("the etcd server binary was not found: install Debian's `etcd-server` package "
                       "(apt-get install etcd-server; `make test` does), or set ODRADEK_ETCD to its path")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (the usual bind-to-0 probe; racy, good enough locally)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as etcd (Go) binds
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


class EtcdProcess:
    """One etcd member on 127.0.0.1; free ports are picked when a port is 0 and kept across
    restarts, so clients can reconnect to the same address."""

    HOST = "127.0.0.1"

    def __init__(self, data_dir: Path, client_port: int = 0, peer_port: int = 0, *,
                 name: str = "odradek", extra_args: list[str] | tuple[str, ...] = ()) -> None:
        self.data_dir = Path(data_dir)
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        while self.peer_port == self.client_port:
            self.peer_port = free_port()
        self.name = name
        self.extra_args = list(extra_args)
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.etcd.log"
        self.proc: subprocess.Popen | None = None

    # --- addresses -----------------------------------------------------------------------

    @property
    def endpoint(self) -> tuple[str, int]:
        return self.HOST, self.client_port

    @property
    def url(self) -> str:
        """The broker's `--metadata` value for this server."""
        return f"etcd://{self.HOST}:{self.client_port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.HOST}:{self.client_port}"

    # --- lifecycle -----------------------------------------------------------------------

    def command(self) -> list[str]:
        peer = f"http://{self.HOST}:{self.peer_port}"
        return [
            find_etcd(),
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.name}={peer}",
            *self.extra_args,
        ]

    def start(self, timeout: float = 10.0) -> EtcdProcess:
        """Start etcd (again, after stop/kill, on the same ports and data) and wait until
        it answers. Raises EtcdStartError with the end of its log if it does not."""
        if self.running:
            return self
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        for port in (self.client_port, self.peer_port):
            # Else /health could be answered by whoever holds the port, not by our etcd.
            if not port_free(self.HOST, port):
                raise EtcdStartError(f"cannot start etcd: {self.HOST}:{port} is in use")
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # a ^C to the tests is not etcd's
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EtcdStartError(f"etcd exited with status {self.proc.returncode}:\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.05)
        self.kill()
        raise EtcdStartError(f"etcd did not answer on {self.client_url} within {timeout:g} s:\n{self.log_tail()}")

    def healthy(self, timeout: float = 1.0) -> bool:
        # No proxy: an http_proxy in the environment must not intercept loopback.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.client_url}/health", timeout=timeout) as resp:
                return resp.status == 200 and b"true" in resp.read()
        except (OSError, urllib.error.URLError):
            return False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (a paused etcd is resumed first so it can act on it), then SIGKILL."""
        if not self.running:
            self.proc = None
            return
        assert self.proc is not None
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: a crash; the data directory keeps what etcd fsynced."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._signal(signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: etcd keeps its sockets but answers nothing until `resume`."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no etcd log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> EtcdProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EtcdProcess({self.url}, data_dir={str(self.data_dir)!r}, running={self.running})"
