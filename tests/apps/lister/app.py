"""An app with a 100-item list whose order can change (stale-ref tests, snapshot benchmarks)."""

import json
from html import escape
from typing import Literal

from aotui.sandbox.sdk import App, Ref, View, operation


class ListView(View):
    def render(self) -> str:
        items = "".join(
            f"<li key=\"{k}\" data-value='{escape(json.dumps({'id': k}))}'>Item {k}"
            f"<ul><li>Position: {i}</li></ul></li>"
            for i, k in enumerate(self.app.items)  # type: ignore[union-attr]
        )
        return f"""<section view="Items"><h2>Items</h2>
<ol list="item[]:items" title="Items">{items}</ol>
<button operation="pick" args='{{"item": "item"}}'>Pick</button>
<button operation="rotate">Rotate</button>
<button operation="remove_first">Remove first</button></section>"""

    @operation
    def pick(self, item: Ref[Literal["item"]]) -> object:
        return {"value": item.value, "key": item.key}

    @operation
    def rotate(self) -> None:
        items = self.app.items  # type: ignore[union-attr]
        items.append(items.pop(0))

    @operation
    def remove_first(self) -> None:
        self.app.items.pop(0)  # type: ignore[union-attr]


class ListerApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.items = [f"k{i}" for i in range(100)]

    def roots(self) -> list[View]:
        return [ListView("items")]


app = ListerApp()
