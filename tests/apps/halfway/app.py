"""Items in ``App.stored``, a key each: ``add`` stores one; ``add_then_fail`` adds one, raises."""

from collections.abc import Mapping
from typing import Any

from aotui.sandbox.sdk import App, View, operation


class ItemsView(View["HalfwayApp"]):
    template = """<section view="Items"><ul list="item[]:items" title="Items">
{%- for item in items %}<li {{ view.item(item) }}>{{ item }}</li>{% endfor -%}
</ul><p>Count: {{ items | length }}</p>{{ view.buttons() }}</section>"""

    def context(self) -> Mapping[str, Any]:
        return {"items": self.app.items()}

    @operation
    def add(self, text: str) -> int:
        """Add an item."""
        self.app.add(text)
        return len(self.app.items())

    @operation
    def add_then_fail(self, text: str) -> int:
        """Add an item, then fail."""
        self.app.add(text)
        raise ValueError(f"failed after adding {text}")

    @operation
    def fail(self) -> int:
        """Fail without changing anything."""
        raise ValueError("failed before changing anything")


class HalfwayApp(App):
    def roots(self) -> list[View[Any]]:
        return [ItemsView("items")]

    def items(self) -> list[str]:
        return [self.stored[f"item:{n}"] for n in range(len(self.stored))]

    def add(self, text: str) -> None:
        self.stored[f"item:{len(self.stored)}"] = text


app = HalfwayApp()
