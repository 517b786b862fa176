import pytest

from odradek.log import epochs as epochs_mod
from odradek.log import segment as segment_mod


@pytest.fixture(autouse=True)
def index_files_for_every_segment(monkeypatch):
    """These tests check index files on disk with small segments: write them whatever the
    size (the broker skips small ones; test_segment.py tests that rule on its own)."""
    monkeypatch.setattr(segment_mod, "INDEX_FILE_MIN_BYTES", 0)


@pytest.fixture
def epoch_file_writes(monkeypatch):
    """Every text written to a leader-epoch-checkpoint file, in order."""
    written = []
    real = epochs_mod.replace_file

    def spy(path, text):
        written.append(text)
        real(path, text)

    monkeypatch.setattr(epochs_mod, "replace_file", spy)
    return written
