"""Real broker processes over a full disk and over damaged data directories.

A full disk is a small tmpfs the test mounts (skipped, with the reason, where mounting
is impossible); damage is done to the files of a stopped broker. After each, every
acknowledged record is read back, also after a restart, and the broker log holds no
traceback.
"""

from __future__ import annotations

import os
import resource
import signal
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path

import crc32c
import pytest
from confluent_kafka import Producer

from odradek.records.codec import Record, decode_batches, encode_batch
from tests.conftest import ODRADEK, ROOT, BrokerProcess
from tests.wire import RawClient

pytestmark = pytest.mark.interop

ZERO = uuid.UUID(int=0)
T0 = 1_700_000_000_000


# --- raw-protocol helpers ------------------------------------------------------------------------


def create(c: RawClient, name: str, partitions: int = 1):
    resp = c.call(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                      "assignments": [], "configs": []}], "timeout": 5000, "validate_only": False})
    return resp.topics[0]


def produce(c: RawClient, topic: str, partition: int, values: list[bytes]):
    batch = encode_batch([Record(i, T0 + i, None, v) for i, v in enumerate(values)])
    resp = c.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def fetch(c: RawClient, topic: str, partition: int, offset: int):
    resp = c.call(1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 4 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": ZERO, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
            "partition_max_bytes": 4 << 20}]}]})
    return resp.responses[0].partitions[0]


def read_all(c: RawClient, topic: str, partition: int) -> list[bytes]:
    out: list[bytes] = []
    while True:
        p = fetch(c, topic, partition, len(out))
        assert p.error_code == 0, p
        got = [r.value for b in decode_batches(p.records, verify_crc=True) for r in b.records]
        if not got:
            return out
        out.extend(got)


def metadata_partition(c: RawClient, topic: str, partition: int):
    resp = c.call(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return resp.topics[0].partitions[partition]


def no_traceback(b: BrokerProcess) -> None:
    text = b.log_path.read_text()
    assert "Traceback" not in text, text[-4000:]


# --- a full disk ---------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], check=True,
                       capture_output=True, timeout=10)
    except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}); the in-process full-disk tests cover the logic")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=10)


def _fill(disk: Path, leave: int) -> Path:
    """A filler file that leaves about `leave` bytes free on the disk."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.truncate(0)
        chunk = b"\0" * (1 << 20)
        remaining = max(free - leave, 0)
        while remaining > 0:
            n = f.write(chunk[: min(len(chunk), remaining)])
            remaining -= n
        f.flush()
        os.fsync(f.fileno())
    return filler


def test_full_disk_with_librdkafka_nothing_acknowledged_is_lost(small_disk):
    b = BrokerProcess(small_disk / "data", ["-o", "log.segment.bytes=1048576"]).start()
    try:
        raw = RawClient(b.bootstrap)
        assert create(raw, "full", 2).error_code == 0
        assert produce(raw, "full", 0, [b"before"]).error_code == 0
        filler = _fill(small_disk, 256 << 10)
        # The wire answer while full: KAFKA_STORAGE_ERROR (56), not a closed connection.
        codes = {int(produce(raw, "full", 1, [os.urandom(1000) for _ in range(400)]).error_code) for _ in range(3)}
        assert 56 in codes
        acked: dict[int, list[bytes]] = {0: [b"before"], 1: []}
        errors = []
        lock = threading.Lock()

        def on_delivery(err, msg):
            with lock:
                if err is None:
                    acked[msg.partition()].append(msg.value())
                else:
                    errors.append(err)

        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 100})
        sent = [b"rec-%06d-" % i + os.urandom(500) for i in range(4000)]
        for i, v in enumerate(sent):
            while True:
                try:
                    p.produce("full", value=v, partition=i % 2, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
        # librdkafka keeps retrying KAFKA_STORAGE_ERROR; free the space after a while.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            p.poll(0.1)
        stuck = len(sent) - sum(len(v) for v in acked.values()) + 1
        assert stuck > 0, "the disk never filled: the test proves nothing"
        filler.unlink()
        assert p.flush(90) == 0
        assert errors == []
        assert sorted(acked[0][1:] + acked[1]) == sorted(sent)
        assert b.alive()
        for part in (0, 1):
            assert read_all(raw, "full", part) == acked[part]
        raw.close()
        assert b.stop() == 0
        b.start()
        raw = RawClient(b.bootstrap)
        for part in (0, 1):
            assert read_all(raw, "full", part) == acked[part]
        raw.close()
        no_traceback(b)
    finally:
        if b.alive():
            b.kill()


# --- damaged data directories --------------------------------------------------------------------


def _recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return batch


def _seeded(broker_factory, name, segment_bytes=2000):
    """A stopped broker's data dir: topic t (3 partitions) with 60 records in p0 over
    several segments, and 5 in p1 and p2."""
    b = broker_factory(name, ["-o", f"log.segment.bytes={segment_bytes}"])
    c = RawClient(b.bootstrap)
    assert create(c, "t", 3).error_code == 0
    for i in range(6):
        assert produce(c, "t", 0, [b"p0-%03d-" % (10 * i + j) + b"x" * 80 for j in range(10)]).error_code == 0
    for part in (1, 2):
        assert produce(c, "t", part, [b"p%d-%d" % (part, j) for j in range(5)]).error_code == 0
    c.close()
    assert b.stop() == 0
    return b


def _segments(b, partition=0) -> list[Path]:
    return sorted((b.data_dir / f"t-{partition}").glob("*.log"))


def _others_serve(c: RawClient) -> None:
    before = read_all(c, "t", 1)
    for part in (1, 2):
        assert read_all(c, "t", part)[:5] == [b"p%d-%d" % (part, j) for j in range(5)]
    assert produce(c, "t", 1, [b"more"]).error_code == 0
    assert read_all(c, "t", 1) == before + [b"more"]


def test_start_with_a_stored_batch_its_index_cannot_hold(broker_factory):
    """RELIABILITY.md item 1, at rest: a flushed segment holds a batch whose offsets
    overflow its 32-bit relative offsets. The partition goes offline, loudly; the others
    serve; stopping and starting again work every time."""
    b = _seeded(broker_factory, "overflow", segment_bytes=5000)  # several batches per segment
    first = _segments(b)[0]
    data = bytearray(first.read_bytes())
    pos = last_batch = 0
    while pos < len(data):  # walk the batch headers to the last one
        last_batch = pos
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    struct.pack_into(">i", data, last_batch + 23, 2**31 - 2)  # last offset delta
    struct.pack_into(">i", data, last_batch + 57, 2**31 - 1)  # records count
    first.write_bytes(bytes(data[:last_batch]) + bytes(_recrc(data[last_batch:])))
    first.with_suffix(".index").unlink(missing_ok=True)
    for attempt in range(2):
        b.start()
        c = RawClient(b.bootstrap)
        assert int(produce(c, "t", 0, [b"x"]).error_code) == 56
        assert int(fetch(c, "t", 0, 0).error_code) == 56
        part = metadata_partition(c, "t", 0)
        assert (int(part.error_code), part.leader_id) == (5, -1)
        _others_serve(c)
        c.close()
        assert b.stop() == 0, f"attempt {attempt}: the broker did not stop cleanly"
    text = b.log_path.read_text()
    assert "t-0 is offline" in text and "overflow the segment's 32-bit index" in text
    no_traceback(b)


def test_start_with_a_closed_segment_cut_in_half(broker_factory):
    b = _seeded(broker_factory, "cut")
    first = _segments(b)[0]
    first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])
    b.start()
    c = RawClient(b.bootstrap)
    assert int(fetch(c, "t", 0, 0).error_code) == 56
    _others_serve(c)
    c.close()
    assert b.stop() == 0
    assert "t-0 is offline" in b.log_path.read_text()
    no_traceback(b)


def test_start_with_a_flipped_byte_in_a_closed_segment(broker_factory):
    b = _seeded(broker_factory, "flip")
    first = _segments(b)[0]
    data = bytearray(first.read_bytes())
    data[len(data) - 30] ^= 0x20  # inside the last batch of the first segment
    first.write_bytes(bytes(data))
    b.start()
    c = RawClient(b.bootstrap)
    got: list[bytes] = []
    offset = 0
    while True:
        p = fetch(c, "t", 0, offset)
        if p.error_code != 0:
            break
        batch = [r.value for bb in decode_batches(p.records, verify_crc=True) for r in bb.records]
        got.extend(batch)
        offset += len(batch)
    # Everything before the bad batch is served, the bad batch is CORRUPT_MESSAGE (2),
    # never silently skipped; later segments are intact.
    assert int(p.error_code) == 2 and got == [b"p0-%03d-" % i + b"x" * 80 for i in range(offset)]
    assert int(fetch(c, "t", 0, offset).error_code) == 2
    later = fetch(c, "t", 0, 59)
    assert later.error_code == 0
    _others_serve(c)
    c.close()
    assert b.stop() == 0
    text = b.log_path.read_text()
    assert text.count("fails its CRC32C check") == 1
    no_traceback(b)


def test_kill_with_garbage_after_the_flushed_tail_is_truncated_and_reported(broker_factory):
    """After an unclean stop only the unflushed tail is recovered: truncated from the
    first invalid batch, with the bytes and offsets dropped in the log."""
    b = _seeded(broker_factory, "tail")
    active = _segments(b)[-1]
    extra = bytearray(encode_batch([Record(60 + i, T0, None, b"lost-%d" % i) for i in range(4)], base_offset=60))
    extra[-2] ^= 0x01  # a whole batch with a bad CRC: corruption, not only a torn write
    with open(active, "ab") as f:
        f.write(bytes(extra))
    (b.data_dir / ".odradek_clean_shutdown").unlink()
    # The checkpoint still says offsets below 60 were flushed: only the new batch is suspect.
    b.start()
    c = RawClient(b.bootstrap)
    assert len(read_all(c, "t", 0)) == 60
    assert produce(c, "t", 0, [b"next"]).base_offset == 60
    c.close()
    assert b.stop() == 0
    text = b.log_path.read_text()
    assert "dropped" in text and "4 offsets from offset 60" in text
    no_traceback(b)


def test_many_partitions_under_a_small_descriptor_limit(tmp_path):
    """1,500 partitions written to and read back by a broker whose process may open 256
    files: segment descriptors are a budget, never EMFILE; it restarts the same way."""
    def limited():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    data = tmp_path / "many"
    proc = None
    try:
        for round_ in range(2):
            proc = subprocess.Popen([*ODRADEK, "broker", "--data-dir", str(data), "--listen", "127.0.0.1:0"],
                                    stdout=subprocess.PIPE, stderr=open(tmp_path / "many.log", "ab"), cwd=ROOT,
                                    preexec_fn=limited)
            from odradek.broker.spawn import wait_for_port

            port = wait_for_port(proc, 20)
            c = RawClient(f"127.0.0.1:{port}")
            if round_ == 0:
                assert create(c, "many", 1500).error_code == 0
                batch = encode_batch([Record(0, T0, None, b"v")])
                resp = c.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
                    {"name": "many", "partition_data": [{"index": i, "records": batch} for i in range(1500)]}]})
                codes = [p.error_code for p in resp.responses[0].partition_responses]
                assert codes == [0] * 1500
            for i in range(0, 1500, 7):
                assert read_all(c, "many", i) == [b"v"]
            c.close()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
            proc.stdout.close()
        text = (tmp_path / "many.log").read_text()
        assert "Too many open files" not in text and "Traceback" not in text
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()


def test_start_with_100000_partitions_under_the_default_descriptor_limit(broker_factory):
    """100,000 partitions (10 topics of 10,000, Kafka's cap per request), 2,000 of them
    written: the broker stops, starts and is killed and started again, serving every
    record each time, within the machine's open-file limit."""
    b = broker_factory("wide")
    c = RawClient(b.bootstrap, timeout=60)
    for t in range(10):
        assert create(c, f"wide{t}", 10_000).error_code == 0
    written = [(f"wide{t}", p) for t in range(10) for p in range(0, 10_000, 50)]  # 2,000 partitions
    batch = encode_batch([Record(0, T0, None, b"v")])
    for t in range(10):
        parts = [{"index": p, "records": batch} for name, p in written if name == f"wide{t}"]
        resp = c.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
            {"name": f"wide{t}", "partition_data": parts}]})
        assert all(r.error_code == 0 for r in resp.responses[0].partition_responses)
    c.close()
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    for how in ("stop", "kill"):
        if how == "stop":
            assert b.stop() == 0
        else:
            b.kill()
        b.start()
        c = RawClient(b.bootstrap, timeout=60)
        for name, p in written[::37]:
            assert read_all(c, name, p) == [b"v"]
        fds = len(os.listdir(f"/proc/{b.proc.pid}/fd"))
        assert fds < soft // 2 + 100, (fds, soft)
        c.close()
    no_traceback(b)
