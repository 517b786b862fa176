"""FileCache: segment descriptors as a least-recently-used budget."""

import os
import resource

import pytest

from odradek.log.files import FileCache, capacity_for_limit, raise_fd_limit
from odradek.log.segment import Segment
from odradek.records.batch import iter_headers
from odradek.records.codec import Record, encode_batch

T0 = 1_700_000_000_000


def _segments(tmp_path, n, cache):
    out = []
    for i in range(n):
        d = tmp_path / f"p{i}"
        d.mkdir()
        seg = Segment(d, 0, 4096, T0, cache)
        raw = encode_batch([Record(0, T0, b"k", b"segment-%d" % i)])
        seg.append(raw, list(iter_headers(raw)))
        out.append((seg, raw))
    return out


def test_never_more_descriptors_open_than_the_budget(tmp_path):
    cache = FileCache(3)
    segs = _segments(tmp_path, 10, cache)
    assert len(cache) == 3 and sum(s.fd >= 0 for s, _ in segs) == 3
    # Every segment still reads and writes: evicted ones reopen on use.
    for seg, raw in segs:
        assert seg.pread(0, len(raw)) == raw
        assert len(cache) <= 3
    assert cache.evicted > 0 and sum(s.fd >= 0 for s, _ in segs) == 3


def test_least_recently_used_goes_first(tmp_path):
    cache = FileCache(2)
    (a, _), (b, _) = _segments(tmp_path, 2, cache)
    a.pread(0, 1)  # a is now the most recent
    d = tmp_path / "c"
    d.mkdir()
    c = Segment(d, 0, 4096, T0, cache)
    c.pread(0, 1)
    assert a.fd >= 0 and b.fd < 0 and c.fd >= 0


def test_pinned_descriptors_are_not_closed(tmp_path):
    cache = FileCache(1)
    (a, _), = _segments(tmp_path, 1, cache)
    fd = cache.pin(a)
    d = tmp_path / "b"
    d.mkdir()
    Segment(d, 0, 4096, T0, cache).pread(0, 1)
    assert a.fd == fd and os.fstat(fd)  # still open, even over budget
    cache.unpin(a)
    Segment(d, 0, 4096, T0, cache).pread(0, 1)
    assert a.fd < 0


def test_closed_and_deleted_segments_leave_the_cache(tmp_path):
    cache = FileCache(4)
    (a, _), (b, _) = _segments(tmp_path, 2, cache)
    a.close()
    b.delete()
    assert len(cache) == 0


def test_capacity_is_a_share_of_the_process_limit():
    assert capacity_for_limit(20_000) == 10_000
    assert capacity_for_limit(1024) == 512
    assert capacity_for_limit(20_000, configured=300) == 300
    assert capacity_for_limit(1024, configured=10_000) == 960  # never the whole limit
    with pytest.raises(ValueError):
        FileCache(0)


def test_raise_fd_limit_lifts_soft_to_hard():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        assert raise_fd_limit() == hard if hard != resource.RLIM_INFINITY else True
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
