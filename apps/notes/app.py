"""Notes: short notes the agent adds, reads, edits and deletes.

The root view "Notes" lists every note (title and a preview line) with ``add_note``, ``edit_note``
and ``delete_note``, which take the note as a ref (``notes[0]``). Each note links to its own view
(key ``note:<id>``) with the full text and ``edit`` / ``delete`` operations that act on that note,
so they need no ref.
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

Note = dict[str, str]


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _preview(text: str) -> str:
    """The first non-blank line of ``text``, shortened to :data:`PREVIEW_CHARS`."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


class NotesView(View["NotesApp"]):
    """The root: every note, oldest first, with the operations that take a note as a ref."""

    template = """
<section view="Notes" description="Your notes">
  <h2>Notes</h2>
{% if notes %}
  <ul list="note[]:notes" title="Notes">
  {%- for note, preview in notes -%}
    <li {{ view.item(note["id"], {"id": note["id"], "title": note["title"], "preview": preview}) }}>
    {{- note["title"] }}<ul><li>Preview: {{ preview or "(empty)" }}</li>
    <li>Updated: {{ note["updated"] }}</li></ul>
    {{- view.link("note:" ~ note["id"], note["title"], "The full note, to read, edit or delete") -}}
    </li>
  {%- endfor -%}
  </ul>
{% else %}
  <p>No notes yet.</p>
{% endif %}
  {{ view.buttons() }}
</section>"""

    def context(self) -> Mapping[str, Any]:
        return {"notes": [(note, _preview(note["text"])) for note in self.app.notes.values()]}

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
        return {"note": self.app.notes.get(self.note_id)}

    @operation
    def edit(self, text: str, title: str | None = None) -> Note:
        """Replace this note's text, and its title if given."""
        return self.app.edit(self.note_id, text, title)

    @operation
    def delete(self) -> Note:
        """Delete this note."""
        return self.app.delete(self.note_id)


class NotesApp(App):
    """The notes by id, in the order they were added, and an id counter."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: dict[str, Note] = {}
        self.next_id = 1
        self.root = NotesView("notes")

    def roots(self) -> list[View[Any]]:
        return [self.root]

    def resolve_view(self, key: str) -> View[Any] | None:
        kind, _, note_id = key.partition(":")
        if kind == "note" and note_id in self.notes:
            return NoteView(key, note_id)
        return None

    def add(self, title: str, text: str) -> Note:
        """Add a note; returns it."""
        now = _now()
        note = {
            "id": f"note_{self.next_id}",
            "title": _title(title),
            "text": text,
            "created": now,
            "updated": now,
        }
        self.next_id += 1
        self.notes[note["id"]] = note
        return note

    def edit(self, note_id: str, text: str, title: str | None = None) -> Note:
        """Replace a note's text (and title, when given); returns the note."""
        note = self._note(note_id)
        if title is not None:
            note["title"] = _title(title)
        note["text"] = text
        note["updated"] = _now()
        return note

    def delete(self, note_id: str) -> Note:
        """Remove a note; returns it."""
        note = self._note(note_id)
        del self.notes[note_id]
        return note

    def _note(self, note_id: str) -> Note:
        note = self.notes.get(note_id)
        if note is None:
            raise LookupError(f"note {note_id!r} no longer exists; read the Notes list again")
        return note

    def serialize(self) -> Any:
        return {"notes": list(self.notes.values()), "next_id": self.next_id}

    def restore(self, data: Any) -> None:
        self.notes = {note["id"]: dict(note) for note in data["notes"]}
        self.next_id = int(data["next_id"])


def _title(title: str) -> str:
    title = " ".join(title.split())
    if not title:
        raise ValueError("a note needs a title")
    if len(title) > MAX_TITLE_CHARS:
        raise ValueError(f"a title has at most {MAX_TITLE_CHARS} characters, got {len(title)}")
    return title


app = NotesApp()
