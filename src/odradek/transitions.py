"""The one exception every transition table raises (h11's LocalProtocolError).

The state machines keep their tables where they live (coordinator/classic/model.py,
coordinator/consumer/model.py, client/classic.py, client/membership.py,
replication/leader.py), keyed by (state, input) as h11 keys them. An input with no entry
for the current state is our own code breaking its protocol -- never the peer's, whose
mistakes are Kafka error codes -- and raises this, with what the table was for.
"""

from __future__ import annotations


class IllegalTransition(AssertionError):
    """An input the current state has no entry for in its transition table."""
