"""protocol.shape: the pre-parse walk must end exactly where kio's reader ends."""

from __future__ import annotations

import uuid

import pytest

from odradek.broker.registry import supported_versions
from odradek.protocol.messages import _reader, request_class
from odradek.protocol.shape import _skim, _skim_plan
from tests.broker.fuzz_frames import World, encode_request, seeds

TOPIC_ID = uuid.UUID(int=5)


def _world():
    return World("t", TOPIC_ID, "c", "d", TOPIC_ID, "g", b"\x00" * 61, b"\x00\x01", b"\x00\x00")


@pytest.mark.parametrize("api_key", sorted(supported_versions()))
def test_skim_ends_where_kio_ends_for_every_version(api_key):
    """A disagreement would refuse well-formed requests (or miss a length): for every
    version, bodies filled, with nulls where allowed, and with tagged fields set."""
    lo, hi = supported_versions()[api_key]
    for version in range(lo, hi + 1):
        cls = request_class(api_key, version)
        for name, tree in seeds(api_key, version, _world()):
            frame = encode_request(api_key, version, tree)
            _, offset = _reader(cls.__header_schema__)(frame, 0)
            _, size = _reader(cls)(frame, offset)
            assert _skim(_skim_plan(cls), frame, offset) == offset + size, (api_key, version, name)
