"""ChatWithUser: the conversation between the agent and the user, plus contacts and groups.

A new desktop's chat holds the conversation with the user only, empty; other conversations and
contacts come from stored or imported data (``aotui demo`` imports some).

Navigation → Conversations → one view per conversation (several can be mounted at once, each
with its own ``message_history`` list and ``send_message`` / ``reply_message`` operations).
The user's side posts into the "User" conversation with ``aotui say TEXT``. A conversation view
shows its newest :data:`PAGE` messages and links to the earlier ones (key
``conversation:<id>:page:<n>``, ``n`` from 2).

What the app keeps is its stored data (``App.stored``), and it is bounded: ``conv:<id>`` for each
conversation (without its messages), ``msg:<conv>:<id>`` for each of its newest :data:`KEEP`
messages, ``arch:<conv>:<n>`` for each older page of :data:`PAGE` messages (compressed, still
shown by the earlier pages), ``next_id`` and ``contacts``. Past :data:`ARCHIVE_BYTES` of archive
the oldest archived pages are deleted, and the conversation's view says how many messages went.
Data stored before issue 24 named a message ``msg:<id>``; the first start renames it.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Mapping
from typing import Any, Literal

from aotui.sandbox.sdk import App, Ref, View, operation

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
        return sum(conv["unread"] for conv in self.app.conversations().values())


class Conversations(View["ChatApp"]):
    """Every conversation with its last message and unread count."""

    template = """
<section view="Conversations" description="All conversations">
  <h2>Conversations</h2>
  <ul>
  {%- for conv_id, conv in conversations.items() -%}
    <li{{ view.link_attrs("conversation:" ~ conv_id) }}>{{ conv["title"] }}<ul>
    {%- if "description" in conv and conv["description"] -%}
      <li>Description: {{ conv["description"] }}</li>
    {%- endif -%}
    <li>Type: {{ conv["type"] }}</li>
    <li>Last Message: {{ last[conv_id]["text"] if conv_id in last else "(no messages)" }}</li>
    <li>Unread Message Count: {{ conv["unread"] }}</li></ul></li>
  {%- endfor -%}
  </ul>
</section>"""

    def context(self) -> Mapping[str, Any]:
        conversations = self.app.conversations()
        kept = self.app.kept()
        last = {conv: self.app.stored[keys[-1]] for conv, keys in kept.items() if keys}
        return {"conversations": conversations, "last": last}


class Contacts(View["ChatApp"]):
    """People the agent can talk to."""

    template = """
<section view="Contacts" description="People you can talk to">
  <h2>Contacts</h2>
  <ul list="user[]:contacts" title="Contacts">
  {%- for c in contacts -%}
    <li {{ view.item(c["id"], c) }}>{{ c["name"] }}<ul><li>Email: {{ c["email"] }}</li></ul></li>
  {%- endfor -%}
  </ul>
  {% if not contacts %}<p>No contacts yet.</p>{% endif %}
</section>"""

    def context(self) -> Mapping[str, Any]:
        return {"contacts": self.app.stored.get("contacts", [])}


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

    def key_of_page(self, page: int) -> str:
        """The key of this conversation's view of page ``page`` (1 is the newest messages)."""
        return f"conversation:{self.conv_id}" + (f":page:{page}" if page > 1 else "")

    def context(self) -> Mapping[str, Any]:
        conv = self.app.stored[_conv(self.conv_id)]
        archived = self.app.archived(self.conv_id)
        kept = len(self.app.ordered(_msg(self.conv_id, "")))
        end = max(0, archived + kept - (self.page - 1) * PAGE)
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


#: The conversation with the user, there from the first start (empty until they say something).
#: Nothing invented: an agent on a real desktop sees only what really happened. ``aotui demo``
#: imports its own conversations into its private desktop (``supervisor/interface/demo.py``).
USER = {"title": "User", "type": "Private Chat", "email": "the person you work for", "unread": 0}


class ChatApp(App):
    """The chat app: conversations, their messages and archived pages, contacts, in ``stored``."""

    def __init__(self) -> None:
        super().__init__()
        self.navigation = Navigation("navigation")
        self.conversations_view = Conversations("conversations")
        self.contacts_view = Contacts("contacts")
        #: The conversations whose view is mounted: the agent sees their messages as they come.
        self.open: set[str] = set()
        self.stored[_conv("user")] = USER  # replaced by what was stored, if anything was

    def on_start(self) -> None:
        if _conv("user") not in self.stored:  # the user's messages go there: always present
            self.stored[_conv("user")] = USER
        for key in list(self.stored):  # stored before issue 24: msg:<id>, its conversation inside
            if key.startswith("msg:") and key.count(":") == 1:
                message = self.stored[key]
                del self.stored[key]
                self.stored[_msg(message.pop("conv"), message["id"])] = message
        for conv_id, keys in self.kept().items():  # stored before the history was bounded
            while len(keys) >= KEEP + PAGE:
                self._archive_oldest(conv_id, keys)
                keys = self.kept()[conv_id]

    def roots(self) -> list[View[Any]]:
        return [self.navigation]

    def resolve_view(self, key: str) -> View[Any] | None:
        kind, _, rest = key.partition(":")
        conv_id, _, page = rest.partition(":page:")
        if kind == "conversation" and _conv(conv_id) in self.stored:
            if not page:
                return Conversation(key, conv_id)
            if page.isdigit() and int(page) > 1:
                return Conversation(key, conv_id, int(page))
        fixed = {"conversations": self.conversations_view, "contacts": self.contacts_view}
        return fixed.get(key)

    def conversations(self) -> dict[str, dict[str, Any]]:
        """Every conversation (without its messages) by id, the user's first."""
        found = {key[5:]: self.stored[key] for key in self.stored if key.startswith("conv:")}
        return {"user": found.pop("user"), **found} if "user" in found else found

    def kept(self) -> dict[str, list[str]]:
        """Each conversation's kept (not archived) message keys, oldest first."""
        found: dict[str, list[str]] = {}
        for key in self.stored:
            if key.startswith("msg:"):
                found.setdefault(key[4:].rpartition(":")[0], []).append(key)
        for keys in found.values():
            _in_order(keys)
        return found

    def ordered(self, prefix: str) -> list[str]:
        """The stored keys that start with ``prefix``, in the order they were written."""
        return _in_order([key for key in self.stored if key.startswith(prefix)])

    def reading(self, conv_id: str, mounted: bool) -> None:
        """Note whether a conversation is in front of the agent; mounting it marks it read."""
        if mounted:
            self.open.add(conv_id)
            conv = self.stored[_conv(conv_id)]
            if conv["unread"]:
                self.stored[_conv(conv_id)] = {**conv, "unread": 0}
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
        number = int(self.stored.get("next_id", 1))
        message = {"id": f"msg_{number}", "sender": sender, "time": _now(), "text": text}
        if reply_to:
            message["reply_to"] = reply_to
        self.stored["next_id"] = number + 1
        self.stored[_msg(conv_id, message["id"])] = message
        if sender != AGENT and conv_id not in self.open:
            conv = self.stored[_conv(conv_id)]
            self.stored[_conv(conv_id)] = {**conv, "unread": conv["unread"] + 1}
        keys = self.ordered(_msg(conv_id, ""))
        if len(keys) >= KEEP + PAGE:
            self._archive_oldest(conv_id, keys)
        return message

    @operation
    def user_message(self, text: str) -> Message:
        """The user's side of their conversation (``aotui say``): posted by the desktop only."""
        return self.add_message("user", "User", text)

    @operation
    def desktop_message(self, text: str) -> Message:
        """The desktop's own word to the agent (a request for the user's confirmation)."""
        return self.add_message("user", "Desktop", text)

    # Bounded history: the newest KEEP messages as they are, older pages compressed.

    def archived(self, conv_id: str) -> int:
        """How many of a conversation's messages are archived (and still kept): a page each
        :data:`PAGE`."""
        return PAGE * len(self.ordered(_arch(conv_id, "")))

    def history(self, conv_id: str, start: int, end: int) -> list[Message]:
        """Messages ``start`` to ``end`` of a conversation, archived ones first (oldest is 0)."""
        found: list[Message] = []
        pages = self.ordered(_arch(conv_id, ""))
        for number, key in enumerate(pages):  # only the pages the range overlaps are read
            offset = number * PAGE
            if offset < end and start < offset + PAGE:
                messages = json.loads(zlib.decompress(self.stored[key]["zlib"]))
                found.extend(messages[max(0, start - offset) : max(0, end - offset)])
        offset = len(pages) * PAGE
        kept = self.ordered(_msg(conv_id, ""))[max(0, start - offset) : max(0, end - offset)]
        return found + [self.stored[key] for key in kept]

    def _archive_oldest(self, conv_id: str, keys: list[str]) -> None:
        """Move a conversation's oldest :data:`PAGE` messages into an archived page.

        Past :data:`ARCHIVE_BYTES`, the oldest pages of the conversations with the most of them
        are deleted (counted in their ``dropped``).
        """
        moved = [self.stored[key] for key in keys[:PAGE]]
        for key in keys[:PAGE]:
            del self.stored[key]
        pages = self.ordered(_arch(conv_id, ""))
        number = int(pages[-1].rpartition(":")[2]) + 1 if pages else 1
        blob = zlib.compress(json.dumps(moved, separators=(",", ":")).encode(), 6)
        page = {"conv": conv_id, "n": number, "count": len(moved), "zlib": blob}
        self.stored[_arch(conv_id, str(number))] = page
        archive = {key: len(self.stored[key]["zlib"]) for key in self.stored if key[:5] == "arch:"}
        total = sum(archive.values())
        while total > ARCHIVE_BYTES:
            by_conv: dict[str, list[str]] = {}
            for key in archive:
                by_conv.setdefault(key[5:].rpartition(":")[0], []).append(key)
            fullest = max(by_conv.values(), key=len)
            oldest = _in_order(fullest)[0]
            gone = self.stored[oldest]
            del self.stored[oldest]
            total -= archive.pop(oldest)
            conv = self.stored[_conv(gone["conv"])]
            dropped = int(conv.get("dropped", 0)) + int(gone["count"])
            self.stored[_conv(gone["conv"])] = {**conv, "dropped": dropped}


def _conv(conv_id: str) -> str:
    return f"conv:{conv_id}"


def _msg(conv_id: str, message_id: str) -> str:
    return f"msg:{conv_id}:{message_id}"


def _arch(conv_id: str, number: str) -> str:
    return f"arch:{conv_id}:{number}"


def _in_order(keys: list[str]) -> list[str]:
    """``keys`` of one kind (``msg:user:msg_12``, ``arch:user:3``) in the order of their numbers."""
    keys.sort()
    keys.sort(key=len)  # the same prefix: a shorter number is a smaller one
    return keys


app = ChatApp()
