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
    assert read.stderr == ""  # a session is set: no note about its absence

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
    assert table.pulled("a", "T1") is None
    assert table.pulled("b", "T2") is None
    assert table.last("a") == "T1"  # a is now the most recent
    assert table.pulled("c", "T3") is None  # b goes
    assert (table.last("a"), table.last("b"), table.last("c")) == ("T1", None, "T3")
    assert table.pulled("a", "T4") == "T1"
    assert table.forget("a") == "T4"
    assert len(table) == 1
    assert check_session_name("agent-1") == "agent-1"
    for bad in ("", "~x", "#x", "a b", "x" * 129, 7):
        with pytest.raises(AotuiError):
            check_session_name(bad)
