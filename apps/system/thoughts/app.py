"""ThoughtRecorder: the agent's scratchpad of reasoning.

One root view, "Thoughts": the recorded thoughts (newest last), each with its time and an optional
tag, plus ``record_thought``, ``delete_thought`` and ``clear_thoughts``. Only the newest
:data:`MAX_THOUGHTS` are kept, so the scratchpad never grows without bound in the snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

from aotui.sandbox.sdk import App, Ref, View, operation

#: How many thoughts are kept; recording one more drops the oldest.
MAX_THOUGHTS = 200
#: Longest thought text copied into an item's ``data-value`` (the limit is 10 KB).
VALUE_TEXT_CHARS = 500

Thought = dict[str, str]


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class ThoughtsView(View["ThoughtRecorder"]):
    """The root: every kept thought, oldest first."""

    template = """
<section view="Thoughts" description="Your scratchpad of reasoning">
  <h2>Thoughts</h2>
  <p>Only the newest {{ limit }} thoughts are kept; newest last.
  {%- if app.dropped %} {{ app.dropped }} older {{ "thought" if app.dropped == 1 else "thoughts" }}
  {#- #} dropped.{% endif %}</p>
{% if app.thoughts %}
  <ol list="thought[]:thoughts" title="Thoughts">
  {%- for t in app.thoughts -%}
    <li {{ view.item(t["id"], {"id": t["id"], "text": t["text"][:value_chars],
                               "tag": t["tag"] if "tag" in t else "", "time": t["time"]}) }}>
    {{- t["text"] | lines }}<ul><li>Time: {{ t["time"] }}</li>
    {%- if "tag" in t and t["tag"] %}<li>Tag: {{ t["tag"] }}</li>{% endif %}</ul></li>
  {%- endfor -%}
  </ol>
{% else %}
  <p>No thoughts recorded yet.</p>
{% endif %}
  {{ view.buttons() }}
</section>"""

    def context(self) -> Mapping[str, Any]:
        return {"limit": MAX_THOUGHTS, "value_chars": VALUE_TEXT_CHARS}

    @operation
    def record_thought(self, text: str, tag: str = "") -> Thought:
        """Write down a thought, optionally tagged."""
        return self.app.record(text, tag)

    @operation
    def delete_thought(self, thought: Ref[Literal["thought"]]) -> Thought:
        """Delete one thought."""
        return self.app.delete(thought.key)

    @operation
    def clear_thoughts(self) -> dict[str, int]:
        """Delete every thought."""
        return self.app.clear()


class ThoughtRecorder(App):
    """The recorder: thoughts oldest first, an id counter, and how many were dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.thoughts: list[Thought] = []
        self.next_id = 1
        self.dropped = 0
        self.root = ThoughtsView("thoughts")

    def roots(self) -> list[View[Any]]:
        return [self.root]

    def record(self, text: str, tag: str = "") -> Thought:
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

    def delete(self, thought_id: str) -> Thought:
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
