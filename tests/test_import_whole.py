"""An import takes effect whole or not at all (issue 20 D14), through a real desktop.

A crafted import (data nested 40 deep, past the codec's depth limit) used to close the chat app,
replace its conversation and then fail, leaving the app not running. Now the desktop checks every
app's data (types, integers, depth, budgets, frames) before it changes anything, and a failure
while applying gives every app back what it had. Data 600 deep, 100 000 deep or an integer past
64 bits is a clear ``E_INVALID_CMD`` naming where, never a traceback.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface.plain_data import DATA_MAX_DEPTH, state_fault
from aotui.supervisor.store.state import AppEntry, DesktopState
from tests.conftest import RunningDesktop
from tests.test_state_transfer import aotui

Start = Callable[..., RunningDesktop]


def nested(levels: int) -> Any:
    """``levels`` lists, one in another, around a string."""
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def app_block(snapshot: str, app: str) -> str:
    """The ``<application id=app>`` block of a snapshot."""
    found = re.search(rf'<application id="{app}".*?</application>', snapshot, re.S)
    assert found is not None, snapshot
    return found.group(0)


def crafted_import(desktop: RunningDesktop, state: dict[str, Any]) -> Any:
    """Send ``state`` as the import's one chunk, past every check the Client makes."""
    blob = msgpack.packb(state, use_bin_type=True)
    return desktop.client.call("import", chunk=blob, offset=0, total_bytes=len(blob))


def chat_desktop(start_desktop: Start) -> RunningDesktop:
    """The system chat (app_0, a conversation view mounted, a user message) and echo (app_1)."""
    desktop = start_desktop(["system/chat", "echo"])
    client = desktop.client
    client.execute("<context>open --application app_0; open --application app_1</context>")
    client.say("keep this conversation")
    client.snapshot()
    client.execute('<context app_id="app_0">mount --view view_1</context>')
    client.execute('<context app_id="app_1" view_id="view_0">execute bump</context>')
    return desktop


def test_a_too_deep_import_is_refused_and_changes_nothing(start_desktop: Start) -> None:
    desktop = chat_desktop(start_desktop)
    client = desktop.client
    before = client.export_state()
    shown = client.snapshot()
    state = copy.deepcopy(before)
    state["apps"][0]["data"]["conv:user"] = {"title": "Replaced", "junk": nested(40)}

    with pytest.raises(AotuiError) as refused:
        crafted_import(desktop, state)
    assert refused.value.code is ErrorCode.E_INVALID_CMD
    assert "apps[0].data['conv:user'].junk[0]" in refused.value.message
    assert f"deeper than {DATA_MAX_DEPTH} levels" in refused.value.message

    with pytest.raises(AotuiError) as early:  # the Client refuses it before sending
        client.import_state(state)
    assert early.value.code is ErrorCode.E_INVALID_CMD

    status = {row["app"]: row["state"] for row in client.status()["apps"]}
    assert status == {"app_0": "running", "app_1": "running"}
    after = client.snapshot()
    assert app_block(after, "app_0") == app_block(shown, "app_0")
    assert "keep this conversation" in app_block(after, "app_0")
    assert client.export_state()["apps"] == before["apps"]


def test_an_import_that_fails_midway_is_undone(start_desktop: Start) -> None:
    desktop = chat_desktop(start_desktop)
    client = desktop.client
    client.execute("<context>collapse --application app_1</context>")
    before = client.export_state()
    shown = client.snapshot()
    state = copy.deepcopy(before)
    state["apps"][0]["data"]["msg:user:msg_1"]["text"] = "a replaced conversation"
    # Plain, small, shallow: it passes every check, but echo's restore() cannot read it. The
    # chat is opened again from its new data first; then echo fails to start.
    state["apps"][1]["data"] = {"no_count": 1}

    with pytest.raises(AotuiError) as failed:
        client.import_state(state)
    assert failed.value.message.startswith("the import was undone: app_0, app_1 have their data")
    assert "What failed: " in failed.value.message

    status = {row["app"]: row["state"] for row in client.status()["apps"]}
    assert status == {"app_0": "running", "app_1": "collapsed"}
    after = client.snapshot()
    assert app_block(after, "app_0") == app_block(shown, "app_0")  # its views as they were
    assert "a replaced conversation" not in after
    assert client.export_state()["apps"][0]["data"] == before["apps"][0]["data"]
    assert client.export_state()["apps"][1]["data"] == {"count": 1}
    client.execute("<context>show --application app_1</context>")
    assert client.execute('<context app_id="app_1" view_id="view_0">execute bump</context>')[
        "results"
    ] == [2]


@pytest.mark.timeout(90)
def test_the_cli_refuses_deep_data_and_big_integers_clearly(start_desktop: Start) -> None:
    desktop = chat_desktop(start_desktop)
    before = desktop.client.export_state()

    deep = copy.deepcopy(before)
    deep["apps"][1]["data"] = {"count": nested(600)}
    refused = aotui(desktop, "import", desktop.name, stdin=json.dumps(deep))
    assert refused.returncode == 64, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "E_INVALID_CMD" in refused.stderr
    assert "apps[1].data.count[0]" in refused.stderr

    text = json.dumps(before).replace('"count": 1', '"count": ' + "[" * 100_000 + "]" * 100_000)
    too_deep_for_json = aotui(desktop, "import", desktop.name, stdin=text)
    assert too_deep_for_json.returncode == 64, too_deep_for_json.stderr
    assert "Traceback" not in too_deep_for_json.stderr

    big = copy.deepcopy(before)
    big["apps"][1]["data"] = {"count": 1, "items": [1, 2, 3, 2**64]}
    refused = aotui(desktop, "import", desktop.name, stdin=json.dumps(big))
    assert refused.returncode == 64, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "apps[1].data.items[3]" in refused.stderr
    assert "2**64-1" in refused.stderr

    exported = aotui(desktop, "export", desktop.name)  # nothing of it got in
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["apps"] == before["apps"]


def test_deep_data_is_exported_by_no_recursion_and_refused_by_the_walk() -> None:
    entry = AppEntry("app_0", "com.x.y", "/apps/y", "running", data=nested(100_000))
    state = DesktopState("d", 1.0, 2.0, 1, [entry]).to_dict()  # asdict recursed past 600
    assert state["apps"][0]["data"] is entry.data
    fault = state_fault(state)
    assert fault is not None
    assert fault.startswith("apps[0].data" + "[0]" * DATA_MAX_DEPTH + " is nested deeper")
    huge = {**state, "id": 10**5000, "apps": [{**state["apps"][0], "data": None}]}
    assert state_fault(huge) == (
        "id is an integer of 16610 bits, outside the range the desktop stores (-2**63 to 2**64-1)"
    )
