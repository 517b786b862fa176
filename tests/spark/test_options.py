"""Unit tests of odradek.spark.options: validation of source and sink options (no Spark)."""

from __future__ import annotations

import pytest

from odradek.spark.offsets import OffsetSpec
from odradek.spark.options import parse_sink_options, parse_source_options

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def src(streaming: bool = False, **opts):
    return parse_source_options({**BOOT, **opts}, streaming=streaming)


def error_of(streaming: bool = False, **opts) -> str:
    with pytest.raises(ValueError) as info:
        src(streaming, **opts)
    return str(info.value)


# ---------------------------------------------------------------- subscription


@pytest.mark.parametrize("streaming", [False, True])
def test_none_of_subscribe_assign_pattern(streaming):
    msg = error_of(streaming)
    for name in ("subscribe", "subscribePattern", "assign"):
        assert name in msg


@pytest.mark.parametrize("pair", [("subscribe", "assign"), ("subscribe", "subscribePattern"),
                                  ("subscribePattern", "assign")])
def test_two_of_subscribe_assign_pattern(pair):
    values = {"subscribe": "t", "subscribePattern": "t.*", "assign": '{"t":[0]}'}
    msg = error_of(**{k: values[k] for k in pair})
    assert "exactly one of" in msg
    for name in ("subscribe", "subscribePattern", "assign"):
        assert name in msg
    # the message says which ones were given
    got = msg.split("(got", 1)[1].lower()
    for name in pair:
        assert name.lower() in got


def test_all_three_given():
    msg = error_of(subscribe="t", subscribePattern="t.*", assign='{"t":[0]}')
    assert "exactly one of" in msg


def test_bootstrap_required():
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        parse_source_options({"subscribe": "t"}, streaming=False)
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        parse_source_options({"kafka.bootstrap.servers": "", "subscribe": "t"}, streaming=False)


def test_subscribe_list_and_option_names_are_case_insensitive():
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": " a, b ,,c "}, streaming=False)
    assert o.bootstrap == "h:1"
    assert o.topics == ["a", "b", "c"]
    assert o.pattern is None and o.assign is None


def test_subscribe_naming_no_topic():
    assert "names no topic" in error_of(subscribe=" , ")


def test_subscribe_pattern():
    assert src(subscribePattern="orders-.*").pattern == "orders-.*"
    assert "subscribePattern is empty" in error_of(subscribePattern="  ")


def test_assign_parsed_sorted_deduplicated():
    o = src(assign='{"t":[2,0,2], "u":[1]}')
    assert o.assign == {"t": [0, 2], "u": [1]}


@pytest.mark.parametrize("bad", ['{"t":[0]', "[0,1]", "{}", '{"t":["x"]}', '{"t": 3}', "t:0"])
def test_assign_malformed(bad):
    msg = error_of(assign=bad)
    assert "option assign must be JSON" in msg


# ---------------------------------------------------------------- offsets options


def test_default_starting_offsets():
    assert src(subscribe="t").starting.kind == "earliest"
    assert src(True, subscribe="t").starting.kind == "latest"
    assert src(subscribe="t").ending.kind == "latest"


def test_starting_latest_refused_in_batch():
    assert "startingOffsets=latest is not allowed in a batch query" in error_of(subscribe="t",
                                                                                 startingOffsets="latest")
    assert src(True, subscribe="t", startingOffsets="LATEST").starting.kind == "latest"


def test_ending_offsets_refused_in_streaming():
    assert "endingOffsets is not allowed in a streaming query" in error_of(True, subscribe="t",
                                                                             endingOffsets="latest")
    assert "endingOffsetsByTimestamp is not allowed in a streaming query" in error_of(
        True, subscribe="t", endingOffsetsByTimestamp='{"t":{"0":5}}')
    # batch takes them
    assert src(subscribe="t", endingOffsets='{"t":{"0":5}}').ending == OffsetSpec("json", {"t": {0: 5}})


def test_ending_earliest_refused():
    assert "endingOffsets=earliest is not allowed" in error_of(subscribe="t", endingOffsets="earliest")


@pytest.mark.parametrize("bad", ['{"t":{"0":1}', "{'t': {'0': 1}}", "[1]", '{"t":[0]}', '{"t":{"x":1}}',
                                 '{"t":{"0":"a"}}', "soonest", ""])
def test_starting_offsets_malformed(bad):
    msg = error_of(subscribe="t", startingOffsets=bad)
    assert "option startingOffsets must be earliest, latest or JSON" in msg


def test_starting_offsets_json():
    o = src(subscribe="t", startingOffsets='{"t":{"0":23,"1":-2,"2":-1}}')
    assert o.starting == OffsetSpec("json", {"t": {0: 23, 1: -2, 2: -1}})


def test_starting_offsets_bad_values():
    assert "bad offset -3 for t-0" in error_of(subscribe="t", startingOffsets='{"t":{"0":-3}}')
    assert "bad offset" in error_of(subscribe="t", startingOffsets='{"t":{"-1":0}}')


def test_starting_timestamps():
    o = src(subscribe="t", startingTimestamp="1700000000000")
    assert o.starting.kind == "timestamp" and o.starting.global_timestamp == 1700000000000
    o = src(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":1700000000000}}')
    assert o.starting == OffsetSpec("timestamp", {"t": {0: 1700000000000}})
    assert "bad offset" in error_of(subscribe="t", startingOffsetsByTimestamp='{"t":{"0":-2}}')
    assert "option startingOffsetsByTimestamp must be" in error_of(subscribe="t",
                                                                   startingOffsetsByTimestamp="earliest")


def test_at_most_one_starting_option():
    msg = error_of(subscribe="t", startingOffsets="earliest", startingTimestamp="5")
    assert "at most one of startingOffsets, startingOffsetsByTimestamp, startingTimestamp" in msg


# ---------------------------------------------------------------- other options


def test_numbers_and_flags():
    o = src(True, subscribe="t", maxOffsetsPerTrigger="100", minPartitions="4", failOnDataLoss="False",
            includeHeaders="TRUE", **{"kafka.group.id": "g1", "groupIdPrefix": "pfx"})
    assert (o.max_offsets_per_trigger, o.min_partitions) == (100, 4)
    assert o.fail_on_data_loss is False and o.include_headers is True
    assert (o.group_id, o.group_id_prefix) == ("g1", "pfx")
    d = src(subscribe="t")
    assert d.max_offsets_per_trigger is None and d.min_partitions is None
    assert d.fail_on_data_loss is True and d.include_headers is False
    assert d.group_id is None and d.group_id_prefix == "spark-kafka-source"


@pytest.mark.parametrize(("key", "value", "text"), [
    ("maxOffsetsPerTrigger", "0", "maxOffsetsPerTrigger must be >= 1"),
    ("maxOffsetsPerTrigger", "ten", "maxOffsetsPerTrigger must be an integer"),
    ("minPartitions", "-1", "minPartitions must be >= 1"),
    ("failOnDataLoss", "maybe", "failOnDataLoss must be true or false"),
    ("includeHeaders", "2", "includeHeaders must be true or false"),
])
def test_bad_numbers_and_flags(key, value, text):
    assert text in error_of(True, subscribe="t", **{key: value})


# ---------------------------------------------------------------- sink


def test_sink_options():
    o = parse_sink_options({**BOOT, "topic": "out", "kafka.compression.type": "zstd", "kafka.linger.ms": "0",
                            "kafka.acks": "1"})
    assert (o.topic, o.compression, o.linger_ms, o.acks) == ("out", "zstd", 0, "1")
    d = parse_sink_options(BOOT)
    assert (d.topic, d.compression, d.linger_ms, d.acks) == (None, "none", 5, "all")


def test_sink_bad_options():
    with pytest.raises(ValueError, match="kafka.bootstrap.servers is required"):
        parse_sink_options({"topic": "t"})
    with pytest.raises(ValueError, match="kafka.compression.type 'brotli'"):
        parse_sink_options({**BOOT, "kafka.compression.type": "brotli"})
    with pytest.raises(ValueError, match="kafka.linger.ms must be >= 0"):
        parse_sink_options({**BOOT, "kafka.linger.ms": "-1"})
