"""The words ``last_exit`` shows are a closed set, and they stay plain strings once recorded."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from aotui.protocol import codec
from aotui.protocol.messages import Reply
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.manifest import load_manifest
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.kill import kill_worker
from aotui.supervisor.workers.watchdog import Limit

pytestmark = pytest.mark.timeout(30)


def test_the_agent_reads_the_same_words_as_before() -> None:
    assert {reason.value for reason in ExitReason} == {
        "protocol violation",
        "timeout",
        "memory limit",
        "cpu limit",
        "supervisor error",
        "launcher exited",
        "unacknowledged effect",
        "store write failed",
    }


def test_every_limit_that_kills_is_an_exit_reason() -> None:
    killing = [limit for limit in Limit if limit is not Limit.CPU_THROTTLED]
    assert [ExitReason(limit.value) for limit in killing] == [
        ExitReason.MEMORY_LIMIT,
        ExitReason.CPU_LIMIT,
    ]
    with pytest.raises(ValueError, match="cpu throttled"):
        ExitReason(Limit.CPU_THROTTLED.value)  # held to its share, never a kill


def test_a_kill_records_a_plain_string_the_codec_can_carry() -> None:
    """``last_exit`` goes to clients through the codec, which refuses str subclasses."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        app = AppRecord("app_1", load_manifest(Path(__file__).parent / "apps" / "blinder"))
        app.attach(types.SimpleNamespace(pid=child.pid))  # type: ignore[arg-type]
        kill_worker(app, ExitReason.TIMEOUT)
        assert child.wait(timeout=20) == -9
        assert type(app.kill_reason) is str
        assert app.kill_reason == "timeout"
        reply = codec.decode(codec.encode(Reply(1, {"last_exit": app.kill_reason})))
        assert reply == Reply(1, {"last_exit": "timeout"})
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
