"""The zygote ``aotui up`` starts before its own imports is taken over once, and only alive."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from aotui.sandbox import zygote
from aotui.supervisor.workers import zygote_start

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    yield fd
    taken = zygote_start.take_prestarted()  # whatever a failing test left behind
    if taken is not None:
        taken[0].kill()
        taken[0].wait(timeout=10)
        taken[1].close()
    os.close(fd)


def test_a_prestarted_zygote_is_taken_once(log: int) -> None:
    zygote_start.prestart()
    zygote_start.prestart()  # a second call starts no second zygote
    taken = zygote_start.take_prestarted()
    assert taken is not None
    process, sock = taken
    try:
        assert process.poll() is None
        assert zygote_start.take_prestarted() is None
    finally:
        sock.close()  # EOF: the zygote exits on its own
        assert process.wait(timeout=30) in (0, 1)


def test_a_dead_prestarted_zygote_is_dropped(log: int) -> None:
    zygote_start.prestart()
    process = zygote_start._prestarted[0] if zygote_start._prestarted else None
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    assert zygote_start.take_prestarted() is None  # the launcher then spawns a fresh one


def test_a_prestarted_zygote_writes_to_the_log_it_is_handed(tmp_path: Path, log: int) -> None:
    """``aotui up`` starts the zygote before it knows its log; the launcher hands it over later."""
    zygote_start.prestart()
    taken = zygote_start.take_prestarted()
    assert taken is not None
    process, sock = taken
    try:
        zygote_start.hand_log(sock, log)
        sock.sendall(b"\x00\x00\x00\x04junk")  # a frame the zygote refuses, and says so
        assert process.wait(timeout=30) == 2
    finally:
        sock.close()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert "zygote: bad control frame" in (tmp_path / "supervisor.log").read_text()


def test_a_zygote_serves_no_launch_before_its_log(tmp_path: Path) -> None:
    """Anything but the handover first is refused: a launch must not fork before the log."""
    process, sock = zygote_start.spawn()
    try:
        sock.sendall(b"\x00\x00\x00\x04junk")
        assert process.wait(timeout=30) == 2
    finally:
        sock.close()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.timeout(30)
def test_the_zygote_kills_every_workers_group_when_the_supervisor_goes() -> None:
    """EOF on the control socket (the supervisor died) kills each worker's children too.

    Without it, a zygote that saw the EOF before its SIGTERM handler ran returned and left
    whatever a worker had started running after the desktop was gone.
    """
    # A stand-in worker leading its own process group, with a child of its own.
    worker = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True
    )
    assert worker.stdout is not None
    child = int(worker.stdout.readline())
    ours, supervisors = socket.socketpair()
    wake_r, wake_w = os.pipe()
    try:
        supervisors.close()  # the supervisor is gone
        assert zygote.serve(ours, wake_r, {worker.pid: "app"}) == 0
        assert worker.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while psutil.pid_exists(child) and psutil.Process(child).status() != "zombie":
            assert time.monotonic() < deadline, "the worker's child outlived the supervisor"
            time.sleep(0.01)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        worker.stdout.close()
        ours.close()
        os.close(wake_r)
        os.close(wake_w)


def test_the_zygote_prepares_every_kind_a_worker_speaks() -> None:
    """The converters of the worker's messages are built once in the zygote, not per worker."""
    from aotui.protocol.messages import Message
    from aotui.sandbox import worker

    spoken = {
        value
        for value in vars(worker).values()
        if isinstance(value, type) and issubclass(value, Message) and value is not Message
    }
    assert spoken <= set(zygote.WORKER_TRAFFIC)
    code = (
        "import json\n"
        "from aotui.sandbox import zygote\n"
        "from aotui.protocol import codec\n"
        "zygote._preload()\n"
        "print(json.dumps(sorted(c.KIND for c in codec._DEFAULT._encoders)))\n"
        "print(json.dumps(sorted(codec._DEFAULT._decoders)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True
    )
    encoders, decoders = done.stdout.splitlines()
    kinds = sorted(cls.KIND for cls in spoken)
    assert json.loads(encoders) == json.loads(decoders) == kinds


@pytest.mark.parametrize(
    ("argv", "serves"),
    [
        (["up"], True),
        (["up", "--desktop", "work", "--config", "d.toml"], True),
        (["up", "--detach"], False),
        (["up", "--det"], False),  # argparse takes an abbreviation
        (["status"], False),
        ([], False),
    ],
)
def test_python_m_aotui_supervisor_prestarts_only_a_desktop_of_its_own(
    argv: list[str], serves: bool
) -> None:
    assert zygote_start.serves_here(argv) is serves


#: Reaps its orphans (a subreaper), starts a supervisor stand-in that starts a zygote and dies at
#: once, then prints how the orphaned zygote ended.
ORPHAN_PROBE = """
import ctypes, os, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if os.fork() == 0:
    import time
    from aotui.supervisor.workers import zygote_start
    process, _ = zygote_start.spawn()
    deadline = time.monotonic() + 30
    maps = f"/proc/{process.pid}/maps"
    while "etree" not in open(maps).read() and time.monotonic() < deadline:
        time.sleep(0.001)  # until it is importing lxml, the first of its heavy imports
    os._exit(0)  # a refused `aotui up`: gone while its zygote still imports
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    if os.WIFSIGNALED(status):
        print("signal", os.WTERMSIG(status))
    elif pid:
        print("exit", os.WEXITSTATUS(status))
"""


def test_a_zygote_dies_with_its_supervisor_even_while_importing() -> None:
    """`aotui up` starts the zygote before its checks; one that refuses does not wait for it."""
    done = subprocess.run(
        [sys.executable, "-c", ORPHAN_PROBE], capture_output=True, text=True, timeout=50
    )
    ends = done.stdout.split("\n")
    # The stand-in exits 0; the zygote is ended by its parent-death signal, not after its imports.
    assert f"signal {signal.SIGTERM.value}" in ends, done.stdout + done.stderr
