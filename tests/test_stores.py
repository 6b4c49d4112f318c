"""Two stores behind one interface (supervisor/store/base.py): SQLite, the default, and
PostgreSQL (issue 25). The store-level tests in test_incremental.py, test_durability.py and
test_store_faults.py run against both through the ``store_backend`` fixture; these add what the
second store brought: a command's id recorded with its data (applied at most once, answered with
its first reply), PostgreSQL's schema, its lock, a lost connection, and a real desktop on it.

PostgreSQL is a private server the test process starts (tests/stores.py); without Debian's
server binaries the PostgreSQL cases skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.config import load_config
from aotui.supervisor.interface.launch import AOTUI, DesktopLaunch
from aotui.supervisor.store.base import Command, is_server_store
from aotui.supervisor.store.faults import StoreIOError
from aotui.supervisor.store.postgres import SCHEMA_VERSION, PostgresStore
from aotui.supervisor.store.state import AppEntry, DesktopState
from tests.conftest import RunningDesktop, run_desktop, stop_desktop, write_config
from tests.stores import PrivatePostgres, StoreBackend

pytestmark = pytest.mark.timeout(90)

Start = Callable[..., RunningDesktop]
BUMP = '<context app_id="{app}" view_id="view_0">execute bump</context>'


def entry(app: str, data: object) -> AppEntry:
    return AppEntry(app, "com.test", "/nowhere", "running", [], [], {}, data, 0, "")


def desktop(*entries: AppEntry) -> DesktopState:
    return DesktopState("d", 1.0, 1.0, len(entries), list(entries))


# --- a command's id: applied at most once, answered with its first reply ----------------------


def test_a_command_committed_twice_is_applied_once_and_answered_with_its_first_reply(
    store_backend: StoreBackend,
) -> None:
    store = store_backend.open()
    counter = entry("app_0", 1)
    notes = entry("app_1", {"a": 1})
    store.save_desktop(desktop(counter, notes))
    assert store.reply_to("c1") is None
    first = Command("c1", {"results": [2], "bytes": b"\x00\xff"})
    assert store.save_apps(desktop(counter, notes), [entry("app_0", 2)], command=first) is None
    # The same command again (its ack was lost; the client retries): nothing is written and the
    # first reply stands, even if this try computed another effect and another reply.
    again = Command("c1", {"results": [3]})
    assert store.save_apps(desktop(counter, notes), [entry("app_0", 3)], command=again) == first
    assert store.save_parts(desktop(counter, notes), notes, {"b": 2}, command=again) == first
    assert store.delete_app("app_1", command=again) == first
    assert store.reply_to("c1") == first
    # Another command goes through.
    parts = Command("c2", "ok")
    assert store.save_parts(desktop(counter, notes), notes, {"b": 2}, command=parts) is None
    assert store.save_parts(desktop(counter, notes), notes, {"a": None}, command=parts) == parts
    store.close()

    reopened = store_backend.open()  # a new life of the desktop (a restart, a move)
    assert reopened.reply_to("c1") == first
    loaded = reopened.load()
    assert loaded is not None
    assert [(a.app, a.data) for a in loaded.apps] == [("app_0", 2), ("app_1", {"a": 1, "b": 2})]
    assert reopened.save_apps(loaded, [entry("app_0", 9)], command=again) == first
    reloaded = reopened.load()
    assert reloaded is not None
    assert reloaded.apps[0].data == 2
    reopened.close()
    assert store_backend.sql("SELECT count(*) FROM commands WHERE {desktop}") == [(2,)]


def test_a_command_s_later_writes_update_its_reply_and_its_last_reply_is_recorded_alone(
    store_backend: StoreBackend,
) -> None:
    """A run of a command that writes several times (a message of several commands) records
    its id with the first write and what it has done so far with each later one; its final
    reply is recorded alone (also for a command that wrote nothing)."""
    store = store_backend.open()
    counter = entry("app_0", 1)
    store.save_desktop(desktop(counter))
    first = Command("m1", {"ran": 1, "results": [None]})
    assert store.save_apps(desktop(counter), [entry("app_0", 2)], command=first) is None
    later = Command("m1", {"ran": 2, "results": [None, 3]}, continues=True)
    assert store.save_apps(desktop(counter), [entry("app_0", 3)], command=later) is None
    assert store.reply_to("m1") == Command("m1", later.reply)
    done = Command("m1", {"ran": 3, "results": [None, 3, "x"]}, continues=True)
    assert store.record_reply(done) is None
    assert store.reply_to("m1") == Command("m1", done.reply)
    # A retry (not a continuation) is still refused and answered with what was recorded.
    assert store.record_reply(Command("m1", "again")) == Command("m1", done.reply)
    assert store.save_apps(desktop(counter), [entry("app_0", 9)], command=Command("m1", 0)) == (
        Command("m1", done.reply)
    )
    # A command that wrote nothing: its reply alone.
    assert store.record_reply(Command("r1", {"ran": 1, "results": ["read"]})) is None
    store.close()
    reopened = store_backend.open()
    assert reopened.reply_to("r1") == Command("r1", {"ran": 1, "results": ["read"]})
    loaded = reopened.load()
    assert loaded is not None
    assert loaded.apps[0].data == 3
    reopened.close()


def test_a_command_id_is_bounded() -> None:
    with pytest.raises(AotuiError, match="a command id is a string of 1 to 200") as bad:
        Command("x" * 201, None)
    assert bad.value.code is ErrorCode.E_INVALID_CMD
    with pytest.raises(AotuiError):
        Command("", None)


# --- PostgreSQL: schema, lock, connection ------------------------------------------------------


@pytest.fixture
def database(postgres_server: PrivatePostgres, tmp_path: Path) -> StoreBackend:
    return StoreBackend("postgresql", tmp_path, postgres_server)


def _regclass(database: StoreBackend, name: str) -> object:
    return database.sql(f"SELECT to_regclass('{name}')")[0][0]


def test_the_schema_is_made_at_the_first_write_and_versioned(database: StoreBackend) -> None:
    store = database.open()
    assert store.load() is None
    assert store.reply_to("c1") is None
    assert _regclass(database, "aotui.apps") is None, "opening and loading wrote nothing"
    store.save_desktop(desktop(entry("app_0", 1)))
    store.close()
    assert database.sql("SELECT version FROM aotui.schema_version") == [(SCHEMA_VERSION,)]
    # Many desktops share one database: another name is another desktop, empty.
    other = database.open("other")
    assert other.load() is None
    other.close()
    database.sql("UPDATE aotui.schema_version SET version = ?", SCHEMA_VERSION + 1)
    with pytest.raises(AotuiError, match=f"schema {SCHEMA_VERSION + 1} is newer") as newer:
        database.open()
    assert newer.value.code is ErrorCode.E_INTERNAL


def test_one_supervisor_per_desktop_on_the_server(database: StoreBackend) -> None:
    first = database.open()
    with pytest.raises(AotuiError, match=f"already served by aotui d pid {os.getpid()}") as held:
        database.open()
    assert held.value.code is ErrorCode.E_LOCKED
    database.open("another").close()  # another desktop on the same database is not held
    first.close()
    for _ in range(30):  # closed and opened again at once (a restart): never E_LOCKED
        database.open().close()


def test_a_lost_connection_is_an_io_error_then_the_store_connects_again(
    database: StoreBackend,
) -> None:
    store = database.open()
    assert isinstance(store, PostgresStore)
    state = desktop(entry("app_0", 1))
    store.save_desktop(state)
    database.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ?",
        f"aotui d pid {os.getpid()}",
    )
    with pytest.raises(StoreIOError) as lost:
        store.save_apps(state, [entry("app_0", 2)])
    assert lost.value.code is ErrorCode.E_IO
    assert "PostgreSQL server is up and reachable" in lost.value.message
    assert store.save_apps(state, [entry("app_0", 3)]) is None  # connected again, lock retaken
    with pytest.raises(AotuiError, match="already served"):
        database.open()
    loaded = store.load()
    assert loaded is not None
    assert loaded.apps[0].data == 3
    store.close()


def test_the_store_key_is_a_postgresql_url_or_empty() -> None:
    assert load_config().store == ""
    url = "postgresql://aotui@/db?host=/run/x"
    assert load_config(store=url).store == url
    assert is_server_store(url)
    with pytest.raises(AotuiError, match="config key 'store' is empty"):
        load_config(store="mysql://x")


# --- a real desktop on PostgreSQL --------------------------------------------------------------


def test_a_desktop_on_postgresql_keeps_every_acknowledged_effect_through_kill_9(
    start_desktop: Start, database: StoreBackend, private_home: Path, tmp_path: Path
) -> None:
    desktop = start_desktop(["echo"], name="pg", store=database.location)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    count = 0
    for _ in range(5):
        count = client.execute(BUMP.format(app="app_0"))["results"][0]
    store = client.status()["store"]
    assert store["state"] == "ok"
    assert store["path"].endswith("#pg")
    # The same desktop from another machine's AOTUI_HOME and sockets: refused, naming the holder.
    elsewhere = {**os.environ, "AOTUI_HOME": str(tmp_path / "other-home")}
    up = ["up", "--desktop", "pg", "--socket", str(tmp_path / "other-run")]
    second = subprocess.run(
        [*AOTUI, *up, "--store", database.location],
        capture_output=True, text=True, timeout=60, env=elsewhere, check=False,
    )  # fmt: skip
    assert second.returncode == 75, second.stderr
    assert f"already served by aotui pg pid {desktop.process.pid}" in second.stderr
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)

    # Started again by `aotui up --store URL` (the flag, not the config key).
    config = write_config(tmp_path / "plain.toml", [str(Path(__file__).parent / "apps" / "echo")])
    launch = DesktopLaunch("pg", config, tmp_path / "run", log=tmp_path / "again.out")
    again = run_desktop(DesktopLaunch(**{**vars(launch), "store": database.location}))
    try:
        assert again.client.execute(BUMP.format(app="app_0"))["results"][0] == count + 1
    finally:
        stop_desktop(again)
    assert not list(private_home.rglob("*.db")), "nothing was stored in SQLite"
    stored = database.sql("SELECT count(*) FROM apps WHERE {desktop}", desktop="pg")
    assert stored == [(1,)]


def test_batch_mode_on_postgresql_keeps_what_its_batch_time_wrote(
    start_desktop: Start, database: StoreBackend
) -> None:
    # batch commits with synchronous_commit off, every durability_batch_ms (50 ms).
    settings = {"durability": "batch", "store": database.location}
    desktop = start_desktop(["echo"], name="pgb", **settings)
    desktop.client.execute("<context>open --application app_0</context>")
    count = 0
    for _ in range(3):
        count = desktop.client.execute(BUMP.format(app="app_0"))["results"][0]
    time.sleep(1.0)
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    again = start_desktop(["echo"], name="pgb", **settings)
    assert again.client.execute(BUMP.format(app="app_0"))["results"][0] == count + 1
    store = again.client.status()["store"]
    assert (store["state"], store["path"][-4:]) == ("ok", "#pgb")
    assert database.sql("SELECT count(*) FROM apps WHERE {desktop}", desktop="pgb") == [(1,)]


def test_keyed_data_larger_than_a_frame_is_written_as_its_parts(
    store_backend: StoreBackend,
) -> None:
    big = {"a": "x" * (3 << 20), "b": b"y" * (3 << 20), "c": 1}  # 6 MB: past one 4 MiB frame
    store = store_backend.open()
    store.save_desktop(desktop(entry("app_0", big), entry("app_1", 2)))
    store.save_parts(desktop(), entry("app_0", big), {"c": None, "d": 4})
    store.close()
    store = store_backend.open()
    loaded = store.load()
    store.close()
    assert loaded is not None
    assert [(a.app, a.data) for a in loaded.apps] == [
        ("app_0", {"a": big["a"], "b": big["b"], "d": 4}),
        ("app_1", 2),
    ]
    # a, b and c as written whole, then c gone (kept as a row saying so) and d
    assert store_backend.sql("SELECT count(*) FROM app_parts WHERE {desktop}") == [(4,)]


@pytest.mark.timeout(120)
def test_the_private_server_dies_with_the_process_that_started_it(
    postgres_server: PrivatePostgres,
) -> None:
    """A test run killed by a signal runs no teardown: the private PostgreSQL server of
    tests/stores.py must not outlive it (pg_ctl's daemonized server did)."""
    started = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "from tests.stores import private_postgres\n"
        "with private_postgres() as server:\n"
        "    print(server.socket_dir, flush=True)\n"
        "    time.sleep(120)\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", started], stdout=subprocess.PIPE, text=True)
    postmaster: psutil.Process | None = None
    socket_dir: Path | None = None
    try:
        assert runner.stdout is not None
        socket_dir = Path(runner.stdout.readline().strip())
        pid = int((socket_dir / "data" / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        assert postmaster.is_running()
        runner.kill()  # SIGKILL: no finally, no atexit
        runner.wait()
        psutil.wait_procs([postmaster], timeout=30)
        assert not postmaster.is_running()
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        if runner.stdout is not None:
            runner.stdout.close()
        if postmaster is not None and postmaster.is_running():  # the test failed: not left
            postmaster.kill()
            psutil.wait_procs([postmaster], timeout=10)
        if socket_dir is not None and socket_dir.name.startswith("aotui-pg-"):
            shutil.rmtree(socket_dir, ignore_errors=True)  # the killed runner's cluster
