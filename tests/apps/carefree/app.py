"""Items an author keeps the way the SDK says and no more: written to ``self.stored``, read back.

The same list as ``forgetful`` (whose planted bug loses its stars), written by an author who
forgets everything else: no ``inputs()``, ``serialize``, ``restore``, counters or part names.
Every acknowledged add, star and removal must still survive kill -9, and show at once.
"""

from collections.abc import Mapping
from typing import Any, Literal

from aotui.sandbox.sdk import App, Ref, View, operation


class ItemsView(View["CarefreeApp"]):
    template = """<section view="Items"><h2>Items</h2>
<ul list="item[]:items">
{%- for key in keys %}{% set item = app.stored[key] %}
<li {{ view.item(key, {"id": key, "text": item["text"]}) }}>
{{- "★ " if item["starred"] }}{{ item["text"] }}</li>
{%- endfor %}
</ul>
{{ view.buttons() }}</section>"""

    def context(self) -> Mapping[str, Any]:
        return {"keys": sorted(self.app.stored, key=lambda key: int(key[1:]))}

    @operation
    def add_item(self, text: str) -> str:
        """Add an item."""
        key = f"i{max((int(key[1:]) for key in self.app.stored), default=-1) + 1}"
        self.app.stored[key] = {"text": text[:40], "starred": False}
        return key

    @operation
    def star(self, item: Ref[Literal["item"]]) -> None:
        """Star an item."""
        self.app.stored[item.key] = {**self.app.stored[item.key], "starred": True}

    @operation
    def remove(self, item: Ref[Literal["item"]]) -> None:
        """Remove an item."""
        del self.app.stored[item.key]


class CarefreeApp(App):
    def roots(self) -> list[View[Any]]:
        return [ItemsView("items")]


app = CarefreeApp()
