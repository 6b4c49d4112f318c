"""App data that records its own writes (issue 24): ``App.stored``.

An author who writes ``self.stored`` and nothing else — no ``inputs()``, ``serialize``, counters
or part names — loses no acknowledged effect to kill -9, and their views show each write at once;
a desktop stored by the code before this change restores on its first start after it.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq

from aotui.protocol import codec
from aotui.protocol.messages import ErrorReply, Operation
from aotui.sandbox.sdk import App, View, operation
from aotui.sandbox.stored_data import StoredData
from aotui.sandbox.worker import WorkerLoop
from aotui.supervisor.paths import store_path
from aotui.supervisor.store.state import AppEntry, DesktopState
from aotui.supervisor.store.store import DesktopStore
from tests.conftest import BUNDLED_APPS, RunningDesktop, wait_for
from tests.test_chaos_run import chaos_cli, faults_of
from tests.test_large_state import DROP, PUT, digest_shown, fill, restarted, stored_parts

Start = Callable[..., RunningDesktop]
#: What the Notes and chat apps stored before issue 24, as their code then wrote it (three notes,
#: one edited, one deleted; 255 messages from the user, the oldest 50 archived).
BEFORE = Path(__file__).parent / "golden" / "store_before_issue24.json"


def items(desktop: RunningDesktop) -> list[str]:
    """The Items view's lines, as the agent reads them."""
    text = desktop.client.snapshot()
    block = text[text.index('<view id="view_0" name="Items">') :].split("</view>")[0]
    return [line[2:] for line in block.splitlines() if "](item:items[" in line]


def run(desktop: RunningDesktop, command: str) -> Any:
    context = '<context app_id="app_0" view_id="view_0">'
    return desktop.client.execute(f"{context}{command}</context>")["results"][0]


def restart(desktop: RunningDesktop, app: str = "app_0") -> None:
    """kill -9 the app's worker and wait until another serves it."""
    pid = desktop.app_pid(app)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    def serving() -> bool:
        row = next(row for row in desktop.client.status()["apps"] if row["app"] == app)
        return row["state"] == "running" and row["pid"] not in (None, pid)

    wait_for(serving, 15, "the restart")


def test_an_author_who_writes_stored_only_loses_nothing_to_kill_9(start_desktop: Start) -> None:
    desktop = start_desktop(["carefree"])
    desktop.client.execute("<context>open --application app_0</context>")
    for text in ("milk", "eggs", "tea"):
        run(desktop, f'execute add_item --text "{text}"')
        assert items(desktop)[-1].startswith(f"[{text}]")  # shown at once: no inputs() to bump
    run(desktop, "execute star --item items[1]")
    assert items(desktop)[1].startswith("[★ eggs]")
    restart(desktop)
    assert [line.split("]")[0] for line in items(desktop)] == ["[milk", "[★ eggs", "[tea"]
    run(desktop, "execute remove --item items[0]")
    assert len(items(desktop)) == 2  # the agent reads the list again: items[1] is now tea
    run(desktop, "execute star --item items[1]")
    restart(desktop)
    assert [line.split("]")[0] for line in items(desktop)] == ["[★ eggs", "[★ tea"]


def _decoded(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        return {key: _decoded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decoded(item) for item in value]
    return value


def test_a_desktop_stored_before_issue_24_restores_on_its_first_start(
    start_desktop: Start,
) -> None:
    before = _decoded(json.loads(BEFORE.read_text()))
    apps = {
        "system.chat": "system/chat",
        "com.aotui.notes": "notes",
        "system.thoughts": "system/thoughts",
        "com.aotui.files": "files",
    }
    entries = [
        AppEntry(
            f"app_{n}", manifest_id, str(BUNDLED_APPS / path), "running", data=before[manifest_id]
        )
        for n, (manifest_id, path) in enumerate(apps.items())
    ]
    store = DesktopStore(store_path("old"))
    store.save_desktop(DesktopState("old", time.time(), time.time(), len(entries), entries))
    store.close()
    desktop = start_desktop(list(apps.values()), name="old")
    client = desktop.client
    text = client.snapshot()
    assert "Unread Messages: 255" in text  # the chat's data, as it was
    conversations = text.split("[Conversations](view:")[1].split(")")[0]
    client.execute(f'<context app_id="app_0">mount --view {conversations}</context>')
    user = client.snapshot().split("[User](view:")[1].split(")")[0]
    client.execute(f'<context app_id="app_0">mount --view {user}</context>')
    text = client.snapshot()
    assert "[message 254](message:message_history[49])" in text
    assert "50 earlier messages are archived" in text
    client.execute("<context>open --application app_1</context>")
    text = client.snapshot()
    assert "[Groceries](note:notes[0])" in text
    assert "Preview: eggs, milk" in text
    assert "Call Ann" not in text  # deleted then, deleted now
    add = (
        '<context app_id="app_1" view_id="view_0">execute add_note --title Four --text 4</context>'
    )
    assert client.execute(add)["results"][0]["id"] == "note_4"  # after the stored next_id
    client.say("after the upgrade")
    # What the first start renamed (msg:<id> → msg:<conversation>:<id>) survives a kill -9.
    restart(desktop)
    text = client.snapshot()
    assert "[after the upgrade](message:message_history[49])" in text
    assert "[message 254](message:message_history[48])" in text
    assert "50 earlier messages are archived" in text  # one page of 50, as before
    # The thoughts, one list then, are a key each after the first start.
    client.execute("<context>open --application app_2</context>")
    record = '<context app_id="app_2" view_id="view_0">execute record_thought --text four</context>'
    assert client.execute(record)["results"][0]["id"] == "thought_4"
    restart(desktop, "app_2")
    text = client.snapshot()
    assert "[Then write the answer](thought:thoughts[1])" in text
    assert "[four](thought:thoughts[2])" in text
    assert "- Tag: plan" in text
    # Where the Files app was (its data stored whole then), and a move written as a part since.
    docs = Path(os.path.realpath("/usr/share/doc"))
    if not (docs / "base-files" / "copyright").is_file():
        return  # the place stored then is not on this machine
    client.execute("<context>open --application app_3</context>")
    assert f"Current Directory: {docs / 'base-files'}" in client.snapshot()
    client.execute('<context app_id="app_3" view_id="view_0">execute go_up</context>')
    restart(desktop, "app_3")
    text = client.snapshot()
    assert f"Current Directory: {docs}\n" in text
    assert "[copyright](view:" in text  # the file opened then is still open


# --- the mapping itself, in-process -------------------------------------------------------------


def test_stored_values_are_copies_and_plain_data() -> None:
    stored = StoredData()
    note = {"title": "a", "tags": ("x", "y")}
    stored["n"] = note
    note["title"] = "changed after the write"
    read = stored["n"]
    assert read == {"title": "a", "tags": ["x", "y"]}  # as written; a tuple is stored as a list
    read["tags"].append("z")
    assert stored["n"]["tags"] == ["x", "y"]  # a read is the reader's own
    assert stored.written == {"n"}
    for bad, words in [
        ({1: "a"}, "str keys"),
        ({"a": {1, 2}}, "holds a set"),
        (None, "use del"),
    ]:
        with pytest.raises(TypeError, match=words):
            stored["bad"] = bad
    assert "bad" not in stored
    with pytest.raises(TypeError, match="non-empty str"):
        stored[""] = 1


class _Shown(View["_Shows"]):
    template = '<section view="Shown">{{ app.stored.get("a") }} {{ n }}</section>'

    def context(self) -> dict[str, Any]:
        return {"n": len(self.app.stored) if self.app.counts else 0}


class _Shows(App):
    counts = False

    def roots(self) -> list[View[Any]]:
        return [_Shown("shown")]


def test_a_views_default_inputs_are_what_it_read_of_stored() -> None:
    app = _Shows()
    (view,) = [app.add_view(root) for root in app.roots()]
    assert view.inputs() is None  # not rendered yet
    view.render()
    before = view.inputs()
    app.stored["b"] = 1  # not read by the view: it is not rendered again
    assert view.inputs() == before
    app.stored["a"] = 2
    assert view.inputs() != before
    app.counts = True  # it now counts the keys: one coming or going changes its inputs
    view.render()
    counted = view.inputs()
    app.stored["b"] = 3
    assert view.inputs() == counted
    del app.stored["b"]
    assert view.inputs() != counted


class _Listed(View["_Lists"]):
    template = '<section view="Listed"><p>{{ app.stored.get("items", []) }}</p></section>'

    @operation
    def add_then_fail(self, text: str) -> None:
        """Add, then fail."""
        self.app.stored["items"] = [*self.app.stored.get("items", []), text]
        raise LookupError("no")


class _Lists(App):
    def roots(self) -> list[View[Any]]:
        return [_Listed("listed")]


def test_a_handler_that_writes_stored_then_raises_takes_no_effect(
    channel: tuple[zmq.Socket[bytes], zmq.Socket[bytes]],
) -> None:
    worker_side, supervisor_side = channel
    app = _Lists()
    loop = WorkerLoop(app, worker_side, wake_fd=-1)
    app.add_view(_Listed("listed"))
    loop.mount("listed", root=True)
    app.stored["items"] = ["from a timer"]  # written, not yet sent: the next ack carries it
    loop.handle(Operation(1, "listed", "add_then_fail", {"text": "x"}, {}, 1000))
    assert supervisor_side.poll(5000)
    reply = codec.decode(supervisor_side.recv())
    assert isinstance(reply, ErrorReply)
    # The key was already waiting to be sent: only the count of writes tells this one apart.
    assert reply.data == {"outcome": "not applied"}
    assert loop.discarded


@pytest.mark.timeout(240)
def test_chaos_app_finds_nothing_lost_by_an_author_who_writes_stored_only(tmp_path: Path) -> None:
    # The same items as tests/apps/forgetful, whose planted bug chaos finds (test_chaos_run.py).
    done = chaos_cli(
        "app",
        str(Path(__file__).parent / "apps" / "carefree"),
        "--steps",
        "40",
        "--duration",
        "40",
        "--workdir",
        str(tmp_path / "w"),
        "--history",
        str(tmp_path / "history.jsonl"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no_acknowledged_effect_lost  PASS" in done.stdout
    assert "verdict: all checks hold" in done.stdout
    # What it claims to have survived: workers killed with SIGKILL around acknowledged effects
    # (one run here: 16 faults in 40 steps, 8 of them kill_worker; fewer if 40 s end it first).
    kinds = [kind for _, kind in faults_of(tmp_path / "history.jsonl")]
    assert "kill_worker" in kinds, done.stdout


@pytest.mark.timeout(120)
def test_stored_data_larger_than_a_frame_survives_kill_9_as_written(
    start_desktop: Start, private_home: Path
) -> None:
    desktop = start_desktop(["bigstore"])
    desktop.client.execute("<context>open --application app_0</context>")
    digest = fill(desktop, 12, 500)  # ~6 MB: past the 4 MiB frame, restored in chunks
    assert digest.startswith("12:")
    pid = desktop.app_pid("app_0")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(restarted(desktop, pid), 30, "the app to restart with its data")
    assert digest_shown(desktop) == digest
    # After a restore only what an operation writes goes: one part each, never the whole.
    after = desktop.client.execute(PUT.format(name="p12", kb=10))["results"][0]
    after = desktop.client.execute(DROP.format(name="p0"))["results"][0]
    assert after.startswith("12:")
    os.kill(desktop.process.pid, signal.SIGKILL)  # no shutdown write: the store as acked
    desktop.process.wait(timeout=10)
    assert stored_parts(private_home, desktop.name) >= 2  # p12 and p0's deletion, as parts
    again = start_desktop(["bigstore"], name=desktop.name)
    wait_for(lambda: digest_shown(again) == after, 30, "the app back after the supervisor's kill")


@pytest.mark.timeout(60)
def test_after_a_restore_an_operation_sends_only_what_it_wrote(
    start_desktop: Start, private_home: Path
) -> None:
    # Small data an app kept itself was sent whole again by the first ack of a run (its
    # restore() may have migrated it); App.stored is loaded as stored, so only the writes go.
    desktop = start_desktop(["bigstore"])
    desktop.client.execute("<context>open --application app_0</context>")
    fill(desktop, 3, 10)
    pid = desktop.app_pid("app_0")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(restarted(desktop, pid), 30, "the app to restart with its data")
    digest = desktop.client.execute(PUT.format(name="after", kb=1))["results"][0]
    os.kill(desktop.process.pid, signal.SIGKILL)  # no shutdown write: the store as acked
    desktop.process.wait(timeout=10)
    # p1 and p2 acked as parts in the first run (p0 came whole), and "after": no whole write.
    assert stored_parts(private_home, desktop.name) == 3
    again = start_desktop(["bigstore"], name=desktop.name)
    wait_for(lambda: digest_shown(again) == digest, 30, "the app back with all its data")
