"""Coordinator records: round trips, Kafka's binary layout, KIP-1251 tagged epochs, bad input."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.coordinator import records as R
from odradek.coordinator.classic.model import ClassicGroup, ClassicMember
from odradek.coordinator.consumer.model import ClassicMeta, ConsumerMember, MemberState

T1 = uuid.UUID(int=0xF00)
T2 = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")


def _member(**kw) -> ConsumerMember:
    return ConsumerMember(**{
        "member_id": "m-1", "instance_id": "inst", "rack_id": "rack-a", "client_id": "cid",
        "client_host": "/10.0.0.1", "subscribed_topic_names": ("bar", "foo"), "subscribed_topic_regex": "fo.*",
        "server_assignor": "range", "rebalance_timeout_ms": 300_000, "member_epoch": 7,
        "previous_member_epoch": 6, "state": MemberState.UNREVOKED_PARTITIONS,
        "assigned": {T1: {0: 5, 2: 7}, T2: {1: 3}}, "pending_revocation": {T1: {1: 4}},
        **kw,
    })


def _classic_group() -> ClassicGroup:
    g = ClassicGroup("cg", 1_700_000_000_000)
    g.protocol_type, g.protocol_name, g.generation = "consumer", "range", 4
    g.add(ClassicMember("a-1", "inst-a", "cid", "/10.0.0.1", 30_000, 10_000, "consumer",
                        (("range", b"\x00\x01sub"), ("roundrobin", b"rr")), assignment=b"\x00\x00asg"))
    g.add(ClassicMember("b-1", None, "cid", "/10.0.0.2", -1, 6_000, "consumer", (("range", b""),)))
    return g


def _all_records() -> list[R.CoordinatorRecord]:
    m = _member()
    bare = ConsumerMember("m-2")  # every nullable field None, nothing assigned
    empty_classic = ClassicGroup("cg")
    return [
        R.classic_group(_classic_group()),
        R.classic_group(empty_classic),
        R.classic_group_tombstone("cg"),
        R.member_metadata("g", _member(classic=ClassicMeta(10_000, (("range", b"\x00\x03x"), ("cooperative-sticky", b""))))),
        R.offset_commit("g", "foo", 3, 42, 5, "meta", 1_700_000_000_000),
        R.offset_commit("g", "foo", 0, -1, -1, "", 0),
        R.offset_tombstone("g", "foo", 3),
        R.group_epoch("g", 12),
        R.group_tombstone("g"),
        R.partition_metadata("g", [(T1, "foo", 3), (T2, "bar", 10)]),
        R.partition_metadata("g", []),
        R.partition_metadata_tombstone("g"),
        R.member_metadata("g", m),
        R.member_metadata("g", bare),
        R.member_tombstone("g", "m-1"),
        R.target_epoch("g", 11),
        R.target_epoch_tombstone("g"),
        R.target_member("g", "m-1", {T1: {2, 0}, T2: frozenset({1}), uuid.UUID(int=1): set()}),
        R.target_member("g", "m-1", {}),
        R.target_member_tombstone("g", "m-1"),
        R.current_assignment("g", m),
        R.current_assignment("g", bare),
        R.current_assignment_tombstone("g", "m-1"),
        R.regular_expression("g", "fo.*|ba[rz]", {"foo", "bar"}, 1_700_000_000_123, 1_700_000_000_456),
        R.regular_expression("g", "nothing-yet.*", (), -1, 0),
        R.regular_expression_tombstone("g", "fo.*|ba[rz]"),
        R.group_epoch("grüße-☃-日本", 1),  # non-ASCII keys (int16 length counts UTF-8 bytes)
    ]


@pytest.mark.parametrize("rec", _all_records(), ids=lambda r: f"type{r.type}-{'tomb' if r.value is None else 'val'}")
def test_every_record_type_round_trips(rec):
    key, value = R.encode(rec)
    assert (value is None) == (rec.value is None)
    out = R.decode(key, value)
    assert out == rec
    assert out.group_id == rec.key[0]


def test_all_nine_record_types_are_covered_by_the_round_trip():
    # Types 1-8, and 16: Kafka 4.0's ConsumerGroupRegularExpression (asynchronous regex resolution).
    assert {r.type for r in _all_records()} == {1, 2, 3, 4, 5, 6, 7, 8, 16}
    assert set(R.KEY_SCHEMAS) == set(R.VALUE_SCHEMAS) == {1, 2, 3, 4, 5, 6, 7, 8, 16}


def test_regular_expression_record_is_kafkas_layout():
    # ConsumerGroupRegularExpressionKey: "validVersions": "16", GroupId and RegularExpression as
    # int16-length strings. ConsumerGroupRegularExpressionValue v0, flexible: Topics []string,
    # Version int64, Timestamp int64, then the tagged-field count.
    key, value = R.encode(R.regular_expression("g", "t.*", ["tb", "ta"], 7, 9))
    assert key == struct.pack(">hh", 16, 1) + b"g" + struct.pack(">h", 3) + b"t.*"
    assert value == struct.pack(">h", 0) + b"\x03" + b"\x03ta" + b"\x03tb" + struct.pack(">qq", 7, 9) + b"\x00"
    assert R.decode(key, None) == R.regular_expression_tombstone("g", "t.*")


def test_classic_group_record_is_kafkas_group_metadata_value_v3():
    key, value = R.encode(R.classic_group(_classic_group()))
    assert key == struct.pack(">hh", 2, 2) + b"cg"
    assert struct.unpack_from(">hh", value, 0) == (3, len("consumer"))  # value version 3, then protocolType
    out = R.decode(key, value).value
    assert out["generation"] == 4 and out["protocol"] == "range" and out["leader"] == "a-1"
    # Only the selected protocol's metadata is stored, as Kafka does.
    assert [(m["member_id"], m["group_instance_id"], m["subscription"], m["assignment"]) for m in out["members"]] == [
        ("a-1", "inst-a", b"\x00\x01sub", b"\x00\x00asg"), ("b-1", None, b"", b"")]


def test_classic_member_metadata_is_tagged_field_zero():
    plain = R.encode(R.member_metadata("g", _member()))[1]
    tagged = R.encode(R.member_metadata("g", _member(classic=ClassicMeta(10_000, (("range", b"x"),)))))[1]
    assert plain.endswith(b"\x00") and tagged.startswith(plain[:-1])
    assert tagged[len(plain) - 1] == 1 and tagged[len(plain)] == 0  # one tagged field, tag 0
    assert R.decode(*R.encode(R.member_metadata("g", _member())))[2]["classic_member_metadata"] is None


def test_member_records_carry_every_member_field():
    m = _member()
    meta = R.decode(*R.encode(R.member_metadata("g", m))).value
    assert meta == {
        "instance_id": "inst", "rack_id": "rack-a", "client_id": "cid", "client_host": "/10.0.0.1",
        "subscribed_topic_names": ["bar", "foo"], "subscribed_topic_regex": "fo.*", "server_assignor": "range",
        "rebalance_timeout_ms": 300_000, "classic_member_metadata": None,
    }
    cur = R.decode(*R.encode(R.current_assignment("g", m))).value
    assert (cur["member_epoch"], cur["previous_member_epoch"], cur["state"]) == (7, 6, 1)
    assert R.read_partitions(cur["assigned_partitions"], 7) == m.assigned
    assert R.read_partitions(cur["partitions_pending_revocation"], 7) == m.pending_revocation


# --- binary layout -----------------------------------------------------------------------


@pytest.mark.parametrize("rec", _all_records(), ids=lambda r: f"type{r.type}")
def test_key_starts_with_int16_record_type_then_int16_length_strings(rec):
    key, _ = R.encode(rec)
    assert struct.unpack_from(">h", key, 0)[0] == rec.type
    group = rec.key[0].encode()
    assert struct.unpack_from(">h", key, 2)[0] == len(group)
    assert key[4:4 + len(group)] == group


def test_offset_commit_key_exact_bytes():
    key, _ = R.encode(R.offset_commit("g", "foo", 3, 0, -1, "", 0))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x03foo" + b"\x00\x00\x00\x03"


def test_offset_commit_value_is_version_3_non_flexible_exact_bytes():
    _, value = R.encode(R.offset_commit("g", "foo", 3, 42, 5, "meta", 1_700_000_000_000))
    expected = (
        b"\x00\x03"                          # version 3 (int16)
        + struct.pack(">q", 42)              # offset
        + struct.pack(">i", 5)               # leader epoch
        + b"\x00\x04meta"                    # metadata: int16 length + bytes
        + struct.pack(">q", 1_700_000_000_000)  # commit timestamp
    )
    assert value == expected
    assert len(value) == 2 + 8 + 4 + 2 + 4 + 8  # no tagged fields, no trailing bytes


def test_empty_offset_metadata_is_an_empty_string_not_null():
    _, value = R.encode(R.offset_commit("g", "t", 0, 1, -1, None, 2))
    assert value[14:16] == b"\x00\x00"
    assert R.decode(*R.encode(R.offset_commit("g", "t", 0, 1, -1, None, 2))).value["metadata"] == ""


def test_flexible_value_exact_bytes_and_trailing_tag_count():
    _, value = R.encode(R.group_epoch("g", 7))
    assert value == b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x00"
    _, value = R.encode(R.target_epoch("g", 258))
    assert value == b"\x00\x00" + struct.pack(">i", 258) + b"\x00"


@pytest.mark.parametrize("rec", [r for r in _all_records() if r.value is not None and r.type not in (R.OFFSET_COMMIT, R.CLASSIC_GROUP)],
                         ids=lambda r: f"type{r.type}")
def test_flexible_values_are_version_0_and_end_with_an_empty_tagged_field_section(rec):
    _, value = R.encode(rec)
    assert struct.unpack_from(">h", value, 0)[0] == 0
    assert value[-1:] == b"\x00"
    # Dropping the final tagged-field count leaves an undecodable value.
    with pytest.raises(R.RecordError):
        R.decode(R.encode_key(rec.type, rec.key), value[:-1])


def test_partition_metadata_uses_compact_encoding():
    _, value = R.encode(R.partition_metadata("g", [(T1, "foo", 3)]))
    assert value == (
        b"\x00\x00"
        + b"\x02"                        # compact array: 1 element
        + T1.bytes                       # topic id
        + b"\x04foo"                     # compact string
        + struct.pack(">i", 3)           # num partitions
        + b"\x00"                        # struct tagged fields
        + b"\x00"                        # top-level tagged fields
    )


def test_member_metadata_null_strings_are_compact_nulls():
    _, value = R.encode(R.member_metadata("g", ConsumerMember("m")))
    # instance id null, rack id null, client id "", client host "", no topics, regex null,
    # assignor null, rebalance timeout -1, no tags
    assert value == b"\x00\x00" + b"\x00\x00\x01\x01\x01\x00\x00" + struct.pack(">i", -1) + b"\x00"


# --- KIP-1251 assignment epochs ------------------------------------------------------------


def _topic_partitions(topic: uuid.UUID, parts: list[int], tags: bytes = b"\x00") -> bytes:
    return topic.bytes + bytes([len(parts) + 1]) + b"".join(struct.pack(">i", p) for p in parts) + tags


def _current_assignment_value(epoch: int, assigned: bytes, n_assigned: int, pending: bytes = b"",
                              n_pending: int = 0) -> bytes:
    return (b"\x00\x00" + struct.pack(">iib", epoch, epoch - 1, 0)
            + bytes([n_assigned + 1]) + assigned + bytes([n_pending + 1]) + pending + b"\x00")


def test_current_assignment_epochs_are_tagged_field_0_of_topic_partitions():
    m = _member(assigned={T1: {0: 5, 2: 7}}, pending_revocation={}, member_epoch=7)
    _, value = R.encode(R.current_assignment("g", m))
    epochs = b"\x03" + struct.pack(">ii", 5, 7)  # compact array [5, 7]
    tag0 = b"\x01" + b"\x00" + bytes([len(epochs)]) + epochs  # 1 tag: tag 0, size, body
    assert value == (b"\x00\x00" + struct.pack(">iib", 7, 6, 1)    # version, epochs, state
                     + b"\x02" + _topic_partitions(T1, [0, 2], tag0)  # assigned: 1 topic, tagged epochs
                     + b"\x01"                                      # nothing pending revocation
                     + b"\x00")                                     # top-level tags


def test_current_assignment_without_the_tag_decodes_with_epochs_none_and_member_epoch_default():
    value = _current_assignment_value(9, _topic_partitions(T1, [0, 1]) + _topic_partitions(T2, [4]), 2,
                                      _topic_partitions(T1, [2]), 1)
    rec = R.decode(R.encode_key(R.CURRENT_ASSIGNMENT, ("g", "m")), value)
    assert rec.type == R.CURRENT_ASSIGNMENT and rec.key == ("g", "m")
    assert rec.value["member_epoch"] == 9
    assert [x["assignment_epochs"] for x in rec.value["assigned_partitions"]] == [None, None]
    assert rec.value["partitions_pending_revocation"][0]["assignment_epochs"] is None
    assert R.read_partitions(rec.value["assigned_partitions"], 9) == {T1: {0: 9, 1: 9}, T2: {4: 9}}
    assert R.read_partitions(rec.value["partitions_pending_revocation"], 9) == {T1: {2: 9}}


def test_encoding_with_assignment_epochs_none_omits_the_tag():
    value_dict = {"member_epoch": 4, "previous_member_epoch": 3, "state": 0,
                  "assigned_partitions": [{"topic_id": T1, "partitions": [0, 1], "assignment_epochs": None}],
                  "partitions_pending_revocation": []}
    rec = R.CoordinatorRecord(R.CURRENT_ASSIGNMENT, ("g", "m"), value_dict)
    _, value = R.encode(rec)
    assert value == _current_assignment_value(4, _topic_partitions(T1, [0, 1]), 1)
    back = R.decode(*R.encode(rec))
    assert back.value["assigned_partitions"][0]["assignment_epochs"] is None
    assert R.read_partitions(back.value["assigned_partitions"], 4) == {T1: {0: 4, 1: 4}}


def test_read_partitions_mismatched_epoch_length_falls_back_to_member_epoch():
    items = [{"topic_id": T1, "partitions": [0, 1], "assignment_epochs": [3]},
             {"topic_id": T2, "partitions": [5], "assignment_epochs": [2]}]
    assert R.read_partitions(items, 8) == {T1: {0: 8, 1: 8}, T2: {5: 2}}


def test_unknown_tags_are_skipped():
    epochs = b"\x02" + struct.pack(">i", 3)
    # Struct tags: tag 0 (epochs) and tag 7 (unknown, 3 opaque bytes).
    tags = b"\x02" + b"\x00" + bytes([len(epochs)]) + epochs + b"\x07\x03" + b"\xff\xfe\xfd"
    value = _current_assignment_value(5, _topic_partitions(T1, [2], tags), 1)
    # Also an unknown top-level tag (tag 3, 2 bytes) in place of the empty top-level tag section.
    value = value[:-1] + b"\x01\x03\x02\xaa\xbb"
    rec = R.decode(R.encode_key(R.CURRENT_ASSIGNMENT, ("g", "m")), value)
    assert rec.value["assigned_partitions"] == [{"topic_id": T1, "partitions": [2], "assignment_epochs": [3]}]
    assert rec.value["partitions_pending_revocation"] == []
    assert R.read_partitions(rec.value["assigned_partitions"], 5) == {T1: {2: 3}}


def test_unknown_tag_only_is_skipped_and_epochs_default():
    tags = b"\x01" + b"\x05\x01" + b"\x00"
    value = _current_assignment_value(6, _topic_partitions(T1, [0], tags), 1)
    rec = R.decode(R.encode_key(R.CURRENT_ASSIGNMENT, ("g", "m")), value)
    assert rec.value["assigned_partitions"][0]["assignment_epochs"] is None
    assert R.read_partitions(rec.value["assigned_partitions"], 6) == {T1: {0: 6}}


# --- unknown, corrupt and foreign records ---------------------------------------------------


@pytest.mark.parametrize("rtype", [9, 15, 17, 100, -1])
def test_unknown_record_types_decode_to_none(rtype):
    key = struct.pack(">h", rtype) + b"\x00\x01g"
    assert R.decode(key, b"\x00\x03whatever") is None
    assert R.decode(key, None) is None


def test_offset_commit_key_version_0_reads_as_offset_commit():
    key = b"\x00\x00" + b"\x00\x01g" + b"\x00\x03foo" + b"\x00\x00\x00\x01"
    _, value = R.encode(R.offset_commit("g", "foo", 1, 9, -1, "", 5))
    assert R.decode(key, value) == R.offset_commit("g", "foo", 1, 9, -1, "", 5)


@pytest.mark.parametrize("rec", [r for r in _all_records()], ids=lambda r: f"type{r.type}")
def test_every_truncation_raises_record_error(rec):
    key, value = R.encode(rec)
    for n in range(len(key)):
        with pytest.raises(R.RecordError):
            R.decode(key[:n], value)
    if value is not None:
        for n in range(len(value)):
            with pytest.raises(R.RecordError):
                R.decode(key, value[:n])


@pytest.mark.parametrize("rtype", [1, 3, 5, 8])
def test_a_value_of_another_version_raises_record_error(rtype):
    rec = next(r for r in _all_records() if r.type == rtype and r.value is not None)
    key, value = R.encode(rec)
    for version in (value[1] + 1, value[1] - 1, 0x7FFF):
        with pytest.raises(R.RecordError):
            R.decode(key, struct.pack(">h", version) + value[2:])


def test_garbage_is_a_record_error():
    key = R.encode_key(R.MEMBER_METADATA, ("g", "m"))
    with pytest.raises(R.RecordError):
        R.decode(key, b"\x00\x00" + b"\xff" * 12)  # varint too long
    with pytest.raises(R.RecordError):
        R.decode(key, b"\x00\x00" + b"\x05\xff\xfe\xfd\xfc" + b"\x00" * 20)  # invalid UTF-8
    with pytest.raises(R.RecordError):
        R.decode(b"\x00\x05\x00\x01g\x7f\xff", None)  # member id longer than the key
    with pytest.raises(R.RecordError):
        R.decode(b"\x00\x05\x00\x01g\xff\xfe", None)  # null in a non-nullable key string
    with pytest.raises(R.RecordError):
        R.decode(R.encode_key(R.CURRENT_ASSIGNMENT, ("g", "m")), b"\x00\x00" + b"\x00" * 9 + b"\x00")  # null array


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.binary(max_size=40), value=st.one_of(st.none(), st.binary(max_size=80)),
       rtype=st.sampled_from([0, 1, 3, 4, 5, 6, 7, 8]))
def test_random_bytes_decode_or_raise_record_error_only(key, value, rtype):
    version = struct.pack(">h", R.VALUE_SCHEMAS[rtype or 1][0])
    valid_key = R.encode(next(r for r in _all_records() if r.type == (rtype or 1)))[0]
    for k, v in ((struct.pack(">h", rtype) + key, value), (valid_key, version + (value or b""))):
        try:
            R.decode(k, v)
        except R.RecordError:
            pass


_ENCODED = [R.encode(r) for r in _all_records() if r.value is not None]


@settings(max_examples=300, deadline=None)
@given(which=st.integers(0, len(_ENCODED) - 1), data=st.data())
def test_corrupted_valid_values_decode_or_raise_record_error_only(which, data):
    key, value = _ENCODED[which]
    buf = bytearray(value)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(2, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(2, len(buf)))
    try:
        R.decode(key, bytes(buf[:cut]))
    except R.RecordError:
        pass


# --- properties ---------------------------------------------------------------------------

_names = st.text(max_size=20)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=150, deadline=None)
@given(group=_names, topic=_names, partition=_i32, offset=_i64, leader_epoch=_i32,
       metadata=st.text(max_size=50), ts=_i64)
def test_offset_commit_round_trip_property(group, topic, partition, offset, leader_epoch, metadata, ts):
    rec = R.offset_commit(group, topic, partition, offset, leader_epoch, metadata, ts)
    key, value = R.encode(rec)
    assert len(value) == 24 + len(metadata.encode())
    assert R.decode(key, value) == rec
    assert R.decode(key, None) == R.offset_tombstone(group, topic, partition)


_topic_ids = st.sampled_from([T1, T2, uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)])
_parts = st.dictionaries(_topic_ids, st.dictionaries(st.integers(0, 2**31 - 1), _i32, min_size=1, max_size=8),
                         max_size=3)


@settings(max_examples=150, deadline=None)
@given(group=_names, member_id=_names, epoch=_i32, prev=_i32, state=st.sampled_from(list(MemberState)),
       assigned=_parts, pending=_parts)
def test_current_assignment_round_trip_property(group, member_id, epoch, prev, state, assigned, pending):
    m = ConsumerMember(member_id, member_epoch=epoch, previous_member_epoch=prev, state=state,
                       assigned=assigned, pending_revocation=pending)
    rec = R.current_assignment(group, m)
    back = R.decode(*R.encode(rec))
    assert back == rec
    v = back.value
    assert (v["member_epoch"], v["previous_member_epoch"], MemberState(v["state"])) == (epoch, prev, state)
    assert R.read_partitions(v["assigned_partitions"], epoch) == assigned
    assert R.read_partitions(v["partitions_pending_revocation"], epoch) == pending


def test_offset_commit_fast_path_agrees_with_schema_path():
    """`offset_commit_fields` (used at start-up replay) must read exactly what the schema path reads."""
    from odradek.coordinator.records import offset_commit_fields

    for rec in (R.offset_commit("grøup", "t", 7, 123456789012, 5, "meta ✓", 1_700_000_000_000),
                R.offset_commit("", "x" * 300, -1, -1, -1, "", 0),
                R.offset_tombstone("g", "t", 3)):
        key, value = R.encode(rec)
        fields = offset_commit_fields(key, value)
        assert fields[:3] == rec.key
        if rec.value is None:
            assert fields[3] is None
        else:
            v = rec.value
            assert fields[3:] == (v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"])
