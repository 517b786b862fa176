"""The pieces of `odradek produce|consume` that kafka-console-producer/consumer share:
Kafka's LineMessageReader and DefaultMessageFormatter."""

from __future__ import annotations

import pytest

from odradek.client import ConsumerRecord
from odradek.commands.stream import LineError, LineReader, RecordFormatter


def test_line_reader_plain_key_headers():
    assert LineReader().parse(b"a\tb", 1) == (None, b"a\tb", [])
    assert LineReader(parse_key=True).parse(b"k\tv\tw", 1) == (b"k", b"v\tw", [])
    reader = LineReader(parse_key=True, key_separator=b"::", parse_headers=True, headers_delimiter=b"|",
                        null_marker=b"~")
    assert reader.parse(b"h1:x,h2:~|~::v", 1) == (None, b"v", [("h1", b"x"), ("h2", None)])
    assert reader.parse(b"~|k::~", 1) == (b"k", None, [])


def test_line_reader_errors():
    with pytest.raises(LineError, match="No key separator found on line number 3: 'novalue'"):
        LineReader(parse_key=True).parse(b"novalue", 3)
    assert LineReader(parse_key=True, ignore_error=True).parse(b"novalue", 3) == (None, b"novalue", [])
    with pytest.raises(LineError, match="No header key separator found"):
        LineReader(parse_headers=True).parse(b"nocolon\tv", 1)
    assert LineReader(parse_headers=True).parse(b"a:1,\tv", 1) == (None, b"v", [("a", b"1")])
    with pytest.raises(LineError, match="Header keys should not be equal to the null marker '~'"):
        LineReader(parse_headers=True, null_marker=b"~").parse(b"~:1\tv", 1)
    with pytest.raises(ValueError, match="headers.delimiter and headers.separator may not be equal"):
        LineReader(headers_delimiter=b",")
    with pytest.raises(ValueError, match="null.marker and key.separator may not be equal"):
        LineReader(null_marker=b"\t")


def _record(**kw) -> ConsumerRecord:
    base = {"topic": "t", "partition": 2, "offset": 7, "timestamp": 1000, "timestamp_type": 0, "key": b"k",
            "value": b"v", "headers": (), "leader_epoch": 0}
    return ConsumerRecord(**{**base, **kw})


def test_record_formatter_is_kafkas_default_formatter():
    assert RecordFormatter()(_record()) == b"v\n"
    full = RecordFormatter(print_timestamp=True, print_partition=True, print_offset=True, print_headers=True,
                           print_key=True, key_separator=b"|")
    assert full(_record(headers=(("a", b"1"), ("b", None)))) == b"CreateTime:1000|Partition:2|Offset:7|a:1,b:null|k|v\n"
    assert full(_record(timestamp=-1, timestamp_type=1, key=None)) == \
        b"NO_TIMESTAMP|Partition:2|Offset:7|NO_HEADERS|null|v\n"
    assert RecordFormatter(print_key=True, print_value=False, line_separator=b";")(_record()) == b"k;"
    assert RecordFormatter(print_value=False)(_record()) == b""
    upper = RecordFormatter(value_decoder=bytes.upper, null_literal=b"nil")
    assert upper(_record(value=None)) == b"NIL\n"
