"""API version negotiation (`odradek.client.versions.negotiate`), no network."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from odradek.broker.registry import supported_versions
from odradek.client.errors import KafkaError, UnsupportedApiError
from odradek.client.net import BrokerConnection
from odradek.client.versions import CLIENT_VERSIONS, Api, api_name, negotiate


def _broker(**overrides) -> dict[int, tuple[int, int]]:
    """A broker serving every client API over v0-v20, with per-API overrides (None removes one)."""
    out = {int(api): (0, 20) for api in CLIENT_VERSIONS}
    for name, span in overrides.items():
        key = int(Api[name])
        if span is None:
            out.pop(key)
        else:
            out[key] = span
    return out


def test_picks_the_client_maximum_when_the_broker_goes_higher():
    chosen = negotiate(_broker())
    assert chosen == {api: hi for api, (lo, hi) in CLIENT_VERSIONS.items()}


def test_picks_the_broker_maximum_when_it_is_lower():
    chosen = negotiate(_broker(FETCH=(0, 7), METADATA=(1, 4), PRODUCE=(3, 3)))
    assert chosen[Api.FETCH] == 7
    assert chosen[Api.METADATA] == 4
    assert chosen[Api.PRODUCE] == 3


@pytest.mark.parametrize("api", list(CLIENT_VERSIONS))
def test_min_of_maxima_for_every_api(api):
    lo, hi = CLIENT_VERSIONS[api]
    for broker_hi in range(lo, hi + 3):
        chosen = negotiate({int(api): (0, broker_hi)})[api]
        assert chosen == min(hi, broker_hi)


def test_against_odradeks_own_broker_every_api_negotiates():
    chosen = negotiate(supported_versions())
    bad = {api_name(a): v for a, v in chosen.items() if not isinstance(v, int)}
    assert not bad
    for api, v in chosen.items():
        assert v == min(CLIENT_VERSIONS[api][1], supported_versions()[api][1])


@pytest.mark.parametrize("missing,name", [
    ("CONSUMER_GROUP_HEARTBEAT", "ConsumerGroupHeartbeat"),
    ("FIND_COORDINATOR", "FindCoordinator"),
    ("LIST_GROUPS", "ListGroups"),
    ("OFFSET_COMMIT", "OffsetCommit"),
    ("API_VERSIONS", "ApiVersions"),
])
def test_missing_api_is_an_unsupported_api_error_naming_it(missing, name):
    chosen = negotiate(_broker(**{missing: None}))
    err = chosen[Api[missing]]
    assert isinstance(err, UnsupportedApiError)
    assert isinstance(err, KafkaError)
    assert err.api_name == name and err.api_key == int(Api[missing])
    assert name in str(err) and "not in the broker's ApiVersions" in str(err)
    assert err.code == ErrorCode.unsupported_version and not err.retriable
    # Only that API is unusable.
    assert all(isinstance(v, int) for a, v in chosen.items() if a != Api[missing])


@pytest.mark.parametrize("span", [(0, 2), (10, 12)])
def test_no_overlap_names_both_ranges(span):
    # The client speaks Produce v3-v9.
    err = negotiate(_broker(PRODUCE=span))[Api.PRODUCE]
    assert isinstance(err, UnsupportedApiError)
    text = str(err)
    assert "Produce" in text
    assert f"v{span[0]}-{span[1]}" in text and "v3-9" in text


def test_touching_ranges_overlap():
    assert negotiate(_broker(PRODUCE=(0, 3)))[Api.PRODUCE] == 3
    assert negotiate(_broker(PRODUCE=(9, 12)))[Api.PRODUCE] == 9


def test_empty_broker_makes_every_api_unsupported():
    chosen = negotiate({})
    assert set(chosen) == set(CLIENT_VERSIONS)
    assert all(isinstance(v, UnsupportedApiError) for v in chosen.values())


def test_api_names_follow_kafka():
    assert api_name(68) == "ConsumerGroupHeartbeat"
    assert api_name(10) == "FindCoordinator"
    assert api_name(18) == "ApiVersions"
    assert api_name(60) == "DescribeCluster"
    assert api_name(9999) == "api 9999"


def test_connection_raises_the_error_only_when_the_api_is_used():
    conn = BrokerConnection("127.0.0.1", 1, "c", 1.0)
    conn.versions = negotiate(_broker(LIST_GROUPS=None))
    assert conn.version(Api.METADATA) == CLIENT_VERSIONS[Api.METADATA][1]
    with pytest.raises(UnsupportedApiError, match="ListGroups"):
        conn.version(Api.LIST_GROUPS)
