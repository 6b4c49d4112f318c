"""Which processes the running test started, found by the tag every one of them inherits."""

from __future__ import annotations

import contextlib
import os

import psutil

# Set by conftest's ``nothing_left_running`` for each test; inherited by what the test starts.
from tests.conftest import TEST_TAG


def started_by_this_test() -> list[psutil.Process]:
    """The live (non-zombie) processes carrying this test's tag: not another test's or desktop's."""
    tag = os.environ[TEST_TAG]
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if process.environ().get(TEST_TAG) == tag and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found
