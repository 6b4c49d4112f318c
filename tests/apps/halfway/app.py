"""Keyed items, one part each: ``add`` stores one; ``add_then_fail`` adds one and raises."""

from typing import Any

from aotui.sandbox.sdk import App, View, operation


class ItemsView(View["HalfwayApp"]):
    template = """<section view="Items"><ul list="item[]:items" title="Items">
{%- for item in app.items %}<li {{ view.item(item) }}>{{ item }}</li>{% endfor -%}
</ul><p>Count: {{ app.items | length }}</p>{{ view.buttons() }}</section>"""

    def inputs(self) -> int:
        return self.app.version

    @operation
    def add(self, text: str) -> int:
        """Add an item."""
        self.app.add(text)
        return len(self.app.items)

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
    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []
        self.version = 0

    def roots(self) -> list[View[Any]]:
        return [ItemsView("items")]

    def state_inputs(self) -> int:
        return self.version

    def add(self, text: str) -> None:
        self.items.append(text)
        self.version += 1
        self.changed(f"item:{len(self.items) - 1}")

    def serialize(self) -> Any:
        return {f"item:{i}": text for i, text in enumerate(self.items)}

    def serialize_part(self, part: str) -> Any:
        index = int(part.removeprefix("item:"))
        return self.items[index] if index < len(self.items) else None

    def restore(self, data: Any) -> None:
        parts = sorted(data.items(), key=lambda kv: int(kv[0].removeprefix("item:")))
        self.items = [text for _, text in parts if text is not None]
        self.version += 1


app = HalfwayApp()
