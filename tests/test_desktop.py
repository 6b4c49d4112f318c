"""End to end: a real supervisor, zygote and worker processes, driven through the client."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import psutil
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface.demo import import_demo_chat
from tests.conftest import TEST_APPS, RunningDesktop, wait_for

Start = Callable[..., RunningDesktop]


def view_id(markdown: str, label: str) -> str:
    """The view id an agent reads next to ``[label](view:…)``."""
    match = re.search(rf"\[{re.escape(label)}\]\(view:(view_\d+)", markdown)
    assert match, f"no view link {label!r} in:\n{markdown}"
    return match.group(1)


def app_block(markdown: str, app_id: str) -> str:
    start = markdown.index(f'<application id="{app_id}"')
    return markdown[start : markdown.index("</application>", start)]


def test_snapshot_has_system_views_and_apps(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat", "echo"])
    text = desktop.client.snapshot()
    assert text.startswith("<desktop>\n")
    assert text.endswith("</desktop>\n")
    assert '<view id="view_0" name="System Instructions">' in text
    assert '<view id="view_1" name="Applications">' in text
    assert '<view id="view_2" name="System Logs">' in text
    assert "- [ChatWithUser](application:app_0)" in text
    assert (
        "- [Echo](application:app_1)\n    - Description: Answers every operation at once.\n"
        "    - State: not running"
    ) in text
    assert "Desktop initialized." in text
    # the system app runs from the start, the other one does not
    assert '<application id="app_0" name="ChatWithUser">' in text
    assert '<application id="app_1"' not in text
    assert desktop.client.snapshot_id is not None


def test_open_execute_read_your_writes(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    text = client.snapshot()
    assert "Calls: 0" in app_block(text, "app_0")
    for expected in range(1, 6):
        result = client.execute('<context app_id="app_0" view_id="view_0">execute bump</context>')
        assert result == {"ran": 1, "results": [expected]}
        # acknowledged → visible in the very next snapshot
        assert f"Calls: {expected}" in client.snapshot()
    block = app_block(client.snapshot(), "app_0")
    assert "- [" in block
    assert "execute bump: ok" in block


def test_a_fresh_chat_shows_no_invented_conversations(start_desktop: Start) -> None:
    # A new desktop's chat used to show "Johnny" and a "TUI Tech Group" with 2 unread before the
    # user had said anything: demo data an agent took for real. Now it is the demo's alone.
    desktop = start_desktop(["system/chat"])
    client = desktop.client
    block = app_block(client.snapshot(), "app_0")
    assert "Unread Messages: 0" in block
    conversations, contacts = view_id(block, "Conversations"), view_id(block, "Contacts")
    client.execute(
        f'<context app_id="app_0">mount --view {conversations}; mount --view {contacts}</context>'
    )
    text = client.snapshot()
    block = app_block(text, "app_0")
    assert f'<view id="{conversations}" name="Conversations">' in block
    assert f'<view id="{contacts}" name="Contacts">' in block
    for invented in ("Johnny", "TUI Tech Group", "Jane", "example.com"):
        assert invented not in text
    assert re.findall(r"^- \[(.*?)\]\(view:view_\d+\)\n    - Type", block, re.M) == ["User"]
    assert re.findall(r"Unread Message Count: (\d+)", block) == ["0"]
    assert "(no messages)" in block
    assert "- [" not in block[block.index(f'<view id="{contacts}"') :]


def test_seed_003_chat_flow(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat"])
    client = desktop.client
    assert import_demo_chat(client)  # the conversations of seed 003, as `aotui demo` has them
    assert not import_demo_chat(client)  # once
    text = client.snapshot()
    conversations = view_id(app_block(text, "app_0"), "Conversations")
    client.execute(f'<context app_id="app_0">mount --view {conversations}</context>')
    block = app_block(client.snapshot(), "app_0")
    johnny, group = view_id(block, "Johnny"), view_id(block, "TUI Tech Group")
    client.execute(f'<context app_id="app_0">mount --view {johnny}; mount --view {group}</context>')
    block = app_block(client.snapshot(), "app_0")
    assert f'<view id="{johnny}" name="Johnny">' in block
    assert f'<view id="{group}" name="TUI Tech Group">' in block
    assert "2. [Who own this project?](message:message_history[1])" in block
    client.execute(
        f'<context app_id="app_0" view_id="{group}">\n'
        '  execute reply_message --message_to_be_replied message_history[1] --content "Me."\n'
        "</context>"
    )
    block = app_block(client.snapshot(), "app_0")
    group_view = block[block.index(f'<view id="{group}"') :]
    assert "3. [Me.](message:message_history[2])" in group_view
    assert "Reply To: msg_3" in group_view
    # the user's side of the chat
    client.say("hello from the user")
    user = view_id(block, "User")
    client.execute(f'<context app_id="app_0">mount --view {user}</context>')
    assert "hello from the user" in app_block(client.snapshot(), "app_0")


def test_refs_resolve_against_the_snapshot_the_agent_read(start_desktop: Start) -> None:
    desktop = start_desktop(["lister"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    client.snapshot()
    seen = client.snapshot_id
    assert seen is not None
    # the list changes after the agent read it
    client.execute('<context app_id="app_0" view_id="view_0">execute rotate</context>')
    client.execute('<context app_id="app_0" view_id="view_0">execute remove_first</context>')
    pick = '<context app_id="app_0" view_id="view_0">execute pick --item items[0]</context>'
    result = client.execute(pick, snapshot_id=seen)
    assert result["results"] == [{"value": {"id": "k0"}, "key": "k0"}]
    # `list[i]` means the view's only list
    result = client.execute(pick.replace("items[0]", "list[5]"), snapshot_id=seen)
    assert result["results"][0]["key"] == "k5"
    # a fresh snapshot sees the new order
    client.snapshot()
    assert client.execute(pick)["results"][0]["key"] == "k2"
    with pytest.raises(AotuiError) as stale:
        client.execute(pick, snapshot_id="T9999")
    assert stale.value.code is ErrorCode.E_STALE_STATE
    with pytest.raises(AotuiError) as missing:
        client.execute(pick.replace("items[0]", "items[500]"))
    assert missing.value.code is ErrorCode.E_NOT_FOUND
    assert "items[500]" in missing.value.message


def test_errors_are_typed_and_the_first_failure_stops_the_rest(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat", "crashy"])
    client = desktop.client
    client.execute("<context>open --application app_1</context>")
    op = '<context app_id="app_1" view_id="view_0">execute {}</context>'
    with pytest.raises(AotuiError) as failed:
        client.execute(op.format('fail --message "boom here"'))
    assert failed.value.code is ErrorCode.E_APP_ERROR
    assert "ValueError: boom here" in failed.value.message
    with pytest.raises(AotuiError) as denied:
        client.execute(op.format("forbidden"))
    assert denied.value.code is ErrorCode.E_PERMISSION
    # the app keeps serving
    assert client.execute(op.format("bump"))["results"] == [1]
    with pytest.raises(AotuiError) as stopped:
        client.execute(
            '<context app_id="app_1" view_id="view_0">execute bump; execute nope; execute bump'
            "</context>"
        )
    assert stopped.value.code is ErrorCode.E_NOT_FOUND
    assert stopped.value.data["ran"] == 1
    assert "command 2 of 3" in stopped.value.message
    assert "Count: 2" in client.snapshot()
    for bad, code in [
        ("open --application app_1", ErrorCode.E_INVALID_CMD),  # no <context>
        ("<context>open --application app_9</context>", ErrorCode.E_NOT_FOUND),
        ("<context>close --application app_0</context>", ErrorCode.E_INVALID_CMD),
        ('<context app_id="app_1">mount --view view_7</context>', ErrorCode.E_NOT_FOUND),
        (op.format("bump --extra 1"), ErrorCode.E_INVALID_CMD),
        (op.format("die --code notanumber"), ErrorCode.E_INVALID_CMD),
    ]:
        with pytest.raises(AotuiError) as error:
            client.execute(bad)
        assert error.value.code is code, bad


def test_structured_execute_and_manifest_ids(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    client = desktop.client
    client.execute("<context>open --application test.echo</context>")
    client.snapshot()
    result = client.execute(
        {"app": "app_0", "view": "view_0", "operation": "noop", "args": {"value": "x y"}}
    )
    assert result["results"] == ["x y"]


def test_collapse_show_hide_dismount(start_desktop: Start) -> None:
    desktop = start_desktop(["system/chat"])
    client = desktop.client
    client.execute("<context>collapse --application app_0</context>")
    assert '<application id="app_0"' not in client.snapshot()
    assert client.status()["apps"][0]["state"] == "collapsed"
    client.execute("<context>show --application app_0</context>")
    block = app_block(client.snapshot(), "app_0")
    conversations = view_id(block, "Conversations")
    client.execute(f'<context app_id="app_0">mount --view {conversations}</context>')
    assert f'<view id="{conversations}"' in app_block(client.snapshot(), "app_0")
    client.execute(f'<context app_id="app_0">hide --view {conversations}</context>')
    block = app_block(client.snapshot(), "app_0")
    assert f'<view id="{conversations}"' not in block
    assert f"(view:{conversations}, mounted, hidden)" in block
    client.execute(f'<context app_id="app_0">show --view {conversations}</context>')
    assert f'<view id="{conversations}"' in app_block(client.snapshot(), "app_0")
    client.execute(f'<context app_id="app_0">dismount --view {conversations}</context>')
    block = app_block(client.snapshot(), "app_0")
    assert f'<view id="{conversations}"' not in block
    assert f"[Conversations](view:{conversations})" in block


def test_input_lease(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    alice, bob = desktop.new_client(owner="alice"), desktop.new_client(owner="bob")
    alice.acquire("alice")
    with pytest.raises(AotuiError) as locked:
        bob.acquire("bob")
    assert locked.value.code is ErrorCode.E_LOCKED
    assert "alice" in locked.value.message
    with pytest.raises(AotuiError) as blocked:
        bob.execute("<context>open --application app_0</context>")
    assert blocked.value.code is ErrorCode.E_LOCKED
    alice.execute("<context>open --application app_0</context>")
    alice.release()
    bob.acquire("bob")
    bob.execute("<context>close --application app_0</context>")
    bob.release()


def test_hung_app_does_not_stall_others(start_desktop: Start) -> None:
    desktop = start_desktop(["slow", "echo"], operation_timeout_ms=1500)
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    client.snapshot()
    outcome: dict[str, object] = {}

    def hang() -> None:
        other = desktop.new_client()
        try:
            other.execute(
                '<context app_id="app_0" view_id="view_0">execute hang --seconds 30</context>'
            )
        except AotuiError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=hang)
    thread.start()
    time.sleep(0.2)  # let the hang begin
    began = time.monotonic()
    for _ in range(20):
        client.execute('<context app_id="app_1" view_id="view_0">execute bump</context>')
        client.snapshot()
    served_in = time.monotonic() - began
    thread.join(timeout=10)
    error = outcome["error"]
    assert isinstance(error, AotuiError)
    assert error.code is ErrorCode.E_TIMEOUT
    assert served_in < 1.0, f"the other app waited on the hung one ({served_in:.2f} s)"


def test_crash_mid_operation_restarts_with_state(start_desktop: Start) -> None:
    desktop = start_desktop(["crashy"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    op = '<context app_id="app_0" view_id="view_0">execute {}</context>'
    client.execute(op.format("bump"))
    client.execute(op.format("bump"))
    first_pid = desktop.app_pid("app_0")
    assert first_pid is not None
    with pytest.raises(AotuiError) as crashed:
        client.execute(op.format("die --code 3"))
    assert crashed.value.code is ErrorCode.E_APP_ERROR
    assert "exit 3" in crashed.value.message

    def restarted() -> bool:
        row = client.status()["apps"][0]
        return row["state"] == "running" and row["pid"] not in (None, first_pid)

    wait_for(restarted, 10, "the app to restart")
    row = client.status()["apps"][0]
    assert row["restarts"] == 1
    assert row["last_exit"] == "exit 3"
    assert not psutil.pid_exists(first_pid) or psutil.Process(first_pid).status() == "zombie"
    assert "Count: 2" in client.snapshot()  # the acknowledged state survived


def test_signals_subscribe_when_asked_not_at_the_first_next(start_desktop: Start) -> None:
    # A change made between signals() and the first next() was lost: the subscription was
    # made only then, after the change had been published (the first of a quiet desktop's
    # changes goes out at once, with no trailing edge to catch).
    desktop = start_desktop(["echo"])
    client = desktop.client
    client.execute("<context>open --application app_0</context>")
    time.sleep(0.3)  # past the throttle's window: the next change is published at once
    signals = client.signals(timeout_s=5)
    time.sleep(0.05)  # ZeroMQ's subscription handshake, done by its own thread
    client.execute('<context app_id="app_0" view_id="view_0">execute bump</context>')
    assert next(signals).reason == "dom_mutation"


def test_signals_are_published(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    client = desktop.client
    signals = client.signals(timeout_s=5)
    received: list[str] = []

    def listen() -> None:
        for signal in signals:
            received.append(signal.reason)
            if signal.reason == "app_opened":
                return

    thread = threading.Thread(target=listen)
    thread.start()
    time.sleep(0.3)  # PUB/SUB: the subscription must reach the publisher first
    desktop.new_client().execute("<context>open --application app_0</context>")
    thread.join(timeout=10)
    assert "app_opened" in received


def test_install_and_uninstall(start_desktop: Start) -> None:
    desktop = start_desktop(["echo"])
    client = desktop.client
    assert client.install(TEST_APPS / "crashy")["app"] == "app_1"
    with pytest.raises(AotuiError) as twice:
        client.install(TEST_APPS / "crashy")
    assert twice.value.code is ErrorCode.E_INVALID_CMD
    client.execute("<context>open --application app_1</context>")
    client.uninstall("app_1")
    assert "[Crashy](application:" not in client.snapshot()
    assert "app_1" not in {row["app"] for row in client.status()["apps"]}
    assert client.install(TEST_APPS / "crashy")["app"] == "app_2"  # ids are never reused
