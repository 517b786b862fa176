import asyncio

import pytest

from odradek.broker.broker import Broker
from odradek.config import BrokerConfig


class InProcess:
    """A Broker driven directly through handle_frame, no sockets."""

    def __init__(self, data_dir, **config):
        self.config = BrokerConfig(data_dir=data_dir, listen_port=0, **config)
        self.broker = Broker(self.config)
        self.loop = asyncio.new_event_loop()

    def handle(self, frame: bytes):
        """`frame` is size-prefixed, as on the wire."""
        return self.loop.run_until_complete(self.broker.handle_frame(frame[4:]))

    def close(self):
        self.broker.close()
        self.loop.close()


@pytest.fixture
def inproc(tmp_path):
    b = InProcess(tmp_path / "data")
    yield b
    b.close()
