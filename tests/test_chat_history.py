"""The bundled chat keeps a bounded history (issue 11 item 10): older messages are archived.

After about 6,000 messages the chat used to go over its 256 MB limit. Now each conversation keeps
its newest ``KEEP`` messages as they are and older ones compressed, a page per keyed part, up to
``ARCHIVE_BYTES``; the earlier pages still show them, and the view says what was archived or
deleted. Fast path first (the app in-process, tens of thousands of messages), then a real desktop.
"""

from __future__ import annotations

import os
import random
import re
import signal
import string
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from aotui.protocol import codec
from aotui.protocol.messages import AppState
from aotui.sandbox.render import render_view
from aotui.sandbox.sdk import App, OperationCall, View
from aotui.sandbox.worker import load_app
from tests.conftest import RunningDesktop, wait_for

Start = Callable[..., RunningDesktop]
CHAT = Path(__file__).parent.parent / "apps" / "system" / "chat"


@pytest.fixture
def chat() -> Iterator[Any]:
    """The chat app's module and a fresh app, loaded in this process."""
    app = load_app(str(CHAT), "app.py", "test_chat_history")
    module = sys.modules["aotui_app_test_chat_history"]
    yield module, app
    sys.modules.pop("aotui_app_test_chat_history", None)


def text_of(rng: random.Random, size: int) -> str:
    """Text that compresses about as little as prose does not: random letters and spaces."""
    return "".join(rng.choice(string.ascii_lowercase + "    ") for _ in range(size))


def shown(app: App, key: str) -> str:
    view = app.view(key)
    assert isinstance(view, View)
    return render_view(view.render()).markdown


def test_history_is_bounded_and_older_pages_stay_reachable(chat: Any) -> None:
    module, app = chat
    rng = random.Random(11)
    count = 30_000  # ~12 MB of text: far past what the archive keeps
    for i in range(count):
        app.handle_event(OperationCall("user_message", {"text": f"m{i} {text_of(rng, 400)}"}))
    user = app.stored["conv:user"]
    kept = len(app.kept()["user"])
    assert kept < module.KEEP + module.PAGE  # kept as they are
    archive = [app.stored[key]["zlib"] for key in app.stored if key.startswith("arch:")]
    assert sum(map(len, archive)) <= module.ARCHIVE_BYTES
    dropped = int(user["dropped"])
    archived = app.archived("user")
    assert dropped + archived + kept == count  # each message kept or counted
    assert dropped > 0
    # the newest page, and one deep in the archive, show their messages; the view says why
    page_one = shown(app, "conversation:user")
    assert f"m{count - 1} " in page_one
    assert f"{archived} earlier messages are archived" in page_one
    assert f"{dropped} of the earliest messages were deleted" in page_one
    deep = (archived + kept) // module.PAGE  # the oldest full page still kept
    oldest_kept = shown(app, f"conversation:user:page:{deep}")
    first = count - deep * module.PAGE
    assert f"m{first} " in oldest_kept
    assert f"m{first + module.PAGE - 1} " in oldest_kept
    # what is stored is bounded too, and restores to the same views
    data = app.serialize()
    frame = codec.encode(AppState(request_id=0, data=data))
    assert len(frame) < module.ARCHIVE_BYTES + (module.KEEP + module.PAGE) * 1024 + (64 << 10)
    assert "msg:user:msg_10" not in app.stored  # archived: its own part is gone
    again = type(app)()
    decoded = codec.decode(frame)
    assert isinstance(decoded, AppState)
    again.restore(decoded.data)
    again.on_start()
    assert shown(again, f"conversation:user:page:{deep}") == oldest_kept
    assert shown(again, "conversation:user") == page_one


def test_a_long_history_stored_before_the_bound_is_archived_on_restore(chat: Any) -> None:
    module, app = chat
    legacy: dict[str, Any] = app.serialize()
    for i in range(4, 2004):
        legacy[f"msg:msg_{i}"] = {
            "conv": "user",
            "id": f"msg_{i}",
            "sender": "User",
            "time": "2026-01-01 00:00:00",
            "text": f"old {i}",
        }
    legacy["next_id"] = 2004
    app.restore(legacy)  # as stored before issue 24: msg:<id>, the conversation inside
    app.on_start()
    kept = app.kept()["user"]
    assert len(kept) < module.KEEP + module.PAGE
    assert kept[-1] == "msg:user:msg_2003"
    assert app.archived("user") + len(kept) == 2000
    assert app.history("user", 0, 2) == [
        {"id": "msg_4", "sender": "User", "time": "2026-01-01 00:00:00", "text": "old 4"},
        {"id": "msg_5", "sender": "User", "time": "2026-01-01 00:00:00", "text": "old 5"},
    ]
    assert {"msg:msg_4", "msg:msg_2003", "msg:user:msg_2003"} <= app.changed_parts()
    assert "msg:msg_2003" not in app.stored  # renamed, and the old name is deleted


def test_the_message_length_is_bounded(chat: Any) -> None:
    module, app = chat
    with pytest.raises(ValueError, match="at most"):
        app.handle_event(OperationCall("user_message", {"text": "x" * (module.MAX_CHARS + 1)}))


# --- a real desktop: the worker's memory after a long history, and the pages -----------------


def uss(pid: int) -> int:
    return int(psutil.Process(pid).memory_full_info().uss)


def restarted(desktop: RunningDesktop, old: int | None) -> int | None:
    row = desktop.client.status()["apps"][0]
    return row["pid"] if row["state"] == "running" and row["pid"] not in (None, old) else None


def restart_of(desktop: RunningDesktop, old: int, what: str) -> int:
    """The pid of the worker that replaced ``old``, once it runs."""
    pid = wait_for(lambda: restarted(desktop, old), 30, what)
    assert isinstance(pid, int)
    return pid


def view_link(text: str, label: str, mounted: bool = True) -> str:
    """The view id of the link ``label``; ``mounted=False``: of one not mounted yet."""
    found = re.search(r"\[" + label + r"\]\(view:(view_\d+)" + ("" if mounted else r"\)"), text)
    assert found, label
    return found.group(1)


def test_a_long_chat_keeps_the_worker_small_and_its_history_reachable(
    start_desktop: Start,
) -> None:
    desktop = start_desktop(["system/chat"])
    client = desktop.client
    client.say("hello")
    fresh = desktop.app_pid("app_0")
    assert fresh is not None
    baseline = uss(fresh)
    # The fast path: 6,000 messages of 300 characters given to the chat as its stored data
    state = client.export_state()
    data = state["apps"][0]["data"]
    rng = random.Random(5)
    for i in range(100, 6100):
        data[f"msg:msg_{i}"] = {
            "conv": "user",
            "id": f"msg_{i}",
            "sender": "User",
            "time": "2026-01-01 00:00:00",
            "text": f"t{i} {text_of(rng, 300)}",
        }
    data["next_id"] = 6100
    client.import_state(state)
    pid = restart_of(desktop, fresh, "the chat to restart from the import")
    client.say("after the import")  # stores the bounded data whole
    os.kill(pid, signal.SIGKILL)  # (the restart from the import had all 3 MB to decode)
    pid = restart_of(desktop, pid, "the chat to restart after kill -9")
    client.say("after the restart")
    # Measured: 11.0 MB more than a fresh chat when it kept every message, 2.3 MB archived.
    grown = uss(pid) - baseline
    assert grown < 6 << 20, f"the chat's worker grew by {grown / 2**20:.1f} MB"
    # the history is still there, page by page: page 6 is archived
    text = client.snapshot()
    client.execute(
        f'<context app_id="app_0">mount --view {view_link(text, "Conversations")}</context>'
    )
    client.execute(
        f'<context app_id="app_0">mount --view {view_link(client.snapshot(), "User")}</context>'
    )
    text = client.snapshot()
    assert "earlier messages are archived" in text
    shown_now = view_link(text, "User")
    for _ in range(5):  # each page in turn: hidden once the next is mounted (the 256 KB budget)
        earlier = view_link(text, r"\d+ earlier messages", mounted=False)
        client.execute(
            f'<context app_id="app_0">mount --view {earlier}; hide --view {shown_now}</context>'
        )
        shown_now = earlier
        text = client.snapshot()
    # page 6 holds the 251st to 300th newest: "hello", 6,000 imported (t100 on), 2 said after
    assert "[t5802 " in text
    assert "[t5851 " in text
    assert "[t5852 " not in text
