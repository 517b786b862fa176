"""Connection limits as a pure policy: who may connect, what a connection may hold, when
it must be closed. Sans-I/O (as h11 and protocol/framing.py): no sockets, no clock (every
method that needs the time takes `now`, in seconds), no event loop. The asyncio server
(server.py) is only the driver: it asks this module whether to read a socket and how
many bytes, tells it what arrived and what was written, and closes what it is told to.

Kafka's SocketServer/Selector are the model; each rule cites the Kafka setting it
implements. The state of one connection is a handful of flags and counters:

    reading  <->  paused          (the driver pauses the transport whenever
                                   `read_allowance()` is 0 and resumes it when it is not)
       paused because:  muted      responses unsent beyond UNSENT_HIGH (write side full)
                        backlog    BACKLOG_BYTES of whole frames wait to be handled
                        pool       the pool is full and the frame arriving has no grant
                        EOF / bad  the peer closed, or sent an invalid size prefix
    in flight                      a request is being handled (the next waits, in order)
    closed                         by the peer, by a framing error, or by expiry:
                        idle       connections.max.idle.ms without a byte read or written
                        timeout    a frame not whole within request.timeout.ms of its
                                   first byte (the clock stops while *we* are not reading)

Admission (`ConnectionTable.admit`). Kafka refuses connections over
`max.connections.per.ip` (or its entry in `max.connections.per.ip.overrides`) by closing
them as soon as they are accepted, and stops accepting while `max.connections` are open.
asyncio offers no supported way to stop accepting on a listening socket, so odradek
closes a connection over either limit at once, right after accepting it; the client sees
the connection closed before any response, which every Kafka client handles as a
connection failure with backoff. Refusals are logged at INFO at most once a second, with
the count of those not logged (`LogThrottle`), so a connection storm cannot flood the log.

Memory (`MemoryPool`, Kafka's `queued.max.request.bytes` and its MemoryPool). The pool
counts request payload bytes (Kafka's unit: the 4-byte size prefix lives in a separate
buffer and is not pooled) held by all connections: whole frames waiting to be handled,
the frame being handled, and the bytes received of the frame still arriving. Nothing is
allocated for a declared size, and nothing is charged for it either: a client declaring
100 MB and sending 10 bytes holds 10 bytes (and request.timeout.ms ends it). When the
pool has no room left, every frame still arriving stops being read, as Kafka mutes a
channel whose receive it cannot allocate, until memory is released. Each read is sized
by the driver to what the pool allows (`read_allowance`), so the total never exceeds the
limit; the only bytes outside it are size prefixes (at most 4 per frame, as in Kafka).

Counting received bytes alone could deadlock: partial frames could fill the pool, none
able to complete. So frames without a grant may fill only the shared part of the pool,
`queued.max.request.bytes - socket.request.max.bytes`; the rest, room for one largest
frame, is handed out only as grants of the bytes a blocked frame still needs, oldest
blocked frame first (Kafka's allocation of the whole frame, but only for frames that are
actually waiting for memory). When the granted frames have completed and whole frames
have been handled, what is left fits in the shared part, so the oldest blocked frame's
grant always fits. With the pool at its minimum (socket.request.max.bytes) there is no
shared part: every frame is read in two steps, size prefix then a granted payload,
exactly like Kafka's NetworkReceive.

Per connection, bytes held are at most one partial frame (never more than
socket.request.max.bytes, which the FrameReader enforces on the size prefix) plus
BACKLOG_BYTES of whole frames plus one read. A client that pipelines requests without
reading the responses is muted as Kafka mutes a channel with a response unsent: once
UNSENT_HIGH bytes of responses are queued the driver stops handling its frames and
stops reading its socket until the transport drains; its backlog then stops growing and
connections.max.idle.ms closes it if it never reads.
"""

from __future__ import annotations

import ipaddress
import math
import sys
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol.framing import FrameReader, _Sentinel

# Largest read handed to the transport at once (asyncio's and uvloop's own read size).
READ_SIZE = 256 * 1024
# Whole frames a connection may hold unhandled before it stops being read. Kafka holds
# one (it mutes a channel after each complete receive); a few hundred small pipelined
# requests are cheap and save a pause/resume per request.
BACKLOG_BYTES = 64 * 1024
# Responses queued in the transport beyond which a connection is muted (its frames are
# no longer handled and its socket no longer read) until the transport drains.
UNSENT_HIGH = 256 * 1024


def normalize_host(host: str) -> str:
    """A canonical IP string, so that overrides and peers compare equal (an IPv4-mapped
    IPv6 peer of a dual-stack listener counts as its IPv4 address)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


@dataclass(frozen=True)
class Limits:
    """The connection settings, normalised as the policy uses them."""

    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)  # normalised IP -> count
    idle_s: float | None = 600.0  # None: never (Kafka: a negative connections.max.idle.ms)
    request_timeout_s: float = 30.0
    max_frame: int = 104857600  # socket.request.max.bytes
    pool_bytes: int | None = 2 * 104857600  # None: unlimited

    @classmethod
    def from_config(cls, config: Any, overrides: Mapping[str, int] | None = None) -> Limits:
        """From a BrokerConfig. `overrides` replaces config.max_connections_per_ip_overrides
        when the caller has resolved host names to addresses (I/O, so not done here)."""
        queued = config.queued_max_request_bytes
        # Kafka: queued.max.request.bytes <= 0 means no limit (MemoryPool.NONE). Kafka
        # refuses a limit below socket.request.max.bytes; odradek raises it to that, the
        # least that lets the largest frame allowed be received at all.
        pool = None if queued <= 0 else max(queued, config.socket_request_max_bytes)
        idle = config.connections_max_idle_ms
        raw = overrides if overrides is not None else config.max_connections_per_ip_overrides
        return cls(
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            per_ip_overrides={normalize_host(h): n for h, n in raw.items()},
            idle_s=None if idle < 0 else idle / 1000,  # Kafka: negative disables idle expiry
            request_timeout_s=config.request_timeout_ms / 1000,
            max_frame=config.socket_request_max_bytes,
            pool_bytes=pool,
        )

    def per_ip_limit(self, host: str) -> int:
        return self.per_ip_overrides.get(host, self.max_connections_per_ip)

    def check_interval(self) -> float:
        """How often the driver should look for expired connections: a tenth of the
        shortest timeout, between 50 ms and 1 s."""
        shortest = min(self.request_timeout_s, self.idle_s if self.idle_s is not None else math.inf)
        return min(1.0, max(0.05, shortest / 10))


class LogThrottle:
    """At most one message per `interval` seconds; counts the ones it held back."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._next = -math.inf
        self._held = 0

    def ready(self, now: float) -> int | None:
        """None: do not log now. Otherwise log, mentioning the returned count of messages
        suppressed since the last one."""
        if now < self._next:
            self._held += 1
            return None
        held, self._held = self._held, 0
        self._next = now + self.interval
        return held


class MemoryPool:
    """Request payload bytes held over all connections (queued.max.request.bytes).

    `used` counts the bytes actually held plus what is granted to blocked frames. Reads
    of frames without a grant may only fill the shared part of the pool (`limit -
    headroom`); the headroom, one largest frame, is only ever handed out as grants, to
    frames blocked for memory, oldest first. Hence the pool never deadlocks: once the
    granted frames complete and the whole frames are handled, the bytes left (partial
    frames without a grant) fit in the shared part, so the oldest blocked frame's grant
    fits in the headroom whatever its size.
    """

    def __init__(self, limit: int | None, max_frame: int) -> None:
        self.limit = limit
        self.headroom = min(max_frame, limit) if limit is not None else 0
        self.used = 0
        self.peak = 0
        self._waiters: deque[ConnectionState] = deque()  # blocked for memory, oldest first
        self._readers: set[ConnectionState] = set()  # receiving a frame without a grant
        self._changed: list[ConnectionState] = []

    @property
    def available(self) -> int:
        """Bytes neither held nor granted (sys.maxsize without a limit)."""
        return sys.maxsize if self.limit is None else self.limit - self.used

    @property
    def waiting(self) -> int:
        """Connections not read because their frame is waiting for memory."""
        return len(self._waiters)

    def shared_room(self) -> int:
        """Bytes a frame without a grant may still read."""
        if self.limit is None:
            return READ_SIZE
        return max(0, self.limit - self.headroom - self.used)

    def take_changed(self) -> list[ConnectionState]:
        """Connections blocked or granted memory since the last call: the driver pauses
        or resumes their transports (ConnectionState.wants_read says which)."""
        changed, self._changed = self._changed, []
        return changed

    def _adjust(self, delta: int) -> None:
        self.used += delta
        self.peak = max(self.peak, self.used)
        if delta > 0:
            if self._readers and self.shared_room() == 0:
                # Kafka mutes every channel whose receive cannot be allocated; here every
                # frame still arriving without a grant stops being read, now, so no read
                # can take the pool past its limit.
                blocked = sorted(self._readers, key=lambda st: st.partial_since_order)
                self._readers.clear()
                for st in blocked:
                    st.waiting = True
                    self._waiters.append(st)
                    self._changed.append(st)
                self._grant_waiters()
        elif delta < 0:
            self._grant_waiters()

    def _block(self, state: ConnectionState) -> None:
        self._readers.discard(state)
        state.waiting = True
        self._waiters.append(state)
        self._changed.append(state)
        self._grant_waiters()

    def _grant_waiters(self) -> None:
        # First come, first served: a large frame at the head is not overtaken by small
        # ones, so it cannot starve.
        while self._waiters:
            head = self._waiters[0]
            if self.limit is not None and self.used + head._need() > self.limit:
                break
            self._waiters.popleft()
            self._changed.append(head)
            head._grant()

    def _dequeue(self, state: ConnectionState) -> None:
        self._readers.discard(state)
        try:
            self._waiters.remove(state)
        except ValueError:
            pass


class ConnectionState:
    """One connection's framing, memory charge, flags and clocks."""

    def __init__(self, table: ConnectionTable, host: str, now: float) -> None:
        self.table = table
        self.pool = table.pool
        self.host = host
        self.framer = FrameReader(table.limits.max_frame)
        self.owner: Any = None  # the driver's object for this connection
        self.closed = False
        self.in_flight = False
        self.write_blocked = False  # muted: the transport holds UNSENT_HIGH bytes or more
        self.waiting = False  # blocked for memory, in the pool's queue for a grant
        self.last_activity = now
        self._reading = True  # what the driver last did with the transport
        self._paused_at: float | None = None
        self._partial_since: float | None = None  # first byte of the frame still arriving
        self._unsent = 0
        self._in_flight_payload = 0
        self._charge = 0
        self._granted_frame = -1  # frames_received when the arriving frame got its grant
        self.partial_since_order = 0  # tie-breaker: who started its frame first

    # --- what the driver asks -------------------------------------------------------

    def wants_read(self) -> bool:
        return not (self.closed or self.write_blocked or self.waiting) and self.framer.readable(BACKLOG_BYTES)

    def read_allowance(self) -> int:
        """Bytes the next read may take (0: the transport must not be read)."""
        if not self.wants_read():
            return 0
        f = self.framer
        size = f.partial_size
        room = self.pool.shared_room()
        if size is None:
            # At a frame boundary or inside a size prefix: the prefix is never pooled
            # (Kafka's 4-byte size buffer), so it may always be read.
            n = max(4 - f.partial_bytes, room)
        elif self._granted_frame == f.frames_received:
            n = size + 4 - f.partial_bytes + room
        else:
            n = room
        return min(n, READ_SIZE)

    @property
    def has_frames(self) -> bool:
        return self.framer.complete_bytes > 0

    def deadline(self) -> float | None:
        """When the frame still arriving times out, if the socket is being read."""
        if self._partial_since is None or not self._reading:
            return None
        return self._partial_since + self.table.limits.request_timeout_s

    # --- what the driver tells ------------------------------------------------------

    def received(self, data: bytes, now: float) -> None:
        """Bytes read from the socket (b"": the peer closed its side)."""
        if self.closed:
            return
        f = self.framer
        before = f.frames_received
        f.receive_data(data)
        if data:
            self.last_activity = now
        # request.timeout.ms runs from the first byte of each frame.
        if not f.partial_bytes or f.failed:
            self._partial_since = None
        elif self._partial_since is None or f.frames_received != before:
            self._partial_since = now
            self.table._frames_started += 1
            self.partial_since_order = self.table._frames_started
        self._recharge()

    def next_frame(self) -> bytes | _Sentinel:
        """The next whole frame (then in flight until `frame_done`), NEED_DATA or CLOSED;
        raises RemoteProtocolError for a framing error."""
        f = self.framer
        backlog = f.complete_bytes
        frame = f.next_frame()
        if isinstance(frame, bytes):
            self.in_flight = True
            self._in_flight_payload = len(frame)
            # The charge is unchanged (a whole frame became the one in flight); only a
            # backlog falling below BACKLOG_BYTES changes whether the connection reads.
            if backlog >= BACKLOG_BYTES > f.complete_bytes:
                self._recharge()
        return frame

    def frame_done(self, now: float) -> None:
        """The request taken by next_frame has been handled: its bytes are released."""
        self.in_flight = False
        released, self._in_flight_payload = self._in_flight_payload, 0
        self.last_activity = now
        if released and not self.closed:
            self._charge -= released
            self.pool._adjust(-released)

    def wrote(self, now: float) -> None:
        self.last_activity = now

    def set_write_blocked(self, blocked: bool) -> None:
        """The transport's unsent responses went above UNSENT_HIGH (muted) or drained."""
        self.write_blocked = blocked
        self._recharge()

    def note_unsent(self, unsent: int, now: float) -> None:
        """Bytes queued in the transport; a change is write progress (Kafka counts
        writes as activity for connections.max.idle.ms)."""
        if unsent != self._unsent:
            self._unsent = unsent
            self.last_activity = now

    def set_reading(self, reading: bool, now: float) -> None:
        """The driver paused or resumed the transport. While we do not read, a partial
        frame's clock stops: the delay is ours, not the client's."""
        if reading == self._reading:
            return
        self._reading = reading
        if not reading:
            self._paused_at = now
        else:
            if self._partial_since is not None and self._paused_at is not None:
                self._partial_since += now - self._paused_at
            self._paused_at = None

    def expiry(self, now: float) -> str | None:
        """Why this connection must be closed at `now`, or None."""
        if self.closed:
            return None
        limits = self.table.limits
        # Kafka SocketServer: connections.max.idle.ms. A request being handled (a long
        # poll, a join waiting for its group) or a frame waiting for pool memory is the
        # broker's doing, not idleness.
        if (
            limits.idle_s is not None
            and not self.in_flight
            and not self.waiting
            and now - self.last_activity >= limits.idle_s
        ):
            return f"idle for more than connections.max.idle.ms={round(limits.idle_s * 1000)}"
        deadline = self.deadline()
        if deadline is not None and now >= deadline:
            return (
                f"request frame incomplete after request.timeout.ms={round(limits.request_timeout_s * 1000)}"
                f" ({self.framer.partial_bytes} bytes received)"
            )
        return None

    def close(self) -> None:
        """The connection is gone: release everything it held."""
        if self.closed:
            return
        self.closed = True
        self.waiting = False
        self.pool._dequeue(self)
        self.table._forget(self)
        charge, self._charge = self._charge, 0
        if charge:
            self.pool._adjust(-charge)

    # --- the memory charge ----------------------------------------------------------

    @property
    def granted(self) -> bool:
        """The frame arriving has memory granted for the rest of its bytes."""
        return self._granted_frame == self.framer.frames_received and self.framer.partial_size is not None

    def _need(self) -> int:
        """Payload bytes of the arriving frame not received yet."""
        f = self.framer
        return f.partial_size + 4 - f.partial_bytes

    def _grant(self) -> None:
        self._granted_frame = self.framer.frames_received
        self.waiting = False
        self._recharge()

    def _recharge(self) -> None:
        if self.closed:
            return
        f, pool = self.framer, self.pool
        size = f.partial_size
        charge = f.complete_payload + self._in_flight_payload
        receiving = False
        if size is not None:
            if self._granted_frame == f.frames_received:
                charge += size
            else:
                charge += f.partial_bytes - 4
                # Only a frame being read now competes for the pool's room; a muted
                # connection or one with a backlog is not read anyway.
                receiving = not (self.waiting or f.eof or self.write_blocked or f.complete_bytes >= BACKLOG_BYTES)
        if pool.limit is None:  # no pool: nothing to track but the total
            receiving = False
        elif receiving:
            pool._readers.add(self)
        else:
            pool._readers.discard(self)
        delta, self._charge = charge - self._charge, charge
        if delta:
            pool._adjust(delta)
        if receiving and self in pool._readers and pool.shared_room() == 0:
            pool._block(self)  # its size prefix has come but there is no room for the rest


class ConnectionTable:
    """All open connections: admission by count, the shared memory pool, expiry."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.pool = MemoryPool(limits.pool_bytes, limits.max_frame)
        self._states: set[ConnectionState] = set()
        self._per_ip: Counter[str] = Counter()
        self._frames_started = 0
        self.refusals = LogThrottle(1.0)
        self.timeouts = LogThrottle(1.0)

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self) -> Iterator[ConnectionState]:
        return iter(list(self._states))

    def count(self, host: str) -> int:
        return self._per_ip[normalize_host(host)]

    def admit(self, host: str, now: float) -> tuple[ConnectionState | None, str | None]:
        """(state, None) for an admitted connection, or (None, why it is refused)."""
        host = normalize_host(host)
        limits = self.limits
        # Kafka ConnectionQuotas: the per-IP limit (or its override) first, then the total.
        per_ip = limits.per_ip_limit(host)
        if self._per_ip[host] >= per_ip:
            which = "max.connections.per.ip.overrides" if host in limits.per_ip_overrides else "max.connections.per.ip"
            return None, f"{which}={per_ip} reached for {host}"
        if len(self._states) >= limits.max_connections:
            return None, f"max.connections={limits.max_connections} reached"
        state = ConnectionState(self, host, now)
        self._states.add(state)
        self._per_ip[host] += 1
        return state, None

    def _forget(self, state: ConnectionState) -> None:
        if state in self._states:
            self._states.discard(state)
            self._per_ip[state.host] -= 1
            if not self._per_ip[state.host]:
                del self._per_ip[state.host]

    def expired(self, now: float) -> list[tuple[ConnectionState, str]]:
        """Connections to close at `now` and why."""
        out = []
        for state in self._states:
            reason = state.expiry(now)
            if reason is not None:
                out.append((state, reason))
        return out
