"""Tests for odradek.log.txn_index: Kafka's `.txnindex` layout, lazy loading, torn and bad entries,
truncation, rebuilds, a failed write kept pending until `sync`, and the search's early stop."""

from __future__ import annotations

import os
import struct

import pytest

from odradek.log import txn_index as txn_index_mod
from odradek.log.errors import StorageError
from odradek.log.txn_index import ENTRY_SIZE, AbortedTxn, TxnIndex, parse_entries

E1 = AbortedTxn(producer_id=7, first_offset=3, last_offset=9, last_stable_offset=10)
E2 = AbortedTxn(producer_id=8, first_offset=5, last_offset=12, last_stable_offset=13)
E3 = AbortedTxn(producer_id=9, first_offset=20, last_offset=25, last_stable_offset=26)


def test_entries_are_34_bytes_in_kafkas_layout(tmp_path):
    index = TxnIndex(tmp_path / "x.txnindex")
    index.append(E1)
    data = index.path.read_bytes()
    assert ENTRY_SIZE == 34 and len(data) == 34
    assert struct.unpack(">hqqqq", data) == (0, 7, 3, 9, 10)
    index.append(E2)
    assert TxnIndex(index.path).entries() == [E1, E2]  # read back lazily by a new index


def test_a_known_absent_file_is_never_read(tmp_path):
    path = tmp_path / "x.txnindex"
    path.write_bytes(E1.to_bytes())
    index = TxnIndex(path, exists=False)
    assert index.entries() == []
    other = TxnIndex(path)
    other.entries()
    other.known_absent()  # already loaded indexes are left alone
    assert other.entries() == [E1]
    late = TxnIndex(path)
    late.known_absent()
    assert late.entries() == []


def test_a_torn_last_entry_and_a_bad_entry_end_the_parse():
    assert parse_entries(E1.to_bytes() + E2.to_bytes()[:20]) == [E1]
    bad_version = struct.pack(">hqqqq", 1, 1, 1, 2, 3)
    assert parse_entries(E1.to_bytes() + bad_version + E2.to_bytes()) == [E1]
    backwards = struct.pack(">hqqqq", 0, 1, 1, 2, 3)  # its marker is before the previous one
    assert parse_entries(E1.to_bytes() + backwards) == [E1]


def test_truncate_to_drops_entries_whose_marker_is_cut(tmp_path):
    index = TxnIndex(tmp_path / "x.txnindex")
    for e in (E1, E2, E3):
        index.append(e)
    index.truncate_to(12)
    assert index.entries() == [E1]
    assert TxnIndex(index.path).entries() == [E1]
    index.truncate_to(0)
    assert index.entries() == [] and not index.path.exists()


def test_replace_from_rewrites_only_when_the_batches_say_otherwise(tmp_path):
    index = TxnIndex(tmp_path / "x.txnindex")
    index.append(E1)
    index.append(E2)
    assert index.replace_from(10, [E2]) is False  # the same: nothing written
    assert index.replace_from(10, [E3]) is True
    assert TxnIndex(index.path).entries() == [E1, E3]
    assert index.replace_from(0, []) is True and not index.path.exists()


def test_a_failed_write_stays_pending_until_sync(tmp_path, monkeypatch):
    index = TxnIndex(tmp_path / "x.txnindex")
    real_open = os.open
    state = {"fail": True}

    def flaky_open(path, flags, *a):
        if state["fail"]:
            raise OSError(28, "No space left on device")
        return real_open(path, flags, *a)

    monkeypatch.setattr(txn_index_mod.os, "open", flaky_open)
    index.append(E1)  # logged, kept in memory
    assert index.entries() == [E1] and not index.path.exists()
    with pytest.raises(StorageError):
        index.sync()
    state["fail"] = False
    index.sync()
    assert TxnIndex(index.path).entries() == [E1]


def test_collect_stops_at_an_entry_whose_lso_reaches_the_bound(tmp_path):
    index = TxnIndex(tmp_path / "x.txnindex")
    for e in (E1, E2, E3):
        index.append(e)
    out: list[AbortedTxn] = []
    assert index.collect(0, 10, out) is True  # complete at E1: every later abort started past 10
    assert out == [E1]
    out = []
    assert index.collect(0, 11, out) is True  # E1's LSO is below 11: go on; E2's reaches it
    assert out == [E1, E2]
    out = []
    assert index.collect(10, 100, out) is False  # no LSO reaches 100: later segments are searched too
    assert out == [E2, E3]


def test_delete_removes_the_file(tmp_path):
    index = TxnIndex(tmp_path / "x.txnindex")
    index.append(E1)
    index.delete()
    assert not index.path.exists() and index.entries() == []
