"""LogDirHealth: which storage failures take the log directory offline."""

import errno

import pytest

from odradek.log.errors import StorageError
from odradek.log.health import TRANSITIONS, DirState, Failure, LogDirHealth, classify


def _err(code, undone=True):
    e = StorageError("boom", OSError(code, "x"))
    e.undone = undone
    return e


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE])
def test_full_disk_and_descriptor_shortage_keep_the_directory_online(code):
    h = LogDirHealth()
    for _ in range(100):
        assert h.record(_err(code)) is DirState.ONLINE
    assert not h.offline and h.transient_failures == 100


@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS, errno.ENODEV])
def test_io_errors_take_it_offline_for_good(code):
    h = LogDirHealth()
    assert h.record(_err(code)) is DirState.OFFLINE
    assert h.offline and "boom" in h.reason
    assert h.record(_err(errno.ENOSPC)) is DirState.OFFLINE


def test_a_write_that_could_not_be_undone_is_fatal_even_when_the_disk_is_only_full():
    assert classify(_err(errno.ENOSPC, undone=False)) is Failure.FATAL
    h = LogDirHealth()
    h.record(_err(errno.ENOSPC, undone=False))
    assert h.offline


def test_the_transition_table_is_total_and_offline_is_terminal():
    assert {(s, f) for s in DirState for f in Failure} == set(TRANSITIONS)
    assert all(TRANSITIONS[(DirState.OFFLINE, f)] is DirState.OFFLINE for f in Failure)
