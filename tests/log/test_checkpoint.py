"""The recovery-point and log-start-offset checkpoint files, in Kafka's layout."""

import errno
import os

import pytest

from odradek.log import checkpoint as C
from odradek.log.errors import StorageError


def test_round_trip_in_kafkas_layout(tmp_path):
    path = tmp_path / C.RECOVERY_POINT_FILE
    C.write_checkpoint(path, {("orders", 1): 42, ("a-b.c", 0): 0, ("orders", 0): 7})
    assert path.read_text() == "0\n3\na-b.c 0 0\norders 0 7\norders 1 42\n"
    assert C.read_checkpoint(path) == {("orders", 1): 42, ("a-b.c", 0): 0, ("orders", 0): 7}


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\nt 0 5\n", "0\nx\n", "0\n1\nt zero 5\n", "\xff"])
def test_a_missing_or_malformed_file_means_recover_everything(tmp_path, text):
    path = tmp_path / C.RECOVERY_POINT_FILE
    assert C.read_checkpoint(path) == {}
    path.write_text(text)
    assert C.read_checkpoint(path) == {}


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / C.RECOVERY_POINT_FILE
    C.write_checkpoint(path, {("t", 0): 1})

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError):
        C.write_checkpoint(path, {("t", 0): 2})
    assert C.read_checkpoint(path) == {("t", 0): 1}
    assert [p.name for p in tmp_path.iterdir()] == [C.RECOVERY_POINT_FILE]


def test_the_log_start_file_has_kafkas_name_and_says_what_a_bad_file_means(tmp_path, caplog):
    assert C.LOG_START_OFFSET_FILE == "log-start-offset-checkpoint"
    path = tmp_path / C.LOG_START_OFFSET_FILE
    path.write_text("0\n2\nt 0 5\n")
    assert C.read_checkpoint(path, "every log starts at its first segment's base offset") == {}
    assert "every log starts at its first segment's base offset" in caplog.text
