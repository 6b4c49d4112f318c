"""The chat's Navigation view renders again only when what it shows (the unread total) changes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aotui.sandbox.render import render_view
from aotui.sandbox.worker import load_app
from aotui.supervisor.interface.demo import with_demo_chat

pytestmark = pytest.mark.timeout(30)

CHAT = Path(__file__).parent.parent / "apps" / "system" / "chat"


@pytest.fixture
def chat() -> Iterator[Any]:
    app = load_app(str(CHAT), "app.py", "test_chat_render")
    yield sys.modules["aotui_app_test_chat_render"], app
    sys.modules.pop("aotui_app_test_chat_render", None)


def test_navigation_inputs_follow_the_unread_total(chat: Any) -> None:
    module, app = chat
    app.restore(with_demo_chat(app.serialize()))  # conversations besides the user's
    app.on_start()
    navigation = app.add_view(app.roots()[0])  # as the worker registers its roots
    first, second = list(app.conversations())[:2]
    app.reading(first, True)  # the agent has this conversation open
    before = navigation.inputs()
    app.add_message(first, module.AGENT, "hello")  # the agent's own message: nothing unread
    app.add_message(first, "Johnny", "hi back")  # read as it arrives: the conversation is open
    assert navigation.inputs() == before  # not rendered again: it would show the same
    app.add_message(second, "Johnny", "are you there?")
    assert navigation.inputs() != before
    unread = sum(c["unread"] for c in app.conversations().values())
    text = render_view(navigation.render()).markdown
    assert f"Unread Messages: {unread}" in text
