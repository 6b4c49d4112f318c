"""ChatWithUser: the conversation between the agent and the user, plus contacts and groups.

A new desktop's chat holds the conversation with the user only, empty; other conversations and
contacts come from stored or imported data (``aotui demo`` imports some).

Navigation → Conversations → one view per conversation (several can be mounted at once, each
with its own ``message_history`` list and ``send_message`` / ``reply_message`` operations).
The user's side posts into the "User" conversation with ``aotui say TEXT``. A conversation view
shows its newest :data:`PAGE` messages and links to the earlier ones (key
``conversation:<id>:page:<n>``, ``n`` from 2).

What the app keeps is bounded, in memory and in its stored data: each conversation keeps its
newest :data:`KEEP` messages as they are (a keyed part each); older ones are archived
:data:`PAGE` at a time into one compressed part per page, still shown by the earlier pages; past
:data:`ARCHIVE_BYTES` of archive the oldest archived pages are deleted, and the conversation's
view says how many messages went.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Mapping
from typing import Any, Literal

from aotui.sandbox.sdk import App, OperationCall, Ref, View, operation

AGENT = "Agent"
#: Messages shown per conversation view: the newest in the conversation, earlier ones a page
#: (a link) further each, so sending a message costs the same in a short chat or a long one.
PAGE = 50
#: Messages per conversation kept as they are; older ones are archived a page at a time.
KEEP = 200
#: Compressed archive kept across all conversations; past it the oldest pages are deleted.
ARCHIVE_BYTES = 2 << 20
#: The longest message, so that the kept messages are bounded in bytes too.
MAX_CHARS = 64 << 10

Message = dict[str, str]
#: One archived page: its number in its conversation (from 1), message count, compressed JSON.
ArchivePage = tuple[int, int, bytes]


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

    def inputs(self) -> int:
        # All it shows that can change is the unread total: a message the agent sends (most
        # operations) leaves it as it was, and then this view is not rendered again.
        return self._unread()

    def context(self) -> Mapping[str, Any]:
        return {"unread": self._unread()}

    def _unread(self) -> int:
        return sum(c["unread"] for c in self.app.conversations.values())


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

    def inputs(self) -> int:
        return self.app.version


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
  {% if not app.contacts %}<p>No contacts yet.</p>{% endif %}
</section>"""

    def inputs(self) -> int:
        return self.app.contacts_version  # the agent never changes them; an import may


class Conversation(View["ChatApp"]):
    """One conversation: profile, message history, send and reply."""

    template = """
{% set group = conv["type"] == "Group Chat" %}
{% if page > 1 %}
<section view="{{ conv["title"] }} (page {{ page }})"
  description="Earlier messages of the conversation with {{ conv["title"] }}">
{% else %}
<section view="{{ conv["title"] }}" description="Conversation with {{ conv["title"] }}">
{% endif %}
  <h2>{{ "Group Chat Detail" if group else "Private Chat Detail" }}</h2>
{% if group %}
  <h3>Group Profile</h3><ul><li>Name: {{ conv["title"] }}</li>
  <li>Description: {{ conv.get("description", "") }}</li></ul>
{% else %}
  <h3>Peer Profile</h3><ul><li>Name: {{ conv["title"] }}</li>
  <li>Email: {{ conv.get("email", "") }}</li></ul>
{% endif %}
{% set day = messages[-1]["time"][:10] if messages else "" %}
{% if day %}
  <p>Day: {{ day }}</p>
{% endif %}
  <ol list="message[]:{{ list_id }}" title="Message History">
  {%- for msg in messages -%}
    <li {{ view.item(msg["id"], {"id": msg["id"], "sender": msg["sender"], "text": msg["text"]}) }}>
    {{- msg["text"] }}<ul>
    {%- if group or msg["sender"] == agent %}<li>Sender: {{ msg["sender"] }}</li>{% endif -%}
    {#- The page's day once, above, not on every message (~9 tokens each); a new message
        the same day changes no other line. -#}
    {%- if msg["time"][:10] == day -%}
      <li>Time: {{ msg["time"][11:] }}</li>
    {%- else -%}
      <li>Time Stamp: {{ msg["time"] }}</li>
    {%- endif -%}
    {%- if "reply_to" in msg and msg["reply_to"] -%}
      <li>Reply To: {{ msg["reply_to"] }}</li>
    {%- endif -%}
    </ul></li>
  {%- endfor -%}
  </ol>
{% if archived and page == 1 %}
  <p>Older history: {{ archived }} earlier messages are archived (kept compressed); the earlier
  pages show them.</p>
{% endif %}
{% if conv.get("dropped") and page == 1 %}
  <p>{{ conv["dropped"] }} of the earliest messages were deleted: the chat keeps
  {{ archive_mib }} MiB of archived history.</p>
{% endif %}
{% if earlier %}
  {{ view.link(view.key_of_page(page + 1), earlier ~ " earlier messages",
      "Page " ~ (page + 1) ~ ": the " ~ [earlier, page_size] | min ~ " messages before these") }}
{% endif %}
  {{ view.buttons() }}
</section>"""

    def __init__(self, key: str, conv_id: str, page: int = 1) -> None:
        super().__init__(key)
        self.conv_id = conv_id
        self.page = page

    def inputs(self) -> int:
        return self.app.versions.get(self.conv_id, 0)

    def key_of_page(self, page: int) -> str:
        """The key of this conversation's view of page ``page`` (1 is the newest messages)."""
        return f"conversation:{self.conv_id}" + (f":page:{page}" if page > 1 else "")

    def context(self) -> Mapping[str, Any]:
        conv = self.app.conversations[self.conv_id]
        archived = self.app.archived(self.conv_id)
        end = max(0, archived + len(conv["messages"]) - (self.page - 1) * PAGE)
        start = max(0, end - PAGE)
        return {
            "conv": conv,
            "agent": AGENT,
            "messages": self.app.history(self.conv_id, start, end),
            "archived": archived,
            "archive_mib": ARCHIVE_BYTES >> 20,
            "page": self.page,
            "list_id": "message_history" if self.page == 1 else f"message_history_{self.page}",
            "earlier": start,
            "page_size": PAGE,
        }

    def on_mount(self) -> None:
        # Mounted, the conversation is in front of the agent: nothing in it is unread. (This
        # used to happen in render(), which must not change state.)
        if self.page == 1:  # an earlier page shows no new messages
            self.app.reading(self.conv_id, True)

    def on_dismount(self) -> None:
        if self.page == 1:
            self.app.reading(self.conv_id, False)

    @operation
    def send_message(self, content: str) -> Message:
        # No docstring: as the operation's description it would repeat its label ("Send
        # Message") in every snapshot of every conversation.
        return self.app.add_message(self.conv_id, AGENT, content)

    @operation
    def reply_message(
        self, message_to_be_replied: Ref[Literal["message"]], content: str
    ) -> Message:
        # No docstring: the label says it ("Reply Message"), see send_message.
        return self.app.add_message(
            self.conv_id, AGENT, content, reply_to=message_to_be_replied.key
        )


def _fresh() -> dict[str, dict[str, Any]]:
    """A new desktop's conversations: the one with the user, empty until they say something.

    Nothing invented: an agent on a real desktop sees only what really happened. ``aotui demo``
    imports its own conversations into its private desktop (``supervisor/interface/demo.py``).
    """
    return {
        "user": {
            "title": "User",
            "type": "Private Chat",
            "email": "the person you work for",
            "unread": 0,
            "messages": [],
        }
    }


class ChatApp(App):
    """The chat app: conversations by id, a message counter, contacts."""

    def __init__(self) -> None:
        super().__init__()
        self.conversations = _fresh()
        self.next_id = 1
        #: ``{"id", "name", "email"}`` each; none on a new desktop, an import brings them.
        self.contacts: list[dict[str, str]] = []
        #: Bumped when the contacts change (only a restore changes them).
        self.contacts_version = 0
        self.navigation = Navigation("navigation")
        self.conversations_view = Conversations("conversations")
        self.contacts_view = Contacts("contacts")
        #: The conversations whose view is mounted: the agent sees their messages as they come.
        self.open: set[str] = set()
        #: Bumped by every change (the views' and the stored data's inputs); ``versions`` per
        #: conversation, so a message re-renders only its own conversation's views.
        self.version = 0
        self.versions: dict[str, int] = {}
        #: Message id → its conversation (where a changed message part is found); kept messages
        #: only, archived ones are in ``archive``.
        self.messages = {
            m["id"]: conv_id for conv_id, c in self.conversations.items() for m in c["messages"]
        }
        #: Conversation → its archived pages, oldest first; ``archive_bytes`` their total size.
        self.archive: dict[str, list[ArchivePage]] = {}
        self.archive_bytes = 0

    def state_inputs(self) -> int:
        return self.version

    def _changed(self, conv_id: str, *parts: str) -> None:
        self.version += 1
        self.versions[conv_id] = self.versions.get(conv_id, 0) + 1
        self.changed(f"conv:{conv_id}", *parts)

    def roots(self) -> list[View[Any]]:
        return [self.navigation]

    def resolve_view(self, key: str) -> View[Any] | None:
        kind, _, rest = key.partition(":")
        conv_id, _, page = rest.partition(":page:")
        if kind == "conversation" and conv_id in self.conversations:
            if not page:
                return Conversation(key, conv_id)
            if page.isdigit() and int(page) > 1:
                return Conversation(key, conv_id, int(page))
        fixed = {"conversations": self.conversations_view, "contacts": self.contacts_view}
        return fixed.get(key)

    def reading(self, conv_id: str, mounted: bool) -> None:
        """Note whether a conversation is in front of the agent; mounting it marks it read."""
        if mounted:
            self.open.add(conv_id)
            if self.conversations[conv_id]["unread"]:
                self.conversations[conv_id]["unread"] = 0
                self._changed(conv_id)
        else:
            self.open.discard(conv_id)

    def add_message(self, conv_id: str, sender: str, text: str, reply_to: str = "") -> Message:
        """Append a message; returns it."""
        if not text.strip():
            raise ValueError("a message needs some text")
        if len(text) > MAX_CHARS:
            raise ValueError(
                f"a message has at most {MAX_CHARS} characters, this one {len(text)}: split it"
            )
        message = {"id": f"msg_{self.next_id}", "sender": sender, "time": _now(), "text": text}
        if reply_to:
            message["reply_to"] = reply_to
        self.next_id += 1
        conv = self.conversations[conv_id]
        conv["messages"].append(message)
        self.messages[message["id"]] = conv_id
        if sender != AGENT and conv_id not in self.open:
            conv["unread"] += 1
        self._changed(conv_id, f"msg:{message['id']}", "next_id")
        if len(conv["messages"]) >= KEEP + PAGE:
            self._changed(conv_id, *self._archive_oldest(conv_id))
        return message

    # Bounded history: the newest KEEP messages as they are, older pages compressed.

    def archived(self, conv_id: str) -> int:
        """How many of a conversation's messages are archived (and still kept)."""
        return sum(count for _, count, _ in self.archive.get(conv_id, ()))

    def history(self, conv_id: str, start: int, end: int) -> list[Message]:
        """Messages ``start`` to ``end`` of a conversation, archived ones first (oldest is 0)."""
        found: list[Message] = []
        offset = 0
        for _, count, blob in self.archive.get(conv_id, ()):
            if offset < end and start < offset + count:
                page = json.loads(zlib.decompress(blob))
                found.extend(page[max(0, start - offset) : max(0, end - offset)])
            offset += count
        kept: list[Message] = self.conversations[conv_id]["messages"]
        return found + kept[max(0, start - offset) : max(0, end - offset)]

    def _archive_oldest(self, conv_id: str) -> list[str]:
        """Move a conversation's oldest :data:`PAGE` messages into an archived page.

        Returns the parts that changed; past :data:`ARCHIVE_BYTES`, the oldest pages of the
        conversations with the most of them are deleted (counted in their ``dropped``).
        """
        conv = self.conversations[conv_id]
        moved, conv["messages"] = conv["messages"][:PAGE], conv["messages"][PAGE:]
        pages = self.archive.setdefault(conv_id, [])
        number = pages[-1][0] + 1 if pages else 1
        blob = zlib.compress(json.dumps(moved, separators=(",", ":")).encode(), 6)
        pages.append((number, len(moved), blob))
        self.archive_bytes += len(blob)
        parts = [f"arch:{conv_id}:{number}"]
        for message in moved:
            self.messages.pop(message["id"], None)
            parts.append(f"msg:{message['id']}")
        while self.archive_bytes > ARCHIVE_BYTES:
            fullest = max(self.archive, key=lambda c: len(self.archive[c]))
            gone, count, old = self.archive[fullest].pop(0)
            self.archive_bytes -= len(old)
            dropped = self.conversations[fullest]
            dropped["dropped"] = int(dropped.get("dropped", 0)) + count
            parts += [f"arch:{fullest}:{gone}", f"conv:{fullest}"]
        return parts

    def handle_event(self, call: OperationCall) -> Any:
        # Events come from the desktop only (never an agent's execute): the user's messages,
        # and the desktop's own (a request for the user's confirmation).
        sender = {"user_message": "User", "desktop_message": "Desktop"}.get(call.operation)
        if sender is None:
            return super().handle_event(call)
        return self.add_message("user", sender, str(call.args.get("text", "")))

    # Keyed data: a part per conversation (without its messages), one per message and one for
    # the counter, so a message stores itself and its conversation's unread count only.

    def serialize(self) -> Any:
        data: dict[str, Any] = {"next_id": self.next_id, "contacts": self.contacts}
        for conv_id in self.conversations:
            data[f"conv:{conv_id}"] = self.serialize_part(f"conv:{conv_id}")
            for message in self.conversations[conv_id]["messages"]:
                data[f"msg:{message['id']}"] = {"conv": conv_id, **message}
        for conv_id, pages in self.archive.items():
            for number, _, _ in pages:
                part = f"arch:{conv_id}:{number}"
                data[part] = self.serialize_part(part)
        return data

    def serialize_part(self, part: str) -> Any:
        kind, _, key = part.partition(":")
        if kind == "conv":
            conv = self.conversations.get(key)
            return None if conv is None else {k: v for k, v in conv.items() if k != "messages"}
        if kind == "msg":
            conv_id = self.messages.get(key)
            if conv_id is None:
                return None
            found = (m for m in reversed(self.conversations[conv_id]["messages"]) if m["id"] == key)
            return {"conv": conv_id, **next(found)}
        if kind == "arch":
            conv_id, _, number = key.rpartition(":")
            page = next((p for p in self.archive.get(conv_id, ()) if str(p[0]) == number), None)
            if page is None:
                return None
            return {"conv": conv_id, "n": page[0], "count": page[1], "zlib": page[2]}
        return {"next_id": self.next_id, "contacts": self.contacts}.get(part)

    def restore(self, data: Any) -> None:
        # The user's conversation is always there (the user's messages go to it), first; data
        # that leaves it out (an import of other conversations only) keeps a fresh one.
        self.conversations = _fresh()
        if "conversations" in data:  # stored before the data was keyed
            self.conversations.update(data["conversations"])
        else:
            self.conversations.update(
                (key[5:], {**conv, "messages": []})
                for key, conv in data.items()
                if key.startswith("conv:")
            )
            stored = [dict(v) for k, v in data.items() if k.startswith("msg:")]
            stored.sort(key=lambda message: _number(message["id"]))
            for message in stored:
                self.conversations[message.pop("conv")]["messages"].append(message)
        self.next_id = data["next_id"]
        # Data stored before contacts were (they were the code's, not the desktop's) has none.
        self.contacts = [dict(contact) for contact in data.get("contacts") or ()]
        self.contacts_version += 1
        self.messages = {
            m["id"]: conv_id for conv_id, c in self.conversations.items() for m in c["messages"]
        }
        self.archive = {}
        pages = [v for k, v in data.items() if k.startswith("arch:") and v is not None]
        for page in sorted(pages, key=lambda p: int(p["n"])):
            if page["conv"] in self.conversations:
                entry = (int(page["n"]), int(page["count"]), bytes(page["zlib"]))
                self.archive.setdefault(page["conv"], []).append(entry)
        self.archive_bytes = sum(len(p[2]) for pages in self.archive.values() for p in pages)
        for conv_id, conv in self.conversations.items():  # data from before history was bounded
            while len(conv["messages"]) >= KEEP + PAGE:
                self.changed(*self._archive_oldest(conv_id))
        self.version += 1


def _number(message_id: str) -> int:
    """``msg_12`` → 12: messages are kept in the order they were sent."""
    digits = message_id.rpartition("_")[2]
    return int(digits) if digits.isdigit() else 0


app = ChatApp()
