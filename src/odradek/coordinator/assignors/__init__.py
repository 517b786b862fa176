"""Server-side assignors (KIP-848 "Server Side Mode"): pure functions from an
`AssignmentSpec` to a target assignment, looked up by name in `ASSIGNORS`.

Each assignor module has ``NAME`` and ``assign(spec) -> {member id: {topic id:
frozenset(partitions)}}``; see `spec` for the contract and each module for its algorithm.
"""

from __future__ import annotations

from types import ModuleType

from . import range as range_assignor
from . import uniform
from .spec import Assignment, AssignmentSpec, AssignorError, MemberSpec, TopicSpec

ASSIGNORS: dict[str, ModuleType] = {uniform.NAME: uniform, range_assignor.NAME: range_assignor}

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "AssignmentSpec",
    "AssignorError",
    "MemberSpec",
    "TopicSpec",
    "range_assignor",
    "uniform",
]
