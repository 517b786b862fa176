"""Swarm testing: which faults a seed switches on, and how hard.

Theory of operation (swarm testing, Groce et al.): rather than every run suffering every
fault at a fixed rate, each seed draws a subset of fault kinds and a rate for each, so some
seeds see a storm of one fault alone and others a mix. Everything here is drawn from the
seed's RNG; nothing else decides.

Kinds:
  jitter            message delays vary widely (messages of different members overtake
                    each other; one connection stays in order, as TCP keeps it)
  loss              a message is dropped and its connection breaks: the client times out,
                    reconnects and retries
  lost_response     the coordinator processed the request but the answer is lost: the
                    retry is processed a second time (the duplication a real client sees)
  partition         one member is cut off from the coordinator for a while
  client_crash      a member process dies; it is restarted (static members with the same
                    group.instance.id) or replaced, or stays down
  coordinator_crash the coordinator broker loses its memory and reloads its shard from its
                    log (elected again at a higher leader epoch)
  coordinator_move  leadership of `__consumer_offsets` moves to another broker of the ISR,
                    which loads by replay; the old one is a zombie for a while (it still
                    answers what reaches it, but its writes never commit) until it hears
  slow_member       a member takes long, sometimes past the rebalance timeout, to give up
                    partitions (or to rejoin, classic)
  topic_change      partitions are added, topics created, deleted and recreated
  churn             members join and leave gracefully
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

KINDS = ("jitter", "loss", "lost_response", "partition", "client_crash", "coordinator_crash", "coordinator_move",
         "slow_member", "topic_change", "churn")


@dataclass(frozen=True)
class FaultPlan:
    on: frozenset[str] = field(default_factory=frozenset)
    # per-kind rate: probability per message for loss/lost_response, else mean events per
    # simulated minute
    rate: dict[str, float] = field(default_factory=dict)

    @classmethod
    def draw(cls, rng: random.Random) -> FaultPlan:
        on = frozenset(k for k in KINDS if rng.random() < 0.5)
        rate = {
            "loss": rng.choice((0.002, 0.01, 0.03)),
            "lost_response": rng.choice((0.002, 0.01, 0.03)),
            "partition": rng.choice((1.0, 3.0, 6.0)),
            "client_crash": rng.choice((1.0, 3.0, 6.0)),
            "coordinator_crash": rng.choice((0.5, 2.0, 4.0)),
            "coordinator_move": rng.choice((0.5, 2.0, 4.0)),
            "slow_member": rng.choice((0.1, 0.3, 0.6)),  # probability per revocation
            "topic_change": rng.choice((1.0, 2.0, 4.0)),
            "churn": rng.choice((1.0, 3.0, 6.0)),
        }
        return cls(on, {k: v for k, v in rate.items() if k in on})

    def __contains__(self, kind: str) -> bool:
        return kind in self.on

    def label(self) -> str:
        return ",".join(k for k in KINDS if k in self.on)

    def per_message(self, kind: str) -> float:
        return self.rate.get(kind, 0.0) if kind in self.on else 0.0

    def next_gap_ms(self, rng: random.Random, kind: str) -> int | None:
        """Time to the next event of a Poisson process of this kind (None: kind is off)."""
        if kind not in self.on:
            return None
        per_minute = self.rate[kind]
        return max(1, int(rng.expovariate(per_minute / 60_000)))
