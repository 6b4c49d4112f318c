"""Starting a desktop and waiting for it (supervisor/interface/launch.py), with real processes.

The one start-and-wait every starter uses (``aotui up --detach``, the demo, the chaos runner, the
benchmarks, these tests' fixtures): it returns once the supervisor answers as itself, and a
supervisor that dies first, or stays silent, is a typed error naming what it said.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aotui.protocol.errors import ErrorCode
from aotui.supervisor.interface.client import DesktopUnavailable
from aotui.supervisor.interface.launch import (
    DesktopExited,
    DesktopLaunch,
    launch_desktop,
    spawn_desktop,
)
from tests.conftest import TEST_APPS, RunningDesktop, write_config

Start = Callable[..., RunningDesktop]


def python(code: str) -> tuple[str, ...]:
    """A program that runs ``code`` in place of ``aotui`` (it gets ``up --desktop …`` too)."""
    return (sys.executable, "-c", code)


def test_a_desktop_starts_answers_as_itself_and_stops(tmp_path: Path) -> None:
    config = write_config(tmp_path / "d.toml", [str(TEST_APPS / "echo")])
    launch = DesktopLaunch("d", config, tmp_path / "run", log=tmp_path / "d.out")
    desktop = launch_desktop(launch)
    try:
        with desktop.client(timeout_s=20) as client:
            assert client.ping()["pid"] == desktop.pid
            assert client.execute("<context>open --application app_0</context>")["ran"] == 1
    finally:
        assert desktop.stop() == 0
    assert not desktop.paths.control_file.exists()  # it stopped cleanly, removing its socket


@pytest.mark.parametrize("logged", [True, False], ids=["log file", "private output"])
def test_a_supervisor_that_exits_first_names_its_exit_code_and_output(
    tmp_path: Path, logged: bool
) -> None:
    log = tmp_path / "d.out" if logged else None
    if log is not None:
        log.write_text("an earlier start's output, not quoted\n")
    dies = "import sys; print('cannot start: the disk is on fire', file=sys.stderr); sys.exit(3)"
    launch = DesktopLaunch("d", socket=tmp_path / "run", log=log, program=python(dies))
    with pytest.raises(DesktopExited) as exited:
        launch_desktop(launch)
    error = exited.value
    assert error.code is ErrorCode.E_UNAVAILABLE  # CONTRACT §7: no desktop answers, exit 69
    assert error.returncode == 3
    assert error.data["exit_code"] == 3
    assert "the desktop 'd' exited with code 3 before it answered" in error.message
    assert "cannot start: the disk is on fire" in error.message
    assert "an earlier start's output" not in error.message
    assert "Fix what it says and start it again" in error.message
    assert (str(log) in error.message) is logged


def test_a_supervisor_killed_at_start_names_the_signal(tmp_path: Path) -> None:
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    launch = DesktopLaunch("d", socket=tmp_path / "run", program=python(killed))
    with pytest.raises(DesktopExited) as exited:
        launch_desktop(launch)
    assert "was killed by SIGKILL before it answered" in exited.value.message
    assert "(it printed nothing)" in exited.value.message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root starts a desktop as another user")
def test_credentials_start_it_as_that_user_without_extra_groups(tmp_path: Path) -> None:
    """The unprivileged-desktop test's start: uid, gid and no supplementary groups of root's."""
    report = "import os, sys; print('ids', os.getuid(), os.getgid(), os.getgroups()); sys.exit(5)"
    launch = DesktopLaunch(
        "d",
        socket=tmp_path / "run",
        program=("/usr/bin/python3", "-c", report),  # any user may run it (not so /root/...)
        cwd=Path("/"),
        credentials=(65534, 65534),
    )
    with pytest.raises(DesktopExited) as exited:
        launch_desktop(launch)
    assert "ids 65534 65534 []" in exited.value.message


def test_its_death_ends_the_wait_at_once(tmp_path: Path) -> None:
    """The wait between probes is on the child's pidfd: a pause of 60 s still sees the exit."""
    launch = DesktopLaunch(
        "d", socket=tmp_path / "run", program=python("import time; time.sleep(0.3)")
    )
    desktop = spawn_desktop(launch)
    began = time.monotonic()
    with pytest.raises(DesktopExited):
        desktop.wait_answering(timeout_s=120, retry_s=60)
    assert time.monotonic() - began < 20, "the exit was seen only at the next probe"


def test_a_silent_supervisor_is_killed_at_the_deadline(tmp_path: Path) -> None:
    silent = "import time; print('starting…', flush=True); time.sleep(120)"
    launch = DesktopLaunch("d", socket=tmp_path / "run", program=python(silent))
    desktop = spawn_desktop(launch)
    with pytest.raises(DesktopUnavailable) as silence:
        desktop.wait_answering(timeout_s=1)
    assert not isinstance(silence.value, DesktopExited)
    assert "did not answer within 1 s of its start, so it was stopped" in silence.value.message
    assert "starting…" in silence.value.message
    assert desktop.process.returncode == -signal.SIGKILL


def test_an_answer_from_another_supervisor_is_not_ours(
    start_desktop: Start, tmp_path: Path
) -> None:
    """A supervisor already serving the address answers the ping: the start must not count it."""
    other = start_desktop(["echo"])
    launch = DesktopLaunch(
        other.name, socket=other.runtime, program=python("import time; time.sleep(120)")
    )
    desktop = spawn_desktop(launch)
    with pytest.raises(DesktopUnavailable) as silence:
        desktop.wait_answering(timeout_s=2)
    assert "did not answer within 2 s" in silence.value.message
    assert other.client.ping()["pid"] == other.process.pid


def test_detached_up_of_a_supervisor_that_dies_at_start_says_why(
    tmp_path: Path, private_home: Path
) -> None:
    """``aotui up --detach`` quotes its child's exit code and last output (it said "see LOG")."""
    config = write_config(tmp_path / "d.toml", [str(TEST_APPS / "echo")])
    missing = tmp_path / "no-such-setup.json"
    # The supervisor alone reads a chaos setup (the detached parent does not): it fails there.
    env = {**os.environ, "AOTUI_HOME": str(private_home), "AOTUI_CHAOS": str(missing)}
    where = ["--desktop", "d", "--config", str(config), "--socket", str(tmp_path / "run")]
    up = subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", "up", "--detach", "--json", *where],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert up.returncode == 69, up.stderr + up.stdout
    error = json.loads(up.stdout)["error"]
    assert error["code"] == "E_UNAVAILABLE"
    assert "the desktop 'd' exited with code 1 before it answered" in error["message"]
    assert "no-such-setup.json" in error["message"]  # its own words: the missing file
    assert str(tmp_path / "run" / "d" / "supervisor.log") in error["message"]
    assert error["data"]["exit_code"] == 1
