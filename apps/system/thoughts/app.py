"""ThoughtRecorder: the agent's scratchpad of reasoning.

One root view, "Thoughts": the recorded thoughts (newest last), each with its time and an optional
tag, plus ``record_thought``, ``delete_thought`` and ``clear_thoughts``. Only the newest
:data:`MAX_THOUGHTS` are kept, so the scratchpad never grows without bound in the snapshot.

The thoughts are the app's stored data (``App.stored``): ``thought:<id>`` for each thought,
``next_id`` for the id counter and ``dropped`` for how many the limit dropped.
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
  {%- if dropped %} {{ dropped }} older {{ "thought" if dropped == 1 else "thoughts" }}
  {#- #} dropped.{% endif %}</p>
{% if thoughts %}
  <ol list="thought[]:thoughts" title="Thoughts">
  {%- for t in thoughts -%}
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
        return {
            "thoughts": self.app.thoughts(),
            "dropped": self.app.stored.get("dropped", 0),
            "limit": MAX_THOUGHTS,
            "value_chars": VALUE_TEXT_CHARS,
        }

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
    """Thoughts in ``stored``: ``thought:<id>`` each, ``next_id`` and ``dropped``."""

    def __init__(self) -> None:
        super().__init__()
        self.root = ThoughtsView("thoughts")

    def on_start(self) -> None:
        old = self.stored.get("thoughts")  # stored before issue 24: one list, oldest first
        if old is not None:
            del self.stored["thoughts"]
            for thought in old[-MAX_THOUGHTS:]:
                self.stored[_part(thought["id"])] = thought

    def roots(self) -> list[View[Any]]:
        return [self.root]

    def thoughts(self) -> list[Thought]:
        """Every kept thought, oldest first."""
        return [self.stored[key] for key in self._keys()]

    def record(self, text: str, tag: str = "") -> Thought:
        """Add a thought, dropping the oldest past :data:`MAX_THOUGHTS`; returns it."""
        if not text.strip():
            raise ValueError("a thought needs some text")
        number = int(self.stored.get("next_id", 1))
        thought = {"id": f"thought_{number}", "time": _now(), "text": text.strip()}
        if tag.strip():
            thought["tag"] = tag.strip()
        self.stored["next_id"] = number + 1
        self.stored[_part(thought["id"])] = thought
        kept = self._keys()
        excess = len(kept) - MAX_THOUGHTS
        if excess > 0:
            for key in kept[:excess]:
                del self.stored[key]
            self.stored["dropped"] = int(self.stored.get("dropped", 0)) + excess
        return thought

    def delete(self, thought_id: str) -> Thought:
        """Remove the thought with ``thought_id``; returns it."""
        thought: Thought | None = self.stored.get(_part(thought_id))
        if thought is None:
            raise LookupError(
                f"thought {thought_id!r} is already gone; read the Thoughts list again"
            )
        del self.stored[_part(thought_id)]
        return thought

    def clear(self) -> dict[str, int]:
        """Remove every thought; returns how many there were."""
        keys = self._keys()
        for key in keys:
            del self.stored[key]
        return {"cleared": len(keys)}

    def _keys(self) -> list[str]:
        """The thoughts' keys, oldest first (ids are numbered in the order they were added)."""
        keys = [key for key in self.stored if key.startswith("thought:")]
        return sorted(keys, key=lambda key: int(key.rpartition("_")[2]))


def _part(thought_id: str) -> str:
    return f"thought:{thought_id}"


app = ThoughtRecorder()
