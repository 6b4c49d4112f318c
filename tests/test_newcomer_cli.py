"""The CLI and the Python client as a newcomer meets them (each test is a bug a user reported).

A long ``$XDG_RUNTIME_DIR`` and a 64-character desktop name; a desktop that was stopped or
killed; a client that leaves a ``with`` block holding the input lease; and the small things:
error codes, usage errors, a closed pipe, an empty log, uptime, start failures.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from aotui.protocol.errors import ErrorCode
from aotui.supervisor.interface.client import Client, DesktopUnavailable
from aotui.supervisor.paths import SUN_PATH_MAX, is_listening, unix_address
from tests.conftest import TEST_APPS, RunningDesktop, wait_for
from tests.processes import started_by_this_test

Start = Callable[..., RunningDesktop]


def aotui(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class Detached:
    """Desktops started with ``aotui up --detach``; every process is gone after the test."""

    tmp_path: Path
    started: list[tuple[list[str], dict[str, str] | None, int]] = field(default_factory=list)

    def up(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``aotui up --detach --json ARGS``; remembers the supervisor to stop it at teardown."""
        result = aotui("up", "--detach", "--json", *args, env=env)
        if result.returncode == 0:
            where = [a for a in args if a != "--config"]
            self.started.append((where, env, json.loads(result.stdout)["pid"]))
        return result

    def stop_all(self) -> None:
        for _where, _env, pid in self.started:
            with contextlib.suppress(psutil.NoSuchProcess):
                supervisor = psutil.Process(pid)
                family = [supervisor, *supervisor.children(recursive=True)]
                supervisor.terminate()
                _, alive = psutil.wait_procs(family, timeout=10)
                for process in alive:
                    process.kill()
                psutil.wait_procs(alive, timeout=5)
                assert not alive, f"processes left behind: {[p.pid for p in alive]}"


@pytest.fixture
def detached(tmp_path: Path) -> Iterator[Detached]:
    """Start detached desktops; teardown stops them even when the test failed."""
    desktops = Detached(tmp_path)
    yield desktops
    desktops.stop_all()


def echo_config(tmp_path: Path, **settings: str) -> Path:
    """A desktop config with the echo test app only (fast to open)."""
    lines = [f'apps = ["{TEST_APPS / "echo"}"]'] + [f'{k} = "{v}"' for k, v in settings.items()]
    config = tmp_path / "echo.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def long_directory(parent: Path, length: int) -> Path:
    """A 0700 directory whose path is exactly ``length`` characters long."""
    path = parent / ("r" * (length - len(str(parent)) - 1))
    assert len(str(path)) == length
    path.mkdir(mode=0o700)
    return path


# --- item 4: a long runtime path, a long desktop name -------------------------------------------


def test_a_150_character_runtime_dir_and_a_64_character_name_work(
    tmp_path: Path, detached: Detached, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = long_directory(tmp_path, 150)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.delenv("AOTUI_SOCKET", raising=False)
    env = dict(os.environ)
    name = "a-desktop-name-of-sixty-four-characters-" + "x" * 24
    assert len(name) == 64
    where = ["--desktop", name]

    up = detached.up("--config", str(echo_config(tmp_path)), *where, env=env)
    assert up.returncode == 0, up.stderr + up.stdout
    root = runtime / "aotui" / name  # CONTRACT §8: the endpoints stay where they belong
    assert (root / "control.sock").is_socket()
    assert (root / "signals.sock").is_socket()

    opened = aotui("exec", *where, "<context>open --application app_0</context>", env=env)
    assert opened.returncode == 0, opened.stderr
    bump = '<context app_id="app_0" view_id="view_0">execute bump</context>'
    executed = aotui("exec", "--json", *where, bump, env=env)
    assert executed.returncode == 0, executed.stderr
    assert json.loads(executed.stdout)["results"] == [1]
    assert [p.suffix for p in (root / "workers").iterdir()] == [".sock"]  # the worker channel
    snapshot = aotui("snapshot", "--plain", *where, env=env)
    assert '<application id="app_0" name="Echo">' in snapshot.stdout
    assert "Calls: 1" in snapshot.stdout

    with Client(name) as client:  # the Python client, with the same environment
        client.acquire("long-path-agent")
        assert "Calls: 1" in client.snapshot()
        assert client.execute(bump)["results"] == [2]
        signals = client.signals(timeout_s=5)
        client.execute(bump)
        assert next(signals).reason == "dom_mutation"
        signals.close()  # type: ignore[attr-defined]  # a generator, typed as an Iterator

    down = aotui("down", *where, env=env)
    assert down.returncode == 0, down.stderr
    assert not (root / "control.sock").exists()


def test_the_python_client_reaches_a_long_socket_override(
    tmp_path: Path, start_desktop: Start
) -> None:
    desktop = start_desktop(["echo"], name="e" * 64)
    far = long_directory(tmp_path, 140)
    os.symlink(desktop.runtime, far / "run")  # the same desktop, through a long path
    with Client("e" * 64, str(far / "run"), timeout_s=10) as client:
        client.execute("<context>open --application app_0</context>")
        assert '<application id="app_0"' in client.snapshot()


def test_a_long_address_follows_its_directory_when_it_is_made_again(tmp_path: Path) -> None:
    directory = long_directory(tmp_path, 140)
    for _ in range(2):  # a desktop that went down (directory removed) and came up again
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address = unix_address(directory / "control.sock")
        assert len(address) <= SUN_PATH_MAX
        listener.bind(address)
        listener.listen(1)
        assert (directory / "control.sock").is_socket()
        assert is_listening(directory / "control.sock")
        listener.close()
        (directory / "control.sock").unlink()
        directory.rmdir()
        directory.mkdir(mode=0o700)


# --- item 5: a stopped or killed desktop answers at once ----------------------------------------


def test_after_down_the_sockets_are_gone_and_commands_fail_at_once(
    tmp_path: Path, detached: Detached
) -> None:
    where = ["--socket", str(tmp_path / "run"), "--desktop", "gone"]
    assert detached.up("--config", str(echo_config(tmp_path)), *where).returncode == 0
    assert aotui("down", *where).returncode == 0
    root = tmp_path / "run" / "gone"
    assert not (root / "control.sock").exists()
    assert not (root / "signals.sock").exists()

    started = time.monotonic()
    status = aotui("status", "--json", *where, timeout=20)
    elapsed = time.monotonic() - started
    assert status.returncode == 69
    error = json.loads(status.stdout)["error"]
    assert error["code"] == "E_UNAVAILABLE"
    assert error["recoverable"] is True
    assert elapsed < 5, f"status took {elapsed:.1f} s on a stopped desktop"


def test_a_socket_nobody_listens_on_fails_within_200_ms(tmp_path: Path) -> None:
    root = tmp_path / "run" / "dead"
    root.mkdir(parents=True, mode=0o700)
    left_behind = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left_behind.bind(str(root / "control.sock"))  # what a killed supervisor leaves
    left_behind.close()
    with Client("dead", str(tmp_path / "run")) as client:
        for call in (client.status, client.snapshot, lambda: client.execute("<context/>")):
            started = time.monotonic()
            with pytest.raises(DesktopUnavailable) as caught:
                call()
            elapsed = time.monotonic() - started
            assert elapsed < 0.2, f"{elapsed * 1000:.0f} ms to notice a dead desktop"
            assert caught.value.code is ErrorCode.E_UNAVAILABLE
            assert caught.value.recoverable
    with Client("nothing-here", str(tmp_path / "run")) as client:
        started = time.monotonic()
        with pytest.raises(DesktopUnavailable):
            client.status()
        assert time.monotonic() - started < 0.2


def test_up_after_a_killed_supervisor_replaces_its_stale_sockets(
    tmp_path: Path, detached: Detached
) -> None:
    where = ["--socket", str(tmp_path / "run"), "--desktop", "killed"]
    config = str(echo_config(tmp_path))
    first = detached.up("--config", config, *where)
    assert first.returncode == 0, first.stderr
    pid = json.loads(first.stdout)["pid"]
    assert aotui("exec", *where, "<context>open --application app_0</context>").returncode == 0
    workers = tmp_path / "run" / "killed" / "workers"
    channels = set(workers.iterdir())
    assert channels
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs(family, timeout=10)
    assert (tmp_path / "run" / "killed" / "control.sock").exists()  # left behind
    assert aotui("status", *where, timeout=20).returncode == 69
    again = detached.up("--config", config, *where)
    assert again.returncode == 0, again.stderr
    assert not channels & set(workers.iterdir())  # the dead workers' channels are gone too
    assert aotui("status", *where).returncode == 0
    assert aotui("down", *where).returncode == 0


# --- item 6: the Python client gives the lease back ---------------------------------------------


def test_leaving_the_with_block_releases_the_lease(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"], lease_s=30.0)
    with desktop.new_client() as first:
        first.acquire("first-agent")
        assert first.status()["lease_owner"] == "first-agent"
    assert not [t for t in threading.enumerate() if t.name == "aotui-lease"]
    assert desktop.client.status()["lease_owner"] is None
    second = desktop.new_client()
    second.acquire("second-agent")  # at once, not after the 30 s lease
    second.close()
    assert desktop.client.status()["lease_owner"] is None


def test_closing_a_client_of_a_stopped_desktop_does_not_wait(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    client = desktop.new_client()
    client.acquire("agent")
    desktop.client.shutdown()
    desktop.process.wait(timeout=15)
    started = time.monotonic()
    client.close()
    assert time.monotonic() - started < 1


# --- item 10: the smaller ones ------------------------------------------------------------------


def test_usage_errors_exit_64() -> None:
    for args in ([], ["nosuchcommand"], ["status", "--nosuchflag"], ["install"]):
        result = aotui(*args)
        assert result.returncode == 64, (args, result.returncode, result.stderr)
        assert "usage:" in result.stderr


def test_repair_of_an_unknown_desktop_creates_nothing(private_home: Path) -> None:
    result = aotui("desktops", "--repair", "nosuch")
    assert result.returncode == 65, result.stdout + result.stderr
    assert "no desktop named 'nosuch'" in result.stderr
    assert "healthy" not in result.stdout + result.stderr
    assert not (private_home / "desktops" / "nosuch.db").exists()
    listed = aotui("desktops", "--json")
    assert json.loads(listed.stdout) == []


def test_up_with_an_unusable_aotui_home_says_so_in_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    env = {**os.environ, "AOTUI_HOME": str(blocker / "home")}
    for detach in ([], ["--detach"]):
        where = ["--socket", str(tmp_path / "run"), "--desktop", "nohome"]
        result = aotui("up", *detach, "--config", str(echo_config(tmp_path)), *where, env=env)
        assert result.returncode == 74, result.stderr
        assert "Traceback" not in result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "E_IO" in lines[0]
        assert f"set AOTUI_HOME to a directory you can write (now {blocker / 'home'})" in lines[0]
    assert not (tmp_path / "run" / "nohome").exists()  # refused before anything was made


def test_the_config_files_desktop_name_is_used(tmp_path: Path, detached: Detached) -> None:
    config = echo_config(tmp_path, desktop="from-config")
    run = ["--socket", str(tmp_path / "run")]
    up = detached.up("--config", str(config), *run)
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["desktop"] == "from-config"
    status = aotui("status", "--json", *run, "--desktop", "from-config")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["desktop"] == "from-config"
    # --desktop still wins over the file.
    other = detached.up("--config", str(config), *run, "--desktop", "from-flag")
    assert json.loads(other.stdout)["desktop"] == "from-flag"
    for name in ("from-config", "from-flag"):
        assert aotui("down", *run, "--desktop", name).returncode == 0


def test_a_closed_pipe_ends_every_command_quietly(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    for args in (
        ["status", *where],
        ["snapshot", "--plain", *where],
        ["status", "--json", *where],
        ["desktops"],
        ["--help"],
        ["exec", "<context>open --application app_0</context>", *where],
    ):
        read_end, write_end = os.pipe()
        os.close(read_end)  # `| head -1` that has already gone
        try:
            result = subprocess.run(
                [sys.executable, "-m", "aotui.supervisor", *args],
                stdout=write_end,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            os.close(write_end)
        assert result.stderr == "", (args, result.stderr)
        # argparse itself swallows a failed write of --help; everything else says SIGPIPE.
        expected = {0, 141} if args == ["--help"] else {128 + signal.SIGPIPE}
        assert result.returncode in expected, (args, result.returncode)


def test_logs_json_of_an_empty_log_is_an_empty_list(private_home: Path) -> None:
    folder = private_home / "logs" / "default"
    folder.mkdir(parents=True)
    (folder / "app_0.log").write_text("")
    result = aotui("logs", "app_0", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
    (folder / "app_0.log").write_text("2026-11-23 09:00:00 hello\n2026-11-23 09:00:01 world\n")
    lines = json.loads(aotui("logs", "app_0", "--json").stdout)
    assert lines == ["2026-11-23 09:00:00 hello", "2026-11-23 09:00:01 world"]


def test_uptime_starts_again_after_down_and_up(tmp_path: Path, detached: Detached) -> None:
    where = ["--socket", str(tmp_path / "run"), "--desktop", "uptime"]
    config = str(echo_config(tmp_path))
    assert detached.up("--config", config, *where).returncode == 0
    time.sleep(1.5)  # the first life of the desktop: its uptime must not carry over
    assert aotui("down", *where).returncode == 0
    second_up = time.monotonic()
    assert detached.up("--config", config, *where).returncode == 0
    status = json.loads(aotui("status", "--json", *where).stdout)
    assert status["uptime_s"] <= time.monotonic() - second_up + 0.2
    assert aotui("down", *where).returncode == 0


def broken_system_app(parent: Path) -> Path:
    """A system app whose entry raises while it starts."""
    app = parent / "broken"
    app.mkdir()
    manifest = {
        "id": "test.broken",
        "name": "Broken",
        "version": "1.0.0",
        "entry": "app.py",
        "description": "Fails as it starts.",
        "system": True,
    }
    (app / "aoapp.json").write_text(json.dumps(manifest))
    (app / "app.py").write_text('raise RuntimeError("boom while starting")\n')
    app.chmod(0o755)
    return app


def test_a_first_start_failure_is_not_called_a_reopen(tmp_path: Path, start_desktop: Start) -> None:
    app = broken_system_app(tmp_path)
    desktop = start_desktop([str(TEST_APPS / "echo"), str(app)])
    logs = desktop.client.snapshot().split('name="System Logs">')[1].split("</view>")[0]
    failure = next(line for line in logs.splitlines() if "Could not open" in line)
    assert "Could not open Broken:" in failure
    assert "again" not in failure
    assert "boom while starting" in failure  # the cause, from the app's own output


def test_doctor_names_its_interpreter() -> None:
    result = aotui("doctor")
    assert result.returncode in (0, 1), result.stderr
    assert sys.executable in result.stdout
    assert ".".join(map(str, sys.version_info[:3])) in result.stdout
    report = json.loads(aotui("doctor", "--json").stdout)
    assert report["interpreter"]["path"] == sys.executable
    assert report["interpreter"]["version"] == ".".join(map(str, sys.version_info[:3]))


def test_demo_shows_why_an_app_could_not_start(tmp_path: Path) -> None:
    # The one fault injected here: this machine can start the bundled chat app, so a
    # sitecustomize makes its worker fail in the zygote as it would where it cannot run.
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(
        "import sys\n"
        'if "aotui.sandbox.zygote" in sys.orig_argv:\n'
        "    import aotui.sandbox.worker as worker\n"
        "    real = worker.run_worker\n"
        "    def failing(app, *args, **kwargs):\n"
        '        if app == "app_0":\n'
        '            raise RuntimeError("the chat cannot start on this machine")\n'
        "        return real(app, *args, **kwargs)\n"
        "    worker.run_worker = failing\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(inject), os.environ.get("PYTHONPATH", "")]),
    }
    result = aotui("demo", env=env, timeout=120)
    assert result.returncode == 70, result.stderr
    assert "could not start" in result.stderr
    assert "Could not open ChatWithUser" in result.stderr
    assert "the chat cannot start on this machine" in result.stderr
    assert "is not running; open it first" not in result.stderr  # the old, misleading line

    # Only what this demo started: other desktops may run on the machine meanwhile.
    wait_for(lambda: not started_by_this_test(), 10, "the demo's processes to exit")
