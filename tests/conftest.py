"""Fixtures that start real desktops (a supervisor process, its zygote, real workers).

Every desktop a test starts is stopped at teardown, and the test fails if any process the
desktop started (supervisor, zygote, workers) is still alive afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import resource
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import zmq

from aotui.supervisor.interface.client import Client
from aotui.supervisor.interface.launch import DesktopLaunch, LaunchedDesktop, launch_desktop
from aotui.supervisor.server.conn_guard import raise_descriptor_limit
from aotui.supervisor.workers import app_tmp
from tests.stores import PrivatePostgres, StoreBackend, private_postgres

TEST_APPS = Path(__file__).parent / "apps"
BUNDLED_APPS = Path(__file__).parent.parent / "apps"


def wait_for(condition: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> object:
    """Poll ``condition`` until it is truthy; fail the test past the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(0.01)


@dataclass
class RunningDesktop:
    """A supervisor process started for one test, with a client connected to it."""

    launched: LaunchedDesktop
    runtime: Path
    name: str
    client: Client
    clients: list[Client] = field(default_factory=list)

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The supervisor's process."""
        return self.launched.process

    def new_client(self, **kwargs: object) -> Client:
        """Another client on the same desktop (closed at teardown)."""
        client = Client(self.name, str(self.runtime), **kwargs)  # type: ignore[arg-type]
        self.clients.append(client)
        return client

    def descendants(self) -> list[psutil.Process]:
        """Every process below the supervisor (zygote and workers)."""
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def app_pid(self, app: str) -> int | None:
        """The worker pid of ``app`` from ``status``."""
        for row in self.client.status()["apps"]:
            if app in (row["app"], row["id"]):
                return row["pid"]  # type: ignore[no-any-return]
        raise KeyError(app)


def write_config(path: Path, apps: list[str], **settings: object) -> Path:
    """A desktop TOML config with absolute app paths."""
    lines = ["apps = [" + ", ".join(json.dumps(a) for a in apps) + "]"]
    for key, value in settings.items():
        lines.append(f"{key} = {_toml(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value: object) -> str:
    """``value`` as TOML: JSON's scalars and arrays, and dicts as inline tables."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-seconds",
        default="120",
        help="how long tests/test_soak.py runs (default 120; 3600 for the hour-long soak)",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Lift the soft descriptor limit to the hard one, as the supervisor does for itself.

    A login's soft limit is 1024 (``su - user``, systemd) while its hard limit is far higher; a
    test that needs many descriptors sizes itself to what this leaves (:func:`spare_descriptors`).
    """
    raise_descriptor_limit()


def spare_descriptors(margin: int = 64) -> int:
    """How many more descriptors this process may open, keeping ``margin`` for the test itself."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(0, soft - len(os.listdir("/proc/self/fd")) - margin)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak's timeout follows its length."""
    seconds = float(config.getoption("--soak-seconds"))
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.timeout(seconds + 120))


#: Every process a test starts inherits this variable with the test's own value, so teardown can
#: find what it left behind even when it detached (``up --detach``) or outlived its parent.
TEST_TAG = "AOTUI_TEST_TAG"
_tags = itertools.count()


def _tagged(tag: str, since: float) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["create_time"]):
        if process.info["create_time"] < since or process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if process.environ().get(TEST_TAG) == tag:
                found.append(process)
    return found


def _describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())}"
    except psutil.Error:
        return str(process.pid)


@pytest.fixture(autouse=True)
def nothing_left_running(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a test that leaves a process running, after killing it (failed tests included)."""
    tag = f"{os.getpid()}-{next(_tags)}"
    since = time.time() - 1
    monkeypatch.setenv(TEST_TAG, tag)
    yield
    leftovers = _tagged(tag, since)
    if not leftovers:
        return
    _gone, alive = psutil.wait_procs(leftovers, timeout=5)
    for process in alive:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=5)
    if alive:
        described = [_describe(process) for process in alive]
        pytest.fail(f"the test left processes running (now killed): {described}")


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test stores desktops under its own AOTUI_HOME, never the user's.

    Afterwards the apps' temporary directories its desktops made in the system's temporary
    directory are removed: a desktop killed and never started again leaves its own behind.
    """
    home = tmp_path / "aotui-home"
    monkeypatch.setenv("AOTUI_HOME", str(home))
    yield home
    for record in tmp_path.rglob(app_tmp.RECORD):
        app_tmp.forget_base(record.parent)


def run_desktop(launch: DesktopLaunch) -> RunningDesktop:
    """Start a desktop and wait until it answers; :func:`stop_desktop` stops it.

    A supervisor that exits first fails the test with its exit code and the end of its output.
    """
    launched = launch_desktop(launch)
    runtime = launched.paths.root.parent
    return RunningDesktop(launched, runtime, launch.desktop, launched.client(timeout_s=20))


def stop_desktop(desktop: RunningDesktop) -> None:
    """Stop a test's desktop; fails if any process it started (zygote, workers) outlives it."""
    family = desktop.descendants()
    with contextlib.suppress(psutil.NoSuchProcess):
        family.append(psutil.Process(desktop.process.pid))
    for client in desktop.clients:
        client.close()
    desktop.client.close()
    desktop.launched.stop()
    _gone, alive = psutil.wait_procs(family, timeout=5)
    for leftover in alive:
        leftover.kill()
    assert not alive, f"processes left behind: {[p.pid for p in alive]}"


def stop_desktops(desktops: list[RunningDesktop]) -> None:
    """Stop every desktop, even after one that left processes behind; then fail if any did."""
    left: list[str] = []
    for desktop in desktops:
        try:
            stop_desktop(desktop)
        except AssertionError as exc:
            left.append(str(exc))
    assert not left, left


@pytest.fixture
def start_desktop(tmp_path: Path) -> Iterator[Callable[..., RunningDesktop]]:
    """Start desktops with the given apps; stops them and checks nothing is left behind."""
    started: list[RunningDesktop] = []

    def start(
        apps: list[str] | None = None, name: str | None = None, **settings: object
    ) -> RunningDesktop:
        app_dirs = [
            str(TEST_APPS / a) if (TEST_APPS / a).is_dir() else str(BUNDLED_APPS / a)
            for a in (apps or ["echo"])
        ]
        name = name or f"t{len(started)}"
        config = write_config(tmp_path / f"{name}.toml", app_dirs, **settings)
        desktop = run_desktop(
            DesktopLaunch(name, config, tmp_path / "run", log=tmp_path / f"{name}.out")
        )
        started.append(desktop)
        return desktop

    yield start
    stop_desktops(started)


@pytest.fixture
def channel() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    """A connected PAIR of sockets: (a worker's end, the supervisor's end), over inproc."""
    context = zmq.Context()
    address = f"inproc://channel-{uuid.uuid4().hex}"
    worker, supervisor = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    worker.bind(address)
    supervisor.connect(address)
    try:
        yield worker, supervisor
    finally:
        worker.close(linger=0)
        supervisor.close(linger=0)
        context.term()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL server for this test process (tests/stores.py); skips without one."""
    with private_postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> StoreBackend:
    """Each store in turn: the SQLite default, and PostgreSQL (a fresh database on the private
    server). A test taking it runs against both, with the same assertions."""
    if request.param == "sqlite":
        return StoreBackend("sqlite", tmp_path)
    return StoreBackend("postgresql", tmp_path, request.getfixturevalue("postgres_server"))
