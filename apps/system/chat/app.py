"""ChatWithUser: the conversation between the agent and the user, plus contacts and groups.

Navigation → Conversations → one view per conversation (several can be mounted at once, each
with its own ``message_history`` list and ``send_message`` / ``reply_message`` operations).
The user's side posts into the "User" conversation with ``aotui say TEXT``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from aotui.sandbox.sdk import App, OperationCall, Ref, View, operation

AGENT = "Agent"

Message = dict[str, str]


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class Navigation(View["ChatApp"]):
    """The root: where conversations and contacts are."""

    template = """
<nav view="Navigation" description="Where to go in the chat app">
  <h2>Navigation</h2>
  <ul>
    <li{{ view.link_attrs(app.conversations_view, "Your conversations") }}>Conversations
      <ul><li>Unread Messages: {{ unread }}</li></ul></li>
    <li{{ view.link_attrs(app.contacts_view, "People you can talk to") }}>Contacts</li>
  </ul>
</nav>"""

    def context(self) -> Mapping[str, Any]:
        return {"unread": sum(c["unread"] for c in self.app.conversations.values())}


class Conversations(View["ChatApp"]):
    """Every conversation with its last message and unread count."""

    template = """
<section view="Conversations" description="All conversations">
  <h2>Conversations</h2>
  <ul>
  {%- for conv_id, conv in app.conversations.items() -%}
    <li{{ view.link_attrs("conversation:" ~ conv_id) }}>{{ conv["title"] }}<ul>
    {%- if "description" in conv and conv["description"] -%}
      <li>Description: {{ conv["description"] }}</li>
    {%- endif -%}
    <li>Type: {{ conv["type"] }}</li>
    <li>Last Message:
      {{ conv["messages"][-1]["text"] if conv["messages"] else "(no messages)" }}</li>
    <li>Unread Message Count: {{ conv["unread"] }}</li></ul></li>
  {%- endfor -%}
  </ul>
</section>"""


class Contacts(View["ChatApp"]):
    """People the agent can talk to."""

    template = """
<section view="Contacts" description="People you can talk to">
  <h2>Contacts</h2>
  <ul list="user[]:contacts" title="Contacts">
  {%- for c in app.contacts -%}
    <li {{ view.item(c["id"], c) }}>{{ c["name"] }}<ul><li>Email: {{ c["email"] }}</li></ul></li>
  {%- endfor -%}
  </ul>
</section>"""


class Conversation(View["ChatApp"]):
    """One conversation: profile, message history, send and reply."""

    template = """
{% set group = conv["type"] == "Group Chat" %}
<section view="{{ conv["title"] }}" description="Conversation with {{ conv["title"] }}">
  <h2>{{ "Group Chat Detail" if group else "Private Chat Detail" }}</h2>
{% if group %}
  <h3>Group Profile</h3><ul><li>Name: {{ conv["title"] }}</li>
  <li>Description: {{ conv.get("description", "") }}</li></ul>
{% else %}
  <h3>Peer Profile</h3><ul><li>Name: {{ conv["title"] }}</li>
  <li>Email: {{ conv.get("email", "") }}</li></ul>
{% endif %}
  <ol list="message[]:message_history" title="Message History">
  {%- for msg in conv["messages"] -%}
    <li {{ view.item(msg["id"], {"id": msg["id"], "sender": msg["sender"], "text": msg["text"]}) }}>
    {{- msg["text"] }}<ul>
    {%- if group or msg["sender"] == agent %}<li>Sender: {{ msg["sender"] }}</li>{% endif -%}
    <li>Time Stamp: {{ msg["time"] }}</li>
    {%- if "reply_to" in msg and msg["reply_to"] -%}
      <li>Reply To: {{ msg["reply_to"] }}</li>
    {%- endif -%}
    <li>Content: {{ msg["text"] }}</li></ul></li>
  {%- endfor -%}
  </ol>
  {{ view.buttons() }}
</section>"""

    def __init__(self, key: str, conv_id: str) -> None:
        super().__init__(key)
        self.conv_id = conv_id

    def context(self) -> Mapping[str, Any]:
        return {"conv": self.app.conversations[self.conv_id], "agent": AGENT}

    def on_mount(self) -> None:
        # Mounted, the conversation is in front of the agent: nothing in it is unread. (This
        # used to happen in render(), which must not change state.)
        self.app.reading(self.conv_id, True)

    def on_dismount(self) -> None:
        self.app.reading(self.conv_id, False)

    @operation
    def send_message(self, content: str) -> Message:
        """Send a message."""
        return self.app.add_message(self.conv_id, AGENT, content)

    @operation
    def reply_message(
        self, message_to_be_replied: Ref[Literal["message"]], content: str
    ) -> Message:
        """Reply to a message."""
        return self.app.add_message(
            self.conv_id, AGENT, content, reply_to=message_to_be_replied.key
        )


def _seed() -> dict[str, dict[str, Any]]:
    then = "2025-12-14 16:09:46"
    return {
        "user": {
            "title": "User",
            "type": "Private Chat",
            "email": "the person you work for",
            "unread": 0,
            "messages": [],
        },
        "johnny": {
            "title": "Johnny",
            "type": "Private Chat",
            "email": "johnny@example.com",
            "unread": 1,
            "messages": [{"id": "msg_1", "sender": "Johnny", "time": then, "text": "Hello"}],
        },
        "tui": {
            "title": "TUI Tech Group",
            "type": "Group Chat",
            "unread": 2,
            "description": "Tech support group for TUI project.",
            "messages": [
                {"id": "msg_2", "sender": "John", "time": then, "text": "Hello"},
                {"id": "msg_3", "sender": "Jane", "time": then, "text": "Who own this project?"},
            ],
        },
    }


class ChatApp(App):
    """The chat app: conversations by id, a message counter, contacts."""

    def __init__(self) -> None:
        super().__init__()
        self.conversations = _seed()
        self.next_id = 4
        self.contacts = [
            {"id": "johnny", "name": "Johnny", "email": "johnny@example.com"},
            {"id": "jane", "name": "Jane", "email": "jane@example.com"},
        ]
        self.navigation = Navigation("navigation")
        self.conversations_view = Conversations("conversations")
        self.contacts_view = Contacts("contacts")
        #: The conversations whose view is mounted: the agent sees their messages as they come.
        self.open: set[str] = set()

    def roots(self) -> list[View[Any]]:
        return [self.navigation]

    def resolve_view(self, key: str) -> View[Any] | None:
        if key.startswith("conversation:") and key.split(":", 1)[1] in self.conversations:
            return Conversation(key, key.split(":", 1)[1])
        fixed = {"conversations": self.conversations_view, "contacts": self.contacts_view}
        return fixed.get(key)

    def reading(self, conv_id: str, mounted: bool) -> None:
        """Note whether a conversation is in front of the agent; mounting it marks it read."""
        if mounted:
            self.open.add(conv_id)
            self.conversations[conv_id]["unread"] = 0
        else:
            self.open.discard(conv_id)

    def add_message(self, conv_id: str, sender: str, text: str, reply_to: str = "") -> Message:
        """Append a message; returns it."""
        if not text.strip():
            raise ValueError("a message needs some text")
        message = {"id": f"msg_{self.next_id}", "sender": sender, "time": _now(), "text": text}
        if reply_to:
            message["reply_to"] = reply_to
        self.next_id += 1
        conv = self.conversations[conv_id]
        conv["messages"].append(message)
        if sender != AGENT and conv_id not in self.open:
            conv["unread"] += 1
        return message

    def handle_event(self, call: OperationCall) -> Any:
        if call.operation != "user_message":
            return super().handle_event(call)
        return self.add_message("user", "User", str(call.args.get("text", "")))

    def serialize(self) -> Any:
        return {"conversations": self.conversations, "next_id": self.next_id}

    def restore(self, data: Any) -> None:
        self.conversations = data["conversations"]
        self.next_id = data["next_id"]


app = ChatApp()
