"""A client's command id (supervisor/desktop/command_ids.py): a command sent again with the same
id runs at most once and gets its first reply — in the same supervisor, across a kill -9 of it,
and for a message cut off half-way, in either store (SQLite, PostgreSQL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface.client import Client
from tests.conftest import TEST_APPS, RunningDesktop
from tests.stores import StoreBackend

pytestmark = pytest.mark.timeout(90)

Start = Callable[..., RunningDesktop]
BUMP = '<context app_id="app_0" view_id="view_0">execute bump</context>'
HANG = '<context app_id="app_1" view_id="view_0">execute hang --seconds {s}</context>'
OPEN = "<context>open --application app_0</context><context>open --application app_1</context>"


def _store(backend: StoreBackend) -> dict[str, Any]:
    return {} if backend.kind == "sqlite" else {"store": backend.location}


def _count(client: Client) -> int:
    """The echo app's count, read without changing it (its view shows it)."""
    markdown = client.snapshot()
    line = next(line for line in markdown.splitlines() if "Calls:" in line)
    return int(line.split("Calls:")[1].split()[0].strip("*"))


def _kill(desktop: RunningDesktop) -> None:
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)


def test_a_retry_with_the_same_id_runs_nothing_and_gets_the_first_reply(
    start_desktop: Start, store_backend: StoreBackend
) -> None:
    desktop = start_desktop(["echo", "slow"], name="ids", **_store(store_backend))
    client = desktop.client
    client.execute(OPEN)
    first = client.execute(BUMP, command_id="c-1")
    assert first["results"] == [1]
    again = client.execute(BUMP, command_id="c-1")
    assert again == first
    assert _count(client) == 1, "the retry bumped nothing"
    # Another session (another connection) retrying the same id gets the same reply.
    other = desktop.new_client()
    assert other.execute(BUMP, command_id="c-1") == first
    # A new id runs; a command without an id is unaffected.
    assert client.execute(BUMP, command_id="c-2")["results"] == [2]
    assert client.execute(BUMP)["results"] == [3]
    # A read-only command with an id (it writes nothing) is answered with its first reply too.
    noop = '<context app_id="app_0" view_id="view_0">execute noop --value x</context>'
    assert client.execute(noop, command_id="r-1")["results"] == ["x"]
    assert client.execute(noop, command_id="r-1")["results"] == ["x"]
    # An id no store could record is refused before anything runs.
    with pytest.raises(AotuiError, match="'command_id' of exec must be a string of at most 200"):
        client.execute(BUMP, command_id="x" * 201)
    with pytest.raises(AotuiError, match="'command_id' of exec must be a non-empty") as bad:
        client.execute(BUMP, command_id="")
    assert bad.value.code is ErrorCode.E_INVALID_CMD
    assert _count(client) == 3


def test_a_retry_after_kill_9_gets_the_reply_the_store_recorded_with_the_effect(
    start_desktop: Start, store_backend: StoreBackend
) -> None:
    settings = _store(store_backend)
    desktop = start_desktop(["echo", "slow"], name="k9", **settings)
    desktop.client.execute(OPEN)
    first = desktop.client.execute(BUMP, command_id="kill-me")
    _kill(desktop)  # the reply reached us; a client that lost it retries on the next supervisor

    again = start_desktop(["echo", "slow"], name="k9", **settings)
    assert again.client.execute(BUMP, command_id="kill-me") == first
    assert _count(again.client) == 1


def test_a_message_cut_off_half_way_is_told_what_took_effect_and_runs_nothing_again(
    start_desktop: Start, store_backend: StoreBackend, tmp_path: Path
) -> None:
    """Two bumps are acknowledged, then the supervisor is killed while the third command runs:
    the retry learns that 2 of 3 took effect, and the store holds exactly those 2."""
    settings = {**_store(store_backend), "operation_timeout_ms": 20_000}
    desktop = start_desktop(["echo", "slow"], name="cut", **settings)
    desktop.client.execute(OPEN)
    message = BUMP + BUMP + HANG.format(s=15)
    sender = desktop.new_client(timeout_s=60)  # its reply never comes: the supervisor dies
    failures: list[BaseException] = []

    def send() -> None:
        try:
            sender.execute(message, command_id="m-1")
        except BaseException as exc:  # the supervisor dies under it
            failures.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while _count(desktop.client) < 2:  # both bumps answered (the hang is running)
        assert time.monotonic() < deadline, "the two bumps never ran"
        time.sleep(0.05)
    time.sleep(0.3)
    _kill(desktop)
    thread.join(timeout=20)  # told well before its 60 s timeout: the client sees the death
    assert not thread.is_alive(), "the client waited on a dead supervisor"
    assert len(failures) == 1
    cut = failures[0]
    assert isinstance(cut, AotuiError)
    assert cut.code is ErrorCode.E_UNAVAILABLE
    assert cut.data == {"supervisor_exited": desktop.process.pid, "took_effect": "unknown"}

    again = start_desktop(["echo", "slow"], name="cut", **settings)
    with pytest.raises(AotuiError) as told:
        again.client.execute(message, command_id="m-1")
    assert told.value.code is ErrorCode.E_UNAVAILABLE
    data = told.value.data
    assert (data["took_effect"], data["ran"], data["total"]) == ("partly", 2, 3)
    assert data["results"][:2] == [1, 2]
    assert "the first 2 of its 3 commands took effect" in told.value.message
    assert _count(again.client) == 2, "nothing ran again"


def test_a_retry_while_the_first_try_runs_waits_for_its_reply(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "slow"], name="twice", operation_timeout_ms=20_000)
    desktop.client.execute(OPEN)
    message = HANG.format(s=1) + BUMP
    replies: list[Any] = []

    def send(client: Client) -> None:
        replies.append(client.execute(message, command_id="both"))

    clients = [desktop.new_client(), desktop.new_client()]
    threads = [threading.Thread(target=send, args=(c,), daemon=True) for c in clients]
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(timeout=30)
    assert len(replies) == 2
    assert replies[0] == replies[1]
    assert replies[0]["results"] == [None, 1]
    assert _count(desktop.client) == 1


def test_batch_durability_remembers_ids_for_the_supervisor_s_life(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "slow"], name="batch", durability="batch")
    desktop.client.execute(OPEN)
    first = desktop.client.execute(BUMP, command_id="b-1")
    assert desktop.client.execute(BUMP, command_id="b-1") == first
    assert _count(desktop.client) == 1


def test_the_command_line_takes_a_command_id(start_desktop: Start) -> None:
    desktop = start_desktop(["echo", "slow"], name="cli")
    desktop.client.execute(OPEN)
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    command = [sys.executable, "-m", "aotui.supervisor", "exec", "--command-id", "cli-1", BUMP]
    outputs = [
        subprocess.run(
            [*command, *where], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        for _ in range(2)
    ]
    assert outputs[0] == outputs[1]
    assert _count(desktop.client) == 1


def test_a_reply_too_large_to_keep_is_kept_without_its_results(
    start_desktop: Start, store_backend: StoreBackend
) -> None:
    """What a client's ids make the store hold is bounded: past 64 KiB a reply is kept without
    its results, and the retry learns what ran (and still runs nothing)."""
    desktop = start_desktop(["echo", "slow"], name="big", **_store(store_backend))
    client = desktop.client
    client.execute(OPEN)
    big = "x" * (100 << 10)
    noop: dict[str, Any] = {
        "app": "app_0", "view": "view_0", "operation": "noop", "args": {"value": big}
    }  # fmt: skip
    first = client.execute(noop, command_id="big-1")
    assert first["results"] == [big]
    again = client.call("execute", **noop, command_id="big-1")  # the raw reply, every key
    assert again["ran"] == 1
    assert again["results"] == [None]
    assert "more than the 65536 kept for a retry" in again["results_dropped"]
    if store_backend.kind == "postgresql":  # (the SQLite file is the supervisor's alone)
        query = "SELECT max(length(reply)) FROM commands WHERE {desktop}"
        longest = store_backend.sql(query, desktop="big")[0][0]
        assert 0 < longest < 64 << 10


def _said(client: Client, text: str) -> int:
    """How many of the chat's stored messages are ``text``."""
    data = [app["data"] for app in client.export_state()["apps"] if app.get("data")]
    return sum(1 for d in data for v in d.values() if isinstance(v, dict) and v.get("text") == text)


def test_say_install_and_uninstall_with_an_id_run_once_across_a_kill_9(
    start_desktop: Start, store_backend: StoreBackend
) -> None:
    """The other changes a client makes carry their id into the store too: a retry gets the
    first reply (an install retried is not refused as already installed, a said message is not
    said twice), in the same supervisor and in the next one after kill -9."""
    settings = _store(store_backend)
    desktop = start_desktop(["system/chat"], name="others", **settings)
    client = desktop.client
    said = client.say("only once", command_id="s-1")
    assert client.say("only once", command_id="s-1") == said
    assert _said(client, "only once") == 1
    crashy = TEST_APPS / "crashy"
    installed = client.install(crashy, command_id="i-1")
    assert installed["app"] == "app_1"
    assert client.install(crashy, command_id="i-1") == installed
    with pytest.raises(AotuiError, match="already installed"):  # without the id: a new install
        client.install(crashy)
    _kill(desktop)  # the replies reached us; a client that lost them retries on the next one

    again = start_desktop(["system/chat"], name="others", **settings)
    client = again.client
    assert client.say("only once", command_id="s-1") == said
    assert client.install(crashy, command_id="i-1") == installed
    assert _said(client, "only once") == 1
    removed = client.uninstall("app_1", command_id="u-1")
    assert removed == {"app": "app_1", "id": installed["id"]}
    _kill(again)

    third = start_desktop(["system/chat"], name="others", **settings)
    client = third.client
    assert client.uninstall("app_1", command_id="u-1") == removed  # not "no app_1"
    assert "app_1" not in [app["app"] for app in client.status()["apps"]]
    # The command line sends the id too: said once more by the new id, never by the old.
    where = ["--desktop", third.name, "--socket", str(third.runtime)]
    for command_id in ("s-1", "s-2", "s-2"):
        subprocess.run(
            [sys.executable, "-m", "aotui.supervisor", "say", "--command-id", command_id,
             "only once", *where],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    assert _said(client, "only once") == 2


def test_an_import_with_an_id_runs_once_and_one_undone_is_answered_its_error(
    start_desktop: Start, store_backend: StoreBackend
) -> None:
    """An import's id is stored with its one write of the apps' data: retried (after kill -9
    too) it is answered and not run again, so a change made since stays; an import undone (an
    app would not start from its data) is answered its error again, and undoes nothing more."""
    settings = _store(store_backend)
    desktop = start_desktop(["echo"], name="imports", **settings)
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    client.execute(BUMP)
    state = client.export_state()  # the count is 1
    imported = client.import_state(state, command_id="imp-1")
    assert imported == {"imported": ["app_0"], "skipped": []}
    client.execute(BUMP)
    assert client.import_state(state, command_id="imp-1") == imported
    assert _count(client) == 2, "the retry took the count back"
    _kill(desktop)

    again = start_desktop(["echo"], name="imports", **settings)
    client = again.client
    assert client.import_state(state, command_id="imp-1") == imported
    assert _count(client) == 2
    broken = {**state, "apps": [{**state["apps"][0], "data": {"no_count": 1}}]}
    with pytest.raises(AotuiError) as first:
        client.import_state(broken, command_id="imp-2")
    assert first.value.message.startswith("the import was undone")
    with pytest.raises(AotuiError) as retried:
        client.import_state(broken, command_id="imp-2")
    assert (retried.value.code, retried.value.message) == (first.value.code, first.value.message)
    assert retried.value.data["replayed"] is True
    assert _count(client) == 2
