"""ChatWithUser: the conversation between the agent and the user, plus contacts and groups.

Navigation → Conversations → one view per conversation (several can be mounted at once, each
with its own ``message_history`` list and ``send_message`` / ``reply_message`` operations).
The user's side posts into the "User" conversation with ``aotui say TEXT``.
"""

from __future__ import annotations

import time
from html import escape
from typing import Any

from aotui.sandbox.sdk import App, OperationCall, View, operation

AGENT = "Agent"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _json_attr(value: Any) -> str:
    import json

    return escape(json.dumps(value, ensure_ascii=False), quote=True)


class Navigation(View):
    """The root: where conversations and contacts are."""

    def render(self) -> str:
        chat = self.chat
        unread = sum(c["unread"] for c in chat.conversations.values())
        return f"""
<nav view="Navigation" description="Where to go in the chat app">
  <h2>Navigation</h2>
  <ul>
    <li{self.link_attrs(chat.conversations_view, "Your conversations")}>Conversations
      <ul><li>Unread Messages: {unread}</li></ul></li>
    <li{self.link_attrs(chat.contacts_view, "People you can talk to")}>Contacts</li>
  </ul>
</nav>"""

    @property
    def chat(self) -> ChatApp:
        assert isinstance(self.app, ChatApp)
        return self.app


class Conversations(View):
    """Every conversation with its last message and unread count."""

    def render(self) -> str:
        chat = self.app
        assert isinstance(chat, ChatApp)
        items = []
        for conv_id, conv in chat.conversations.items():
            last = conv["messages"][-1]["text"] if conv["messages"] else "(no messages)"
            view = chat.view(f"conversation:{conv_id}")
            assert view is not None
            details = [f"<li>Type: {escape(conv['type'])}</li>"]
            if conv.get("description"):
                details.insert(0, f"<li>Description: {escape(conv['description'])}</li>")
            details += [
                f"<li>Last Message: {escape(last)}</li>",
                f"<li>Unread Message Count: {conv['unread']}</li>",
            ]
            items.append(
                f"<li{self.link_attrs(view)}>{escape(conv['title'])}<ul>{''.join(details)}</ul></li>"
            )
        return f"""
<section view="Conversations" description="All conversations">
  <h2>Conversations</h2>
  <ul>{"".join(items)}</ul>
</section>"""


class Contacts(View):
    """People the agent can talk to."""

    def render(self) -> str:
        chat = self.app
        assert isinstance(chat, ChatApp)
        items = "".join(
            f'<li key="{escape(c["id"])}" data-value="{_json_attr(c)}">{escape(c["name"])}'
            f"<ul><li>Email: {escape(c['email'])}</li></ul></li>"
            for c in chat.contacts
        )
        return f"""
<section view="Contacts" description="People you can talk to">
  <h2>Contacts</h2>
  <ul list="user[]:contacts" title="Contacts">{items}</ul>
</section>"""


class Conversation(View):
    """One conversation: profile, message history, send and reply."""

    def __init__(self, key: str, conv_id: str) -> None:
        super().__init__(key)
        self.conv_id = conv_id

    @property
    def conv(self) -> dict[str, Any]:
        chat = self.app
        assert isinstance(chat, ChatApp)
        conversation: dict[str, Any] = chat.conversations[self.conv_id]
        return conversation

    def render(self) -> str:
        conv = self.conv
        conv["unread"] = 0
        group = conv["type"] == "Group Chat"
        messages = []
        for msg in conv["messages"]:
            details = []
            if group or msg["sender"] == AGENT:
                details.append(f"<li>Sender: {escape(msg['sender'])}</li>")
            details.append(f"<li>Time Stamp: {escape(msg['time'])}</li>")
            if msg.get("reply_to"):
                details.append(f"<li>Reply To: {escape(msg['reply_to'])}</li>")
            details.append(f"<li>Content: {escape(msg['text'])}</li>")
            value = {"id": msg["id"], "sender": msg["sender"], "text": msg["text"]}
            messages.append(
                f'<li key="{escape(msg["id"])}" data-value="{_json_attr(value)}">'
                f"{escape(msg['text'])}<ul>{''.join(details)}</ul></li>"
            )
        if group:
            profile = (
                f"<h3>Group Profile</h3><ul><li>Name: {escape(conv['title'])}</li>"
                f"<li>Description: {escape(conv.get('description', ''))}</li></ul>"
            )
        else:
            profile = (
                f"<h3>Peer Profile</h3><ul><li>Name: {escape(conv['title'])}</li>"
                f"<li>Email: {escape(conv.get('email', ''))}</li></ul>"
            )
        heading = "Group Chat Detail" if group else "Private Chat Detail"
        return f"""
<section view="{escape(conv["title"])}" description="Conversation with {escape(conv["title"])}">
  <h2>{heading}</h2>
  {profile}
  <ol list="message[]:message_history" title="Message History">{"".join(messages)}</ol>
  <button operation="send_message" description="Send a message"
          args='{{"content": "string"}}'>Send Message</button>
  <button operation="reply_message" description="Reply to a message"
          args='{{"message_to_be_replied": "message", "content": "string"}}'>Reply Message</button>
</section>"""

    @operation("send_message")
    def send_message(self, call: OperationCall) -> dict[str, str]:
        chat = self.app
        assert isinstance(chat, ChatApp)
        return chat.post(self.conv_id, AGENT, str(call.args["content"]))

    @operation("reply_message")
    def reply_message(self, call: OperationCall) -> dict[str, str]:
        chat = self.app
        assert isinstance(chat, ChatApp)
        replied = call.stable_keys.get("message_to_be_replied")
        if replied is None:
            raise ValueError(
                "message_to_be_replied must reference a message, e.g. message_history[0]"
            )
        return chat.post(self.conv_id, AGENT, str(call.args["content"]), reply_to=str(replied))


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

    def roots(self) -> list[View]:
        return [self.navigation]

    def resolve_view(self, key: str) -> View | None:
        if key.startswith("conversation:") and key.split(":", 1)[1] in self.conversations:
            return Conversation(key, key.split(":", 1)[1])
        fixed = {"conversations": self.conversations_view, "contacts": self.contacts_view}
        return fixed.get(key)

    def post(self, conv_id: str, sender: str, text: str, reply_to: str = "") -> dict[str, str]:
        """Append a message; returns it."""
        if not text.strip():
            raise ValueError("a message needs some text")
        message = {"id": f"msg_{self.next_id}", "sender": sender, "time": _now(), "text": text}
        if reply_to:
            message["reply_to"] = reply_to
        self.next_id += 1
        conv = self.conversations[conv_id]
        conv["messages"].append(message)
        if sender != AGENT:
            conv["unread"] += 1
        return message

    def handle_event(self, call: OperationCall) -> Any:
        if call.operation != "user_message":
            return super().handle_event(call)
        return self.post("user", "User", str(call.args.get("text", "")))

    def serialize(self) -> Any:
        return {"conversations": self.conversations, "next_id": self.next_id}

    def restore(self, data: Any) -> None:
        self.conversations = data["conversations"]
        self.next_id = data["next_id"]


app = ChatApp()
