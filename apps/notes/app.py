"""Notes: short notes the agent adds, reads, edits and deletes.

The root view "Notes" lists every note (title and a preview line) with ``add_note``, ``edit_note``
and ``delete_note``, which take the note as a ref (``notes[0]``). Each note links to its own view
(key ``note:<id>``) with the full text and ``edit`` / ``delete`` operations that act on that note,
so they need no ref.
"""

from __future__ import annotations

import json
import time
from html import escape
from typing import Any

from aotui.sandbox.sdk import App, OperationCall, View, operation

#: Longest preview line shown in the list.
PREVIEW_CHARS = 80
#: Longest title a note may have.
MAX_TITLE_CHARS = 200


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _json_attr(value: Any) -> str:
    return escape(json.dumps(value, ensure_ascii=False), quote=True)


def _preview(text: str) -> str:
    """The first non-blank line of ``text``, shortened to :data:`PREVIEW_CHARS`."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def _paragraphs(text: str) -> str:
    """``text`` as escaped paragraphs: blank lines separate them, line breaks are kept."""
    blocks = [block for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()]
    return "".join(
        "<p>" + "<br>".join(escape(line) for line in block.strip("\n").split("\n")) + "</p>"
        for block in blocks
    )


class NotesView(View):
    """The root: every note, oldest first, with the operations that take a note as a ref."""

    def render(self) -> str:
        notes = self.notes_app
        items = []
        for note in notes.notes.values():
            view = notes.view(f"note:{note['id']}")
            assert view is not None
            preview = _preview(note["text"])
            value = {"id": note["id"], "title": note["title"], "preview": preview}
            items.append(
                f'<li key="{escape(note["id"])}" data-value="{_json_attr(value)}">'
                f"{escape(note['title'])}<ul>"
                f"<li>Preview: {escape(preview) or '(empty)'}</li>"
                f"<li>Updated: {escape(note['updated'])}</li></ul>"
                f"{self.link(view, note['title'], 'The full note, to read, edit or delete')}</li>"
            )
        body = (
            f'<ul list="note[]:notes" title="Notes">{"".join(items)}</ul>'
            if items
            else "<p>No notes yet.</p>"
        )
        return f"""
<section view="Notes" description="Your notes">
  <h2>Notes</h2>
  {body}
  <button operation="add_note" description="Add a note"
          args='{{"title": "string", "text": "string"}}'>Add Note</button>
  <button operation="edit_note" description="Replace a note's text, and its title if given"
          args='{{"note": "note", "text": "string", "title?": "string"}}'>Edit Note</button>
  <button operation="delete_note" description="Delete a note"
          args='{{"note": "note"}}'>Delete Note</button>
</section>"""

    @property
    def notes_app(self) -> NotesApp:
        assert isinstance(self.app, NotesApp)
        return self.app

    @operation("add_note")
    def add_note(self, call: OperationCall) -> dict[str, str]:
        return self.notes_app.add(str(call.args["title"]), str(call.args["text"]))

    @operation("edit_note")
    def edit_note(self, call: OperationCall) -> dict[str, str]:
        title = call.args.get("title")
        return self.notes_app.edit(
            _note_key(call), str(call.args["text"]), None if title is None else str(title)
        )

    @operation("delete_note")
    def delete_note(self, call: OperationCall) -> dict[str, str]:
        return self.notes_app.delete(_note_key(call))


def _note_key(call: OperationCall) -> str:
    key = call.stable_keys.get("note")
    if key is None:
        raise ValueError("note must reference a note, e.g. notes[0]")
    return str(key)


class NoteView(View):
    """One note in full, with operations on that note."""

    def __init__(self, key: str, note_id: str) -> None:
        super().__init__(key)
        self.note_id = note_id

    def render(self) -> str:
        notes = self.app
        assert isinstance(notes, NotesApp)
        note = notes.notes.get(self.note_id)
        if note is None:
            return """
<article view="Note" description="A deleted note">
  <h2>Note deleted</h2>
  <p>This note no longer exists; dismount this view.</p>
</article>"""
        text = _paragraphs(note["text"]) or "<p>(This note is empty.)</p>"
        return f"""
<article view="Note" description="The full text of one note">
  <h2>{escape(note["title"])}</h2>
  <ul><li>Created: {escape(note["created"])}</li><li>Updated: {escape(note["updated"])}</li></ul>
  {text}
  <button operation="edit" description="Replace this note's text, and its title if given"
          args='{{"text": "string", "title?": "string"}}'>Edit</button>
  <button operation="delete" description="Delete this note">Delete</button>
</article>"""

    @operation("edit")
    def edit(self, call: OperationCall) -> dict[str, str]:
        notes = self.app
        assert isinstance(notes, NotesApp)
        title = call.args.get("title")
        return notes.edit(
            self.note_id, str(call.args["text"]), None if title is None else str(title)
        )

    @operation("delete")
    def delete(self, call: OperationCall) -> dict[str, str]:
        notes = self.app
        assert isinstance(notes, NotesApp)
        return notes.delete(self.note_id)


class NotesApp(App):
    """The notes by id, in the order they were added, and an id counter."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: dict[str, dict[str, str]] = {}
        self.next_id = 1
        self.root = NotesView("notes")

    def roots(self) -> list[View]:
        return [self.root]

    def resolve_view(self, key: str) -> View | None:
        kind, _, note_id = key.partition(":")
        if kind == "note" and note_id in self.notes:
            return NoteView(key, note_id)
        return None

    def add(self, title: str, text: str) -> dict[str, str]:
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

    def edit(self, note_id: str, text: str, title: str | None = None) -> dict[str, str]:
        """Replace a note's text (and title, when given); returns the note."""
        note = self._note(note_id)
        if title is not None:
            note["title"] = _title(title)
        note["text"] = text
        note["updated"] = _now()
        return note

    def delete(self, note_id: str) -> dict[str, str]:
        """Remove a note; returns it."""
        note = self._note(note_id)
        del self.notes[note_id]
        return note

    def _note(self, note_id: str) -> dict[str, str]:
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
