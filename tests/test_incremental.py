"""Cost grows with the change: views render when their inputs change, keyed data stores its parts.

The worker-level tests drive a real :class:`WorkerLoop` over a real ZeroMQ pair; the desktop
tests a real supervisor, its worker and its SQLite store.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import zmq

from aotui.protocol import codec
from aotui.protocol.messages import Ack, FragmentUpdate, Message, Mount, Operation, ViewFragment
from aotui.sandbox.sdk import App, View, operation
from aotui.sandbox.worker import WorkerLoop, load_app
from aotui.supervisor.store.state import AppEntry, DesktopState
from tests.conftest import BUNDLED_APPS, RunningDesktop
from tests.stores import StoreBackend

Start = Callable[..., RunningDesktop]

pytestmark = pytest.mark.timeout(60)


class Counted(App):
    """Two counters, each shown by its own view; every render is counted."""

    def __init__(self) -> None:
        super().__init__()
        self.values = {"a": 0, "b": 0}
        self.renders: dict[str, int] = {}

    def roots(self) -> list[View[Any]]:
        return [Counter("a"), Counter("b"), Unsaid("unsaid")]

    def resolve_view(self, key: str) -> View[Any] | None:
        return Child(key) if key.startswith("child:") else None


class Counter(View[Counted]):
    template = """<section view="Counter {{ view.key }}"><p>{{ value }}</p>
{% for i in range(3) %}{{ view.link("child:" ~ view.key ~ i, "Child " ~ i, "A child") }}{% endfor %}
{{ view.buttons() }}</section>"""

    def inputs(self) -> int:
        return self.app.values[self.key]

    def context(self) -> Mapping[str, Any]:
        self.app.renders[self.key] = self.app.renders.get(self.key, 0) + 1
        return {"value": self.app.values[self.key]}

    @operation
    def bump(self) -> int:
        """Add one."""
        self.app.values[self.key] += 1
        return self.app.values[self.key]

    @operation
    def touch(self) -> None:
        """Change nothing."""


class Unsaid(View[Counted]):
    """A view that does not say what it depends on: rendered after every operation."""

    template = '<section view="Unsaid"><p>{{ app.values["a"] + app.values["b"] }}</p></section>'

    def context(self) -> Mapping[str, Any]:
        self.app.renders[self.key] = self.app.renders.get(self.key, 0) + 1
        return {}


class Child(View[Counted]):
    template = '<section view="Child"><p>{{ view.key }}</p></section>'

    def inputs(self) -> int:
        return 0  # it shows only its key

    def context(self) -> Mapping[str, Any]:
        self.app.renders[self.key] = self.app.renders.get(self.key, 0) + 1
        return {}


def started(app: App, sock: zmq.Socket[bytes]) -> WorkerLoop:
    """A worker loop with the app's roots mounted and their first render sent."""
    loop = WorkerLoop(app, sock, -1)
    for root in app.roots():
        app.add_view(root)
        loop.mount(root.key, root=True)
    loop.flush(force=True)
    return loop


def replies(sock: zmq.Socket[bytes]) -> list[Message]:
    """Every message the worker sent so far."""
    found = []
    while sock.poll(0):
        found.append(codec.decode(sock.recv()))
    return found


_last_update: dict[int, FragmentUpdate | None] = {}


def run(loop: WorkerLoop, sock: zmq.Socket[bytes], view: str, op: str, **args: Any) -> Ack:
    """Run one operation; its ack (the update before it is kept for :func:`changed_views`)."""
    stable = {name: value for name, value in args.items() if name == "note"}
    loop.handle(Operation(1, view, op, args, stable, 5000))
    messages = replies(sock)
    assert isinstance(messages[-1], Ack), messages
    _last_update[id(loop)] = next((m for m in messages if isinstance(m, FragmentUpdate)), None)
    return messages[-1]


def changed_views(loop: WorkerLoop) -> list[str]:
    """The views the last :func:`run` sent again."""
    update = _last_update.get(id(loop))
    return [] if update is None else [fragment.key for fragment in update.views]


def test_only_views_whose_inputs_changed_render_again(channel: Any) -> None:
    sock, supervisor = channel
    app = Counted()
    loop = started(app, sock)
    replies(supervisor)
    assert app.renders == {"a": 1, "b": 1, "unsaid": 1}  # children are linked, never rendered
    assert run(loop, supervisor, "a", "bump").result == 1
    assert app.renders == {"a": 2, "b": 1, "unsaid": 2}
    assert changed_views(loop) == ["a", "unsaid"]
    run(loop, supervisor, "b", "touch")
    assert app.renders == {"a": 2, "b": 1, "unsaid": 3}  # a view that does not say: every time
    assert changed_views(loop) == []


def test_a_view_renders_when_mounted_again_and_children_only_once_mounted(channel: Any) -> None:
    sock, supervisor = channel
    app = Counted()
    loop = started(app, sock)
    loop.handle(Mount(1, "child:a0"))
    assert app.renders.get("child:a1") is None
    assert app.renders["child:a0"] == 1
    replies(supervisor)
    run(loop, supervisor, "a", "bump")
    assert app.renders["child:a0"] == 1  # its parent changed, it did not
    loop.dismount("a")  # the subtree goes; mounted again, it renders afresh
    loop.flush()
    gone = replies(supervisor)[-1]
    assert isinstance(gone, FragmentUpdate)
    assert sorted(f.key for f in gone.views if not f.mounted) == ["a", "child:a0"]
    loop.mount("a")
    loop.flush()
    assert app.renders["a"] == 3
    update = replies(supervisor)[-1]
    assert isinstance(update, FragmentUpdate)
    assert [f.key for f in update.views if f.mounted] == ["a"]


def notes_loop(sock: zmq.Socket[bytes], count: int) -> WorkerLoop:
    app = load_app(str(BUNDLED_APPS / "notes"), "app.py", f"notes{count}")
    loop = started(app, sock)
    for i in range(count):
        app.add(f"Note {i}", f"text {i}")  # type: ignore[attr-defined]
    loop.flush()
    return loop


def test_keyed_data_is_sent_whole_once_then_only_its_changed_parts(channel: Any) -> None:
    sock, supervisor = channel
    loop = notes_loop(sock, 3)
    replies(supervisor)
    first = run(loop, supervisor, "notes", "add_note", title="Four", text="4")
    assert first.state_changes is None
    assert sorted(first.state) == ["next_id", "note:note_1", "note:note_2", "note:note_3",
                                   "note:note_4"]  # fmt: skip
    second = run(loop, supervisor, "notes", "add_note", title="Five", text="5")
    assert second.state is None
    assert second.state_changes is not None
    assert sorted(second.state_changes) == ["next_id", "note:note_5"]
    assert second.state_changes["note:note_5"]["title"] == "Five"
    deleted = run(loop, supervisor, "notes", "delete_note", note="note_2")
    assert deleted.state_changes == {"note:note_2": None}


def frame_bytes(loop: WorkerLoop, sock: zmq.Socket[bytes], title: str) -> int:
    loop.handle(Operation(9, "notes", "add_note", {"title": title, "text": "x"}, {}, 5000))
    total = 0
    while sock.poll(0):
        total += len(sock.recv())
    return total


def test_what_an_operation_sends_does_not_grow_with_the_list(channel: Any) -> None:
    sock, supervisor = channel
    small = notes_loop(sock, 100)  # a full page already
    frame_bytes(small, supervisor, "first")  # the first operation of a run sends the data whole
    small_bytes = frame_bytes(small, supervisor, "second")
    big = notes_loop(sock, 3000)
    frame_bytes(big, supervisor, "first")
    big_bytes = frame_bytes(big, supervisor, "second")
    assert big_bytes <= small_bytes * 1.2, (small_bytes, big_bytes)


def test_older_notes_are_a_page_away(channel: Any) -> None:
    sock, supervisor = channel
    loop = notes_loop(sock, 120)
    replies(supervisor)
    root: ViewFragment = loop.sent["notes"]
    assert len(root.refs) == 50
    assert root.keys["notes[49]"] == "note_120"
    assert [link.key for link in root.links][-1] == "notes:page:2"
    loop.handle(Mount(1, "notes:page:2"))
    replies(supervisor)
    page = loop.sent["notes:page:2"]
    assert page.keys["notes_page_2[0]"] == "note_21"
    assert "[20 older notes](view:@notes:page:3)" in page.markdown


# --- the store -----------------------------------------------------------------------------------


def entry(app: str, data: Any) -> AppEntry:
    return AppEntry(app, "com.test", "/nowhere", "running", [], [], {}, data, 0, "")


def desktop(*entries: AppEntry) -> DesktopState:
    return DesktopState("d", 1.0, 1.0, len(entries), list(entries))


def test_stored_parts_lay_over_the_app_row_until_it_is_written_whole(
    store_backend: StoreBackend,
) -> None:
    store = store_backend.open()
    base = entry("app_0", {"a": 1, "b": 2})
    store.save_desktop(desktop(base))
    store.save_parts(desktop(base), base, {"b": 3, "c": 4})
    store.save_parts(desktop(base), base, {"a": None})
    loaded = store.load()
    assert loaded is not None
    assert loaded.apps[0].data == {"b": 3, "c": 4}
    store.save_apps(desktop(base), [entry("app_0", {"z": 0})])  # whole: the parts are in it
    loaded = store.load()
    assert loaded is not None
    assert loaded.apps[0].data == {"z": 0}
    store.close()
    assert store_backend.sql("SELECT count(*) FROM app_parts WHERE {desktop}") == [(0,)]


def test_parts_of_an_app_the_store_has_no_row_for_write_the_row(
    store_backend: StoreBackend,
) -> None:
    store = store_backend.open()
    fresh = entry("app_0", {"a": 1})
    store.save_parts(desktop(fresh), fresh, {"b": 2})
    loaded = store.load()
    assert loaded is not None
    assert loaded.apps[0].data == {"a": 1, "b": 2}
    store.close()


def test_a_write_of_some_apps_needs_only_their_entries_and_places(
    store_backend: StoreBackend,
) -> None:
    # The desktop writes an acknowledgement with its own fields and each app's place, not every
    # other app's entry (building those cost each operation time in proportion to the desktop).
    store = store_backend.open()
    one, two, three = entry("app_0", {"a": 0}), entry("app_1", 1), entry("app_2", {"c": 2})
    header = DesktopState("d", 1.0, 1.0, 3, [])
    places = {"app_0": 0, "app_1": 1, "app_2": 2}
    store.save_apps(header, [two], places)
    store.save_parts(header, three, {"d": 3}, places["app_2"])  # no row yet: written whole
    store.save_parts(header, one, {"b": 1}, places["app_0"])
    store.save_parts(header, one, {"a": None}, places["app_0"])
    loaded = store.load()
    assert loaded is not None
    assert [(a.app, a.data) for a in loaded.apps] == [
        ("app_0", {"b": 1}),
        ("app_1", 1),
        ("app_2", {"c": 2, "d": 3}),
    ]
    assert loaded.next_app == 3
    store.close()


def test_a_damaged_part_quarantines_its_app_and_is_kept(store_backend: StoreBackend) -> None:
    store = store_backend.open()
    one, two = entry("app_0", {"a": 1}), entry("app_1", {"a": 1})
    store.save_desktop(desktop(one, two))
    store.save_parts(desktop(one, two), one, {"a": 2})
    store.close()
    store_backend.sql("UPDATE app_parts SET data = ? WHERE {desktop} AND app = 'app_0'", b"\x00")
    store = store_backend.open()
    loaded = store.load()
    assert loaded is not None
    assert [a.app for a in loaded.apps] == ["app_1"]
    assert [q.app for q in store.quarantined] == ["app_0"]
    assert "checksum" in store.quarantined[0].problem
    store.save_desktop(loaded)  # a later save keeps the quarantined row and its parts
    store.close()
    count = "SELECT count(*) FROM app_parts WHERE {desktop} AND app = 'app_0'"
    assert store_backend.sql(count) == [(1,)]


# --- a real desktop ------------------------------------------------------------------------------


def notes_view(client: Any) -> str:
    text = client.snapshot()
    block = text[text.index('<application id="app_0"') :]
    match = re.search(r'<view id="(view_\d+)" name="Notes">', block)
    assert match, block
    return match.group(1)


def test_notes_store_only_changed_parts_and_survive_kill_9(
    start_desktop: Start, private_home: Path, tmp_path: Path
) -> None:
    desktop = start_desktop(["notes"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    run_op = '<context app_id="app_0" view_id="{}">execute {}</context>'.format
    view = notes_view(client)
    for i in range(6):
        client.execute(run_op(view, f"add_note --title N{i} --text t{i}"))
    client.snapshot()
    client.execute(run_op(view, "delete_note --note notes[0]"))
    client.snapshot()
    client.execute(run_op(view, 'edit_note --note notes[0] --text "edited"'))
    os.kill(desktop.process.pid, signal.SIGKILL)
    desktop.process.wait(timeout=10)
    # A copy: the store is opened in exclusive mode, and the next supervisor must find it as is.
    stored = private_home / "desktops" / f"{desktop.name}.db"
    copy = tmp_path / "copy.db"
    for suffix in ("", "-wal"):
        if Path(f"{stored}{suffix}").exists():
            shutil.copyfile(f"{stored}{suffix}", f"{copy}{suffix}")
    with contextlib.closing(sqlite3.connect(copy)) as db:
        parts = dict(db.execute("SELECT part, data IS NULL FROM app_parts WHERE app = 'app_0'"))
    # The first add stored the data whole; each later one stored its note and the counter.
    assert parts == {"next_id": 0, "note:note_1": 1} | {f"note:note_{i}": 0 for i in range(2, 7)}

    again = start_desktop(["notes"], name=desktop.name)
    text = again.client.snapshot()
    assert "[N0](note:notes[0])" not in text
    assert "- [N1](note:notes[0])\n    - Preview: edited" in text
    assert "- [N5](note:notes[4])" in text
    view = notes_view(again.client)
    added = again.client.execute(run_op(view, "add_note --title N6 --text t6"))
    assert added["results"][0]["id"] == "note_7"  # the counter came back too
