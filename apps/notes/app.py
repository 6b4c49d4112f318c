"""Notes: short notes the agent adds, reads, edits and deletes.

The root view "Notes" lists the newest :data:`PAGE` notes (title and a preview line) with
``add_note``, ``edit_note`` and ``delete_note``, which take the note as a ref (``notes[0]``); older
notes are a link away, :data:`PAGE` per view (key ``notes:page:<n>``, ``n`` from 2), so an
operation costs the same with 10 notes or 10,000. Each note links to its own view (key
``note:<id>``) with the full text and ``edit`` / ``delete`` operations that act on that note, so
they need no ref.

The notes are the app's stored data (``App.stored``): ``note:<id>`` for each note and ``next_id``
for the id counter. Writing them is all an operation does; the worker stores what was written and
re-renders the views that read it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from aotui.sandbox.sdk import App, Ref, View, operation

#: Longest preview line shown in the list.
PREVIEW_CHARS = 80
#: Longest title a note may have.
MAX_TITLE_CHARS = 200
#: Notes shown per view: the newest in the root, older ones a page (a link) further each.
PAGE = 50

Note = dict[str, str]


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _preview(text: str) -> str:
    """The first non-blank line of ``text``, shortened to :data:`PREVIEW_CHARS`."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


class NotesView(View["NotesApp"]):
    """A page of notes, oldest first, with the operations that take a note as a ref.

    Page 1 (the root) holds the newest :data:`PAGE` notes; page ``n`` the ``PAGE`` before those
    of page ``n - 1``, and links to page ``n + 1`` when there are older ones.
    """

    template = """
{% if page == 1 %}
<section view="Notes" description="Your notes">
  <h2>Notes</h2>
{% else %}
<section view="Older Notes" description="Notes older than those of the previous page">
  <h2>Older Notes (page {{ page }})</h2>
{% endif %}
{% if notes %}
  <ul list="note[]:{{ list_id }}" title="{{ "Notes" if page == 1 else "Older Notes" }}">
  {%- for note in notes -%}
  {#- An add or edit renders one item: the others are reused while what they show is the same. -#}
  {%- call view.cached(note["id"], (note["title"], note["text"], note["updated"])) -%}
    {%- set preview = preview_of(note["text"]) -%}
    <li {{ view.item(note["id"], {"id": note["id"], "title": note["title"], "preview": preview}) }}>
    {{- note["title"] }}<ul><li>Preview: {{ preview or "(empty)" }}</li>
    <li>Updated: {{ note["updated"] }}</li></ul>
    {{- view.link("note:" ~ note["id"], note["title"], "The full note, to read, edit or delete") -}}
    </li>
  {%- endcall -%}
  {%- endfor -%}
  </ul>
{% else %}
  <p>{{ "No notes yet." if page == 1 else "No older notes." }}</p>
{% endif %}
{% if older %}
  {{ view.link("notes:page:" ~ (page + 1), older ~ " older notes",
      "Page " ~ (page + 1) ~ ": the " ~ [older, page_size] | min ~ " notes before these") }}
{% endif %}
  {{ view.buttons() }}
</section>"""

    def __init__(self, key: str, page: int = 1) -> None:
        super().__init__(key)
        self.page = page

    def context(self) -> Mapping[str, Any]:
        notes = self.app.newest(skip=(self.page - 1) * PAGE, count=PAGE)
        return {
            "notes": notes[::-1],
            "preview_of": _preview,
            "page": self.page,
            "list_id": "notes" if self.page == 1 else f"notes_page_{self.page}",
            "older": max(0, self.app.count() - (self.page - 1) * PAGE - len(notes)),
            "page_size": PAGE,
        }

    @operation
    def add_note(self, title: str, text: str) -> Note:
        """Add a note."""
        return self.app.add(title, text)

    @operation
    def edit_note(self, note: Ref[Literal["note"]], text: str, title: str | None = None) -> Note:
        """Replace a note's text, and its title if given."""
        return self.app.edit(note.key, text, title)

    @operation
    def delete_note(self, note: Ref[Literal["note"]]) -> Note:
        """Delete a note."""
        return self.app.delete(note.key)


class NoteView(View["NotesApp"]):
    """One note in full, with operations on that note."""

    template = """
{% if note is none %}
<article view="Note" description="A deleted note">
  <h2>Note deleted</h2>
  <p>This note no longer exists; dismount this view.</p>
</article>
{% else %}
<article view="Note" description="The full text of one note">
  <h2>{{ note["title"] }}</h2>
  <ul><li>Created: {{ note["created"] }}</li><li>Updated: {{ note["updated"] }}</li></ul>
  {{ note["text"] | paragraphs or "<p>(This note is empty.)</p>" | safe }}
  {{ view.buttons() }}
</article>
{% endif %}"""

    def __init__(self, key: str, note_id: str) -> None:
        super().__init__(key)
        self.note_id = note_id

    def context(self) -> Mapping[str, Any]:
        return {"note": self.app.stored.get(_part(self.note_id))}

    @operation
    def edit(self, text: str, title: str | None = None) -> Note:
        """Replace this note's text, and its title if given."""
        return self.app.edit(self.note_id, text, title)

    @operation
    def delete(self) -> Note:
        """Delete this note."""
        return self.app.delete(self.note_id)


class NotesApp(App):
    """Notes in ``stored``: ``note:<id>`` each, and ``next_id``."""

    def __init__(self) -> None:
        super().__init__()
        self.root = NotesView("notes")

    def roots(self) -> list[View[Any]]:
        return [self.root]

    def resolve_view(self, key: str) -> View[Any] | None:
        kind, _, rest = key.partition(":")
        if kind == "note" and _part(rest) in self.stored:
            return NoteView(key, rest)
        page = rest.removeprefix("page:")
        if kind == "notes" and rest.startswith("page:") and page.isdigit() and int(page) > 1:
            return NotesView(key, int(page))
        return None

    def count(self) -> int:
        """How many notes there are."""
        return len(self.stored) - ("next_id" in self.stored)

    def newest(self, skip: int, count: int) -> list[Note]:
        """Up to ``count`` notes, newest first, after the ``skip`` newest.

        Ids are numbered in the order notes were added, so this walks them down from the newest
        (deleted ones are skipped): a page costs the same with 10 notes or 10,000.
        """
        found: list[Note] = []
        number = int(self.stored.get("next_id", 1)) - 1
        while number > 0 and len(found) < count:
            note = self.stored.get(_part(f"note_{number}"))
            number -= 1
            if note is None:
                continue
            if skip:
                skip -= 1
            else:
                found.append(note)
        return found

    def add(self, title: str, text: str) -> Note:
        """Add a note; returns it."""
        now = _now()
        number = int(self.stored.get("next_id", 1))
        note = {
            "id": f"note_{number}",
            "title": _title(title),
            "text": text,
            "created": now,
            "updated": now,
        }
        self.stored["next_id"] = number + 1
        self.stored[_part(note["id"])] = note
        return note

    def edit(self, note_id: str, text: str, title: str | None = None) -> Note:
        """Replace a note's text (and title, when given); returns the note."""
        note = self._note(note_id)
        if title is not None:
            note["title"] = _title(title)
        note["text"] = text
        note["updated"] = _now()
        self.stored[_part(note_id)] = note
        return note

    def delete(self, note_id: str) -> Note:
        """Remove a note; returns it."""
        note = self._note(note_id)
        del self.stored[_part(note_id)]
        return note

    def _note(self, note_id: str) -> Note:
        note: Note | None = self.stored.get(_part(note_id))
        if note is None:
            raise LookupError(f"note {note_id!r} no longer exists; read the Notes list again")
        return note


def _part(note_id: str) -> str:
    return f"note:{note_id}"


def _title(title: str) -> str:
    title = " ".join(title.split())
    if not title:
        raise ValueError("a note needs a title")
    if len(title) > MAX_TITLE_CHARS:
        raise ValueError(f"a title has at most {MAX_TITLE_CHARS} characters, got {len(title)}")
    return title


app = NotesApp()
