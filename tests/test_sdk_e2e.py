"""The SDK in a real, confined worker: templates render and typed operations run in the sandbox."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from tests.conftest import RunningDesktop

Start = Callable[..., RunningDesktop]

BROKEN = '''
from typing import Any
from aotui.sandbox.sdk import App, View, operation


class Broken(View["BrokenApp"]):
    template = '<section view="Broken"><p>{{ app.nothing_here }}</p>{{ view.buttons() }}</section>'

    @operation
    def poke(self, times: int = 1) -> int:
        """Poke it."""
        return times


class BrokenApp(App):
    def roots(self) -> list[View[Any]]:
        return [Broken("broken")]


app = BrokenApp()
'''


def view_of(markdown: str, app_id: str, name: str) -> str:
    block = markdown[markdown.index(f'<application id="{app_id}"') :]
    match = re.search(rf'<view id="(view_\d+)" name="{name}">', block)
    assert match, block
    return match.group(1)


def test_bundled_notes_run_in_the_sandbox(start_desktop: Start) -> None:
    client = start_desktop(["notes"]).client
    client.execute("<context>open --application app_0</context>")
    view = view_of(client.snapshot(), "app_0", "Notes")
    run = f'<context app_id="app_0" view_id="{view}">execute {{}}</context>'
    client.execute(run.format('add_note --title "A <b>bold</b> & \'odd\' title" --text "x"'))
    client.execute(run.format("add_note --title Second --text y"))
    client.snapshot()  # refs resolve against the snapshot the agent read
    client.execute(run.format('edit_note --note notes[1] --text "new text" --title Renamed'))
    snapshot = client.snapshot()
    assert "- [A <b>bold</b> & 'odd' title](note:notes[0])" in snapshot
    assert "- [Renamed](note:notes[1])\n    - Preview: new text" in snapshot
    assert "        - note: note\n        - text: string\n        - title?: string" in snapshot


def test_a_template_error_shows_in_its_view_inside_the_sandbox(
    start_desktop: Start, tmp_path: Path
) -> None:
    app_dir = tmp_path / "broken"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(BROKEN)
    manifest = {"id": "test.broken", "name": "Broken", "version": "1.0.0", "entry": "app.py",
                "description": "A template naming nothing.", "permissions": []}  # fmt: skip
    (app_dir / "aoapp.json").write_text(json.dumps(manifest))
    client = start_desktop([str(app_dir)]).client
    client.execute("<context>open --application app_0</context>")
    snapshot = client.snapshot()
    assert "**This view failed to render:** UndefinedError:" in snapshot
    assert "nothing_here" in snapshot
