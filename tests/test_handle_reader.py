"""The worker handle's reader: a bug of ours is reported, a worker's fault is a violation.

A real ``WorkerHandle`` reads a real ZeroMQ PAIR socket; the test plays the worker on the other
end. A supervisor bug cannot be caused for real, so one is injected with ``monkeypatch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Ack, Message, Ping
from aotui.supervisor.interface.launch import DesktopLaunch
from aotui.supervisor.workers.handle import WorkerHandle
from tests.conftest import (
    TEST_APPS,
    RunningDesktop,
    run_desktop,
    stop_desktop,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.timeout(30)


class Channel:
    """A handle and the worker's end of its socket, with what the handle reported."""

    def __init__(self, handle: WorkerHandle, worker: zmq.asyncio.Socket) -> None:
        self.handle, self.worker = handle, worker
        self.faults: list[Exception] = []
        self.violations: list[AotuiError] = []
        self.reported = asyncio.Event()


@contextlib.asynccontextmanager
async def open_channel(tmp_path: Path) -> AsyncIterator[Channel]:
    """A started handle on a fresh socket pair; both closed on the way out."""
    context = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/channel"
    worker = context.socket(zmq.PAIR)
    worker.setsockopt(zmq.LINGER, 0)
    worker.bind(endpoint)
    sock = context.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    box: list[Channel] = []

    def on_fault(_: WorkerHandle, exc: Exception) -> None:
        box[0].faults.append(exc)
        box[0].reported.set()

    def on_violation(_: WorkerHandle, error: AotuiError) -> None:
        box[0].violations.append(error)
        box[0].reported.set()

    handle = WorkerHandle("app_1", endpoint, sock, lambda *_: None, on_violation, on_fault=on_fault)
    box.append(Channel(handle, worker))
    handle.start()
    try:
        yield box[0]
    finally:
        await handle.close()
        worker.close(linger=0)
        context.term()


def run(tmp_path: Path, scenario: Callable[[Channel], Awaitable[None]]) -> None:
    """Run ``scenario`` against a fresh channel in its own event loop."""

    async def main() -> None:
        async with open_channel(tmp_path) as channel:
            await scenario(channel)

    asyncio.run(main())


async def _pending_request(handle: WorkerHandle, timeout_s: float = 20.0) -> asyncio.Task[Message]:
    task = asyncio.create_task(handle.request(lambda rid: Ping(rid), timeout_s, "a ping"))
    while not handle.issued:  # sent once its id is issued
        await asyncio.sleep(0.01)
    return task


def test_a_bug_in_dispatch_reaches_on_fault_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(channel: Channel) -> None:
        def broken(self: WorkerHandle, message: Message) -> None:
            raise KeyError("injected dispatch bug")

        monkeypatch.setattr(WorkerHandle, "_dispatch", broken)
        caplog.set_level(logging.ERROR, "aotui.supervisor")
        await channel.worker.send(codec.encode(Ack(1)))
        await asyncio.wait_for(channel.reported.wait(), 20)
        assert channel.violations == []
        assert [type(exc) for exc in channel.faults] == [KeyError]
        record = next(r for r in caplog.records if "reading its channel failed" in r.getMessage())
        assert record.exc_info is not None
        assert record.exc_info[1] is channel.faults[0]
        assert "injected dispatch bug" in caplog.text
        assert "Traceback" in caplog.text

    run(tmp_path, scenario)


def test_without_on_fault_a_bug_fails_waiting_requests_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(channel: Channel) -> None:
        channel.handle.on_fault = None
        request = await _pending_request(channel.handle)

        def broken(self: WorkerHandle, message: Message) -> None:
            raise RuntimeError("injected dispatch bug")

        monkeypatch.setattr(WorkerHandle, "_dispatch", broken)
        await channel.worker.send(codec.encode(Ack(1)))
        # Well before the request's own 20 s deadline: it is not left to time out.
        with pytest.raises(AotuiError) as caught:
            await asyncio.wait_for(request, 10)
        assert caught.value.code is ErrorCode.E_INTERNAL
        assert "RuntimeError: injected dispatch bug" in caught.value.message
        assert "test_handle_reader.py" in caught.value.message  # where the bug was
        assert "supervisor.log" in caught.value.message

    run(tmp_path, scenario)


def test_a_codec_bug_is_a_fault_not_the_workers_violation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(channel: Channel) -> None:
        def decode(frame: bytes) -> Any:
            try:
                raise ZeroDivisionError("injected codec bug")
            except ZeroDivisionError as exc:
                raise AotuiError(ErrorCode.E_INTERNAL, "codec bug", {"reason": "bug"}) from exc

        monkeypatch.setattr(codec, "decode", decode)
        await channel.worker.send(b"anything")
        await asyncio.wait_for(channel.reported.wait(), 20)
        assert channel.violations == []
        assert [type(exc) for exc in channel.faults] == [ZeroDivisionError]

    run(tmp_path, scenario)


def test_a_malformed_frame_is_still_a_violation(tmp_path: Path) -> None:
    async def scenario(channel: Channel) -> None:
        await channel.worker.send(b"\xc1 not msgpack")
        await asyncio.wait_for(channel.reported.wait(), 20)
        assert channel.faults == []
        assert [error.code for error in channel.violations] == [ErrorCode.E_INVALID_CMD]

    run(tmp_path, scenario)


def test_a_reply_still_answers_its_request(tmp_path: Path) -> None:
    async def scenario(channel: Channel) -> None:
        request = await _pending_request(channel.handle)
        request_id = next(iter(channel.handle.issued))
        await channel.worker.send(codec.encode(Ack(request_id)))
        reply = await asyncio.wait_for(request, 10)
        assert isinstance(reply, Ack)
        assert reply.request_id == request_id
        assert channel.faults == []
        assert channel.violations == []

    run(tmp_path, scenario)


# --- the same bug inside a real supervisor ------------------------------------------------------

#: Run in the supervisor's own process before ``aotui up``: the first ``Ack`` read while the flag
#: file exists raises inside the reader (a bug of ours that cannot be caused for real).
_INJECT = """
import os, runpy, sys
from aotui.protocol.messages import Ack
from aotui.supervisor.workers import handle
flag, original = sys.argv.pop(1), handle.WorkerHandle._dispatch
def _dispatch(self, message):
    if isinstance(message, Ack) and os.path.exists(flag):
        os.unlink(flag)
        raise RuntimeError("injected reader bug")
    return original(self, message)
handle.WorkerHandle._dispatch = _dispatch
sys.argv[0] = "aotui"
runpy.run_module("aotui.supervisor", run_name="__main__")
"""


@pytest.fixture
def buggy_desktop(tmp_path: Path) -> Iterator[tuple[RunningDesktop, Path]]:
    """A desktop with the echo app whose supervisor has the injected reader bug; torn down."""
    # A long operation timeout, so an answer in seconds cannot be the old timeout's.
    config = write_config(
        tmp_path / "bug.toml", [str(TEST_APPS / "echo")], operation_timeout_ms=30_000
    )
    runtime, flag = tmp_path / "run", tmp_path / "inject"
    program = (sys.executable, "-c", _INJECT, str(flag))
    launch = DesktopLaunch("bug", config, runtime, log=tmp_path / "bug.out", program=program)
    desktop = run_desktop(launch)
    try:
        yield desktop, flag
    finally:
        stop_desktop(desktop)


def test_a_reader_bug_in_the_supervisor_is_a_logged_crash_not_a_timeout(
    buggy_desktop: tuple[RunningDesktop, Path], tmp_path: Path
) -> None:
    desktop, flag = buggy_desktop
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    bump = '<context app_id="app_0" view_id="view_0">execute bump</context>'
    assert client.execute(bump) == {"ran": 1, "results": [1]}
    flag.touch()
    started = time.monotonic()
    with pytest.raises(AotuiError) as caught:
        client.execute(bump)
    # Answered as a crash at once, not after the operation's 30 s timeout.
    assert time.monotonic() - started < 15
    assert caught.value.code is ErrorCode.E_APP_ERROR
    assert "supervisor error" in caught.value.message
    logs = client.snapshot()
    assert (
        "the supervisor failed reading app_0's channel (RuntimeError: injected reader bug" in logs
    )
    assert "a bug of the desktop, not the app's" in logs

    def restarted() -> bool:
        row = next(r for r in client.status()["apps"] if r["app"] == "app_0")
        return row["state"] == "running" and row["last_exit"] == "supervisor error"

    wait_for(restarted, 20, "the app to come back after the supervisor error")
    assert client.execute(bump)["results"] == [2]  # the acknowledged state was kept
    supervisor_log = (tmp_path / "bug.out").read_text()
    assert "reading its channel failed" in supervisor_log
    assert "Traceback" in supervisor_log
    assert "RuntimeError: injected reader bug" in supervisor_log
