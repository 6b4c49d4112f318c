"""A list of items with a planted bug: ``star`` changes what is shown, but serialize() omits it.

``aotui chaos app`` must find it: after a worker is killed and restarted from its acknowledged
state, the star is gone although its operation was acknowledged.
"""

import json
from typing import Literal

from aotui.sandbox.sdk import App, Ref, View, operation


class ItemsView(View):
    def render(self) -> str:
        app = self.app
        rows = "".join(
            f"<li key='i{n}' data-value='{json.dumps({'id': f'i{n}', 'text': text})}'>"
            f"{'★ ' if f'i{n}' in app.starred else ''}{text}</li>"  # type: ignore[union-attr]
            for n, text in enumerate(app.items)  # type: ignore[union-attr]
        )
        return f"""<section view="Items"><h2>Items</h2>
<ul list="item[]:items">{rows}</ul>
<button operation="add_item" args='{{"text": "string"}}'>Add</button>
<button operation="star" args='{{"item": "item"}}'>Star</button></section>"""

    @operation
    def add_item(self, text: str) -> int:
        self.app.items.append(str(text)[:40])  # type: ignore[union-attr]
        return len(self.app.items)  # type: ignore[union-attr]

    @operation
    def star(self, item: Ref[Literal["item"]]) -> None:
        self.app.starred.add(item.value["id"])  # type: ignore[union-attr]


class ForgetfulApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []
        self.starred: set[str] = set()

    def roots(self) -> list[View]:
        return [ItemsView("items")]

    def serialize(self) -> object:
        return {"items": self.items}  # the bug: ``starred`` is not saved

    def restore(self, data: object) -> None:
        self.items = list(data["items"])  # type: ignore[index]


app = ForgetfulApp()
