"""Golden views: ``tests/golden/NAME.html`` renders exactly to ``tests/golden/NAME.md``.

The ``.md`` files are the specification of the output and are reviewed like code. After an
intended change to the renderer, rewrite them with

    AOTUI_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_render_golden.py

and read the diff before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aotui.sandbox.render import ViewLink, render_view

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("AOTUI_UPDATE_GOLDEN") == "1"
CASES = sorted(path.stem for path in GOLDEN.glob("*.html"))

# CONTRACT §4, the body of <view id="view_3" name="Conversation"> — what §3's markup renders to.
CONTRACT_VIEW_3 = """\
## Private Chat Detail
# [Project TUI](title:conversation_title)
### [Message History](message[]:message_history)
1. [Hello](message:message_history[0])
#### Operations
- [Send Message](operation:send_message)
    - Description: Send a message
    - Parameters:
        - content: string
- [Reply Message](operation:reply_message)
    - Parameters:
        - message_to_be_replied: message
        - content: string
"""


def test_golden_cases_exist() -> None:
    assert {
        "contract_conversation",
        "chat_navigation",
        "chat_conversations",
        "chat_johnny",
        "chat_group",
        "kitchen_sink",
        "form",
        "malformed",
    } <= set(CASES)


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str) -> None:
    rendered = render_view((GOLDEN / f"{name}.html").read_text(encoding="utf-8")).markdown
    expected_path = GOLDEN / f"{name}.md"
    if UPDATE:
        expected_path.write_text(rendered, encoding="utf-8")
    assert rendered == expected_path.read_text(encoding="utf-8")


def test_contract_conversation_is_the_snapshot_of_contract_section_4() -> None:
    assert (GOLDEN / "contract_conversation.md").read_text(encoding="utf-8") == CONTRACT_VIEW_3


def test_contract_navigation_and_conversations_after_the_supervisor_assigns_ids() -> None:
    ids = {"@conversations": "view_1", "@contacts": "view_2", "@conversation:johnny": "view_3"}
    navigation = render_view(
        '<nav view="Navigation"><h2>Navigation</h2><ul>'
        '<li view-link="conversations">Conversations</li><li view-link="contacts">Contacts</li>'
        "</ul></nav>"
    )
    conversations = render_view(
        '<section view="Conversations"><h2>Conversations</h2><ul>'
        '<li view-link="conversation:johnny">Johnny<ul><li>Last Message: Hello</li></ul></li>'
        "</ul></section>"
    )

    def assign(markdown: str) -> str:
        for key, view_id in ids.items():
            markdown = markdown.replace(f"(view:{key})", f"(view:{view_id})")
        return markdown

    assert assign(navigation.markdown) == (
        "## Navigation\n- [Conversations](view:view_1)\n- [Contacts](view:view_2)\n"
    )
    assert assign(conversations.markdown) == (
        "## Conversations\n- [Johnny](view:view_3)\n    - Last Message: Hello\n"
    )
    assert conversations.links == (ViewLink("conversation:johnny", "Johnny", ""),)
