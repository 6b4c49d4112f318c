"""ThoughtRecorder: the agent's scratchpad of reasoning.

One root view, "Thoughts": the recorded thoughts (newest last), each with its time and an optional
tag, plus ``record_thought``, ``delete_thought`` and ``clear_thoughts``. Only the newest
:data:`MAX_THOUGHTS` are kept, so the scratchpad never grows without bound in the snapshot.
"""

from __future__ import annotations

import json
import time
from html import escape
from typing import Any

from aotui.sandbox.sdk import App, OperationCall, View, operation

#: How many thoughts are kept; recording one more drops the oldest.
MAX_THOUGHTS = 200
#: Longest thought text copied into an item's ``data-value`` (the limit is 10 KB).
VALUE_TEXT_CHARS = 500


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _json_attr(value: Any) -> str:
    return escape(json.dumps(value, ensure_ascii=False), quote=True)


def _lines(text: str) -> str:
    """``text`` escaped, its line breaks kept as ``<br>``."""
    return "<br>".join(escape(line) for line in text.splitlines())


class ThoughtsView(View):
    """The root: every kept thought, oldest first."""

    def render(self) -> str:
        thoughts = self.recorder.thoughts
        items = []
        for thought in thoughts:
            details = [f"<li>Time: {escape(thought['time'])}</li>"]
            if thought.get("tag"):
                details.append(f"<li>Tag: {escape(thought['tag'])}</li>")
            value = {
                "id": thought["id"],
                "text": thought["text"][:VALUE_TEXT_CHARS],
                "tag": thought.get("tag", ""),
                "time": thought["time"],
            }
            items.append(
                f'<li key="{escape(thought["id"])}" data-value="{_json_attr(value)}">'
                f"{_lines(thought['text'])}<ul>{''.join(details)}</ul></li>"
            )
        dropped = self.recorder.dropped
        note = f"Only the newest {MAX_THOUGHTS} thoughts are kept; newest last."
        if dropped:
            note += f" {dropped} older thought{'s' if dropped != 1 else ''} dropped."
        body = (
            f'<ol list="thought[]:thoughts" title="Thoughts">{"".join(items)}</ol>'
            if items
            else "<p>No thoughts recorded yet.</p>"
        )
        return f"""
<section view="Thoughts" description="Your scratchpad of reasoning">
  <h2>Thoughts</h2>
  <p>{note}</p>
  {body}
  <button operation="record_thought" description="Write down a thought, optionally tagged"
          args='{{"text": "string", "tag?": "string"}}'>Record Thought</button>
  <button operation="delete_thought" description="Delete one thought"
          args='{{"thought": "thought"}}'>Delete Thought</button>
  <button operation="clear_thoughts" description="Delete every thought">Clear Thoughts</button>
</section>"""

    @property
    def recorder(self) -> ThoughtRecorder:
        assert isinstance(self.app, ThoughtRecorder)
        return self.app

    @operation("record_thought")
    def record_thought(self, call: OperationCall) -> dict[str, str]:
        tag = call.args.get("tag")
        return self.recorder.record(str(call.args["text"]), str(tag) if tag else "")

    @operation("delete_thought")
    def delete_thought(self, call: OperationCall) -> dict[str, str]:
        key = call.stable_keys.get("thought")
        if key is None:
            raise ValueError("thought must reference a thought, e.g. thoughts[0]")
        return self.recorder.delete(str(key))

    @operation("clear_thoughts")
    def clear_thoughts(self, call: OperationCall) -> dict[str, int]:
        return self.recorder.clear()


class ThoughtRecorder(App):
    """The recorder: thoughts oldest first, an id counter, and how many were dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.thoughts: list[dict[str, str]] = []
        self.next_id = 1
        self.dropped = 0
        self.root = ThoughtsView("thoughts")

    def roots(self) -> list[View]:
        return [self.root]

    def record(self, text: str, tag: str = "") -> dict[str, str]:
        """Append a thought, dropping the oldest past :data:`MAX_THOUGHTS`; returns it."""
        if not text.strip():
            raise ValueError("a thought needs some text")
        thought = {"id": f"thought_{self.next_id}", "time": _now(), "text": text.strip()}
        if tag.strip():
            thought["tag"] = tag.strip()
        self.next_id += 1
        self.thoughts.append(thought)
        excess = len(self.thoughts) - MAX_THOUGHTS
        if excess > 0:
            del self.thoughts[:excess]
            self.dropped += excess
        return thought

    def delete(self, thought_id: str) -> dict[str, str]:
        """Remove the thought with ``thought_id``; returns it."""
        for index, thought in enumerate(self.thoughts):
            if thought["id"] == thought_id:
                return self.thoughts.pop(index)
        raise LookupError(f"thought {thought_id!r} is already gone; read the Thoughts list again")

    def clear(self) -> dict[str, int]:
        """Remove every thought; returns how many there were."""
        cleared = len(self.thoughts)
        self.thoughts.clear()
        return {"cleared": cleared}

    def serialize(self) -> Any:
        return {"thoughts": self.thoughts, "next_id": self.next_id, "dropped": self.dropped}

    def restore(self, data: Any) -> None:
        self.thoughts = list(data["thoughts"])[-MAX_THOUGHTS:]
        self.next_id = int(data["next_id"])
        self.dropped = int(data.get("dropped", 0))


app = ThoughtRecorder()
