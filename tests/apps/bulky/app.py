"""A large block: four views of 600 refs each (~27 KB a view); ``touch`` changes the first."""

from typing import Any

from aotui.sandbox.sdk import App, View, operation

#: Items per view: 600 short items stay under the 64 KB a view a snapshot shows.
ITEMS = 600


class Shelf(View["BulkyApp"]):
    template = """<section view="Shelf {{ view.number }}"><ol list="item[]:shelf{{ view.number }}">
{%- for i in range(count) %}<li {{ view.item("k" ~ view.number ~ "_" ~ i,
    {"shelf": view.number, "n": i}) }}>Item {{ i }} of shelf {{ view.number }}</li>{% endfor -%}
</ol><p>Touched {{ app.version if view.number == 0 else 0 }} times.</p>
{{ view.buttons() }}</section>"""

    def __init__(self, key: str, number: int) -> None:
        super().__init__(key)
        self.number = number

    def inputs(self) -> int:
        return self.app.version if self.number == 0 else 0

    def context(self) -> dict[str, Any]:
        return {"count": ITEMS}

    @operation
    def touch(self) -> int:
        """Count the call in the first view's text (its refs stay as they were)."""
        self.app.version += 1
        return self.app.version


class BulkyApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.version = 0

    def roots(self) -> list[View[Any]]:
        return [Shelf(f"shelf{n}", n) for n in range(4)]


app = BulkyApp()
