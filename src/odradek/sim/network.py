"""The simulated network between members and the coordinator brokers: connections of frames.

Theory of operation: each member talks to the broker it takes for its coordinator over a
`Link`, a simulated TCP connection to that broker carrying real request and response
frames (encoded and decoded by the client's `WireConnection` and the broker's request
parser). A link keeps order in each direction, as TCP does: a frame is delivered no
earlier than the one sent before it on the same link. Delays are drawn per frame (wide
with the "jitter" fault), so frames of different members overtake each other. Faults act
on links:

  loss          the frame is dropped and the link breaks; the client notices only when the
                request times out (a silent peer), reconnects and retries
  lost_response the coordinator's answer is dropped and the link breaks: the request was
                processed, and the client's retry is processed again
  partition     every frame between one member and the coordinator is dropped for a while;
                links break when their requests time out

A broken link delivers nothing more in either direction: frames the coordinator had not
read are gone with the connection, as a closed socket's unread bytes are. The network never
invents a duplicate frame; duplicates reach the coordinator the way they reach a real one,
as retries of requests whose answers were lost.

Brokers replicate `__consumer_offsets` over the same network (sim/cluster.py): a
follower's fetch takes a delay drawn as a frame's is (`delay`), and is neither lost nor
cut off: the faults above are between members and brokers.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from odradek.client.wire import WireConnection

from .faults import FaultPlan

class Link:
    """One connection of one member to one broker."""

    __slots__ = ("alive", "broker", "id", "last_down", "last_up", "member", "wire")

    def __init__(self, member: str, link_id: int, broker: int = 0) -> None:
        self.id = link_id
        self.member = member
        self.broker = broker
        self.alive = True
        self.wire = WireConnection(client_id=member)
        self.last_up = 0  # delivery time of the last frame towards the coordinator
        self.last_down = 0  # ... and towards the member


class Network:
    def __init__(self, rng: random.Random, plan: FaultPlan, schedule: Callable[[int, str, Callable[[], None]], None]
                 ) -> None:
        self.rng = rng
        self.plan = plan
        self.schedule = schedule  # (time, label, action)
        self.cut_until: dict[str, int] = {}  # member -> end of its partition
        self.faults_active = True
        self.frames = 0
        self.dropped = 0
        self.links = 0

    def new_link(self, member: str, broker: int = 0) -> Link:
        self.links += 1
        return Link(member, self.links, broker)

    def delay(self) -> int:
        """One frame's delay (ms)."""
        if "jitter" in self.plan and self.faults_active:
            # Mostly fast, sometimes very slow: heavy-tailed.
            return 1 + int(self.rng.paretovariate(1.2) * 2) if self.rng.random() < 0.9 else self.rng.randint(50, 1500)
        return self.rng.randint(1, 5)

    def cut(self, member: str, until: int) -> None:
        self.cut_until[member] = max(until, self.cut_until.get(member, 0))

    def is_cut(self, member: str, now: int) -> bool:
        return self.cut_until.get(member, -1) > now

    def _lost(self, kind: str) -> bool:
        return self.faults_active and self.rng.random() < self.plan.per_message(kind)

    def send_up(self, link: Link, now: int, deliver: Callable[[], None], what: str = "request") -> None:
        """A request frame from the member; `deliver` runs at the coordinator if it arrives."""
        self._send(link, now, deliver, "loss", "last_up", f"{link.member} -> b{link.broker}: {what} (link {link.id})")

    def send_down(self, link: Link, now: int, deliver: Callable[[], None], what: str = "response") -> None:
        """A response frame from the coordinator."""
        self._send(link, now, deliver, "lost_response", "last_down",
                   f"b{link.broker} -> {link.member}: {what} (link {link.id})")

    def _send(self, link: Link, now: int, deliver: Callable[[], None], fault: str, last: str, label: str) -> None:
        self.frames += 1
        if not link.alive or self.is_cut(link.member, now) or self._lost(fault):
            self.dropped += 1
            link.alive = False
            return
        at = max(now + self.delay(), getattr(link, last))  # TCP: in order on one connection
        setattr(link, last, at)

        def arrive() -> None:
            if link.alive and not self.is_cut(link.member, at):
                deliver()

        self.schedule(at, label, arrive)
