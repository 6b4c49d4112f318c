"""Sessions keep the snapshot their reader saw (CONTRACT §6), through the real CLI and client."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.server.sessions import SessionTable, check_session_name
from tests.conftest import RunningDesktop
from tests.rpc_peer import RpcPeer

Start = Callable[..., RunningDesktop]

NOTES = '<context app_id="app_0" view_id="view_0">{}</context>'


def aotui(
    desktop: RunningDesktop, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI on ``desktop``, with no session in its environment unless ``env`` gives one."""
    environment = dict(os.environ)
    for name in ("AOTUI_SESSION", "AOTUI_LEASE_TOKEN"):
        environment.pop(name, None)
    environment.update(env or {})
    where = ["--desktop", desktop.name, "--socket", str(desktop.runtime)]
    return subprocess.run(
        [sys.executable, "-m", "aotui.supervisor", *args, *where],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=environment,
    )


def notes_desktop(start_desktop: Start) -> RunningDesktop:
    """A desktop whose Notes app holds notes A, B and C (in that order)."""
    desktop = start_desktop(["notes"])
    desktop.client.execute("<context>open --application app_0</context>")
    for title in "ABC":
        desktop.client.execute(NOTES.format(f"execute add_note --title {title} --text {title}"))
    return desktop


def previews(desktop: RunningDesktop) -> dict[str, str]:
    """Each note's title → the preview line of its text, from a fresh pull."""
    lines = desktop.new_client().snapshot().splitlines()
    found = {}
    for line, following in itertools.pairwise(lines):
        title = re.match(r"\s*- \[(\w+)\]\(note:notes\[\d+\]\)", line)
        if title and "Preview: " in following:
            found[title[1]] = following.split("Preview: ", 1)[1].strip()
    return found


@pytest.mark.timeout(90)
def test_a_session_resolves_refs_against_its_own_pull(start_desktop: Start) -> None:
    """Reproduced: the agent read notes[1] = B; another actor deleted notes[0] and pulled;
    the agent's edit of notes[1] must still edit B (it edited C, the latest pull's notes[1])."""
    desktop = notes_desktop(start_desktop)
    agent = {"AOTUI_SESSION": "agent-1"}
    read = aotui(desktop, "snapshot", "--plain", env=agent)
    assert read.returncode == 0, read.stderr
    assert "[B](note:notes[1])" in read.stdout
    assert "no session" not in read.stderr  # a session is set: no note about its absence

    other = desktop.new_client()
    other.snapshot()
    other.execute(NOTES.format("execute delete_note --note notes[0]"))
    assert "[C](note:notes[1])" in other.snapshot()  # the latest pull: notes[1] is C now

    edit = aotui(
        desktop,
        "exec",
        NOTES.format("execute edit_note --note notes[1] --text edited"),
        env=agent,
    )
    assert edit.returncode == 0, edit.stderr
    assert previews(desktop) == {"B": "edited", "C": "C"}


@pytest.mark.timeout(90)
def test_without_a_session_the_cli_says_so(start_desktop: Start) -> None:
    desktop = notes_desktop(start_desktop)
    pulled = aotui(desktop, "snapshot")
    assert pulled.returncode == 0
    assert "no session" in pulled.stderr
    assert "AOTUI_SESSION" in pulled.stderr
    ran = aotui(desktop, "exec", NOTES.format("execute edit_note --note notes[0] --text x"))
    assert ran.returncode == 0, ran.stderr
    assert "no session" in ran.stderr
    quiet = aotui(desktop, "snapshot", "--quiet")
    assert quiet.stderr == ""
    assert quiet.stdout.startswith("<desktop>")
    opened = aotui(desktop, "exec", "<context>collapse --application app_0</context>")
    assert opened.returncode == 0
    assert opened.stderr == ""


@pytest.mark.timeout(90)
def test_the_lease_owner_is_the_session_without_one(start_desktop: Start) -> None:
    desktop = notes_desktop(start_desktop)
    holder = desktop.new_client()
    holder.acquire("holder", heartbeat=False)
    token = {"AOTUI_LEASE_TOKEN": holder.lease_token or ""}
    read = aotui(desktop, "snapshot", "--include-meta", "--json", env=token)
    assert read.returncode == 0, read.stderr
    meta = json.loads(read.stdout)["meta"]
    assert (meta["session"], meta["lease_owner"]) == ("~holder", "holder")
    assert [app["state"] for app in meta["apps"]] == ["running"]
    assert "[B](note:notes[1])" in json.loads(read.stdout)["markdown"]

    holder.snapshot()  # the holder's own client, with its own snapshot id
    holder.execute(NOTES.format("execute delete_note --note notes[0]"))
    assert "[C](note:notes[1])" in desktop.new_client().snapshot()  # the latest pull

    edit = aotui(
        desktop, "exec", NOTES.format("execute edit_note --note notes[1] --text edited"), env=token
    )
    assert edit.returncode == 0, edit.stderr
    assert "no session" not in edit.stderr
    assert previews(desktop) == {"B": "edited", "C": "C"}


@pytest.mark.timeout(60)
def test_a_bad_session_name_is_refused(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    refused = aotui(desktop, "snapshot", "--session", "~holder")
    assert refused.returncode == 64
    assert "E_INVALID_CMD" in refused.stderr
    assert "session" in refused.stderr
    with pytest.raises(AotuiError) as caught:
        desktop.client.call("snapshot", session=["not", "text"])
    assert caught.value.code is ErrorCode.E_INVALID_CMD


def test_the_session_table_is_bounded_least_recently_used_first() -> None:
    table = SessionTable(max_sessions=2)
    assert table.pulled("a", "T1") == []
    assert table.pulled("b", "T2") == []
    assert table.last("a") == "T1"  # a is now the most recent
    assert table.pulled("c", "T3") == ["T2"]  # b goes, and its snapshot is released
    assert (table.last("a"), table.last("b"), table.last("c")) == ("T1", None, "T3")
    assert table.lost("b")
    assert not table.lost("never-seen")
    assert table.pulled("a", "T4") == ["T1"]
    assert table.forget("a") == "T4"
    assert len(table) == 1
    assert table.pulled("b", "T5") == []
    assert not table.lost("b")
    assert check_session_name("agent-1") == "agent-1"
    for bad in ("", "~x", "#x", "a b", "x" * 129, 7):
        with pytest.raises(AotuiError):
            check_session_name(bad)


def test_a_client_over_its_budget_pushes_out_its_own_sessions_only() -> None:
    table = SessionTable(max_sessions=10, per_client=3)
    table.pulled("agent", "T1", client="A")
    released = [table.pulled(f"flood-{i}", f"T{i + 2}", client="B") for i in range(1100)]
    assert table.last("agent") == "T1"
    assert not table.lost("agent")
    assert table.held_by("B") == 3
    assert len(table) == 4
    assert sum(len(ids) for ids in released) == 1097  # each pushed-out pull is released
    # Many clients of one session each: the table's bound pushes the least recently used out,
    # the agent's too, which is then told its snapshot expired (never resolved live).
    for i in range(20):
        table.pulled(f"one-{i}", f"U{i}", client=f"C{i}")
    assert len(table) == 10
    assert table.last("agent") is None
    assert table.lost("agent")
    assert max(table.held_by(c) for c in ("A", "B", *(f"C{i}" for i in range(20)))) <= 3


def flood_one_connection(desktop: RunningDesktop, names: int) -> None:
    """One JSON-RPC client pulls under ``names`` distinct session names."""
    with RpcPeer(desktop.runtime / desktop.name / "rpc.sock") as flood:
        for i in range(names):
            flood.call("snapshot", session=f"flood-{i}", app="app_0")


def flood_many_connections(desktop: RunningDesktop, names: int) -> None:
    """``names`` JSON-RPC clients (one after another, as CLI calls are) pull a session each."""
    for i in range(names):
        with RpcPeer(desktop.runtime / desktop.name / "rpc.sock") as flood:
            flood.call("snapshot", session=f"flood-{i}", app="app_0")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flood", [flood_one_connection, flood_many_connections])
def test_another_clients_flood_of_sessions_never_redirects_an_agents_refs(
    start_desktop: Start, flood: Callable[[RunningDesktop, int], None]
) -> None:
    """Reproduced: another client pulled under 1,100 session names, which pushed the agent's
    session out of the table; the agent's notes[1] then resolved against the live list and
    edited C, a note it had not read there. Now one client's flood pushes out only its own
    sessions (the agent's edit lands on B, as it read), and a flood of many clients leaves the
    agent E_STALE_STATE (nothing ran)."""
    desktop = notes_desktop(start_desktop)
    agent = {"AOTUI_SESSION": "agent"}
    read = aotui(desktop, "snapshot", "--plain", env=agent)
    assert "[B](note:notes[1])" in read.stdout, read.stderr

    flood(desktop, 1100)
    other = desktop.new_client()
    other.snapshot()
    other.execute(NOTES.format("execute delete_note --note notes[0]"))  # the live list moved
    assert "[C](note:notes[1])" in other.snapshot()

    edit = aotui(
        desktop, "exec", NOTES.format("execute edit_note --note notes[1] --text edited"), env=agent
    )
    if flood is flood_one_connection:
        assert edit.returncode == 0, edit.stderr
        assert previews(desktop) == {"B": "edited", "C": "C"}  # what the agent read
    else:
        assert edit.returncode == 75, edit.stderr  # E_STALE_STATE, recoverable
        assert "E_STALE_STATE" in edit.stderr
        assert "'agent'" in edit.stderr
        assert "pull a new snapshot" in edit.stderr.lower()
        assert previews(desktop) == {"B": "B", "C": "C"}  # nothing acted on the live list
        again = aotui(desktop, "snapshot", "--plain", env=agent)  # a pull mends the session
        assert "[C](note:notes[1])" in again.stdout, again.stderr
        edit = aotui(
            desktop, "exec", NOTES.format("execute edit_note --note notes[1] --text ok"), env=agent
        )
        assert edit.returncode == 0, edit.stderr
        assert previews(desktop) == {"B": "B", "C": "ok"}
