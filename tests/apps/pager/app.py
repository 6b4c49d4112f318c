"""An app that links one page of child views at a time, each page under fresh keys.

``turn`` moves to the next page (50 keys never linked before, like 50 new notes); one link,
``pinned``, stays on every page. Turning 100 pages names 5,000 distinct views.
"""

from aotui.sandbox.sdk import App, View, operation

PAGE = 50


class PageView(View):
    def render(self) -> str:
        first = self.app.page * PAGE  # type: ignore[attr-defined]
        links = "".join(
            f'<li view-link="item:{n}" label="Item {n}">Item {n}</li>'
            for n in range(first, first + PAGE)
        )
        return f"""<section view="Pages"><h2>Page {self.app.page}</h2>
<ul><li view-link="pinned" label="Pinned">Pinned</li>{links}</ul>
<button operation="turn">Turn</button></section>"""

    @operation
    def turn(self) -> int:
        self.app.page += 1  # type: ignore[attr-defined]
        return self.app.page  # type: ignore[attr-defined, no-any-return]


class ItemView(View):
    def render(self) -> str:
        return f'<section view="Item"><p>{self.key}</p></section>'


class PagerApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.page = 0

    def roots(self) -> list[View]:
        return [PageView("pages")]

    def resolve_view(self, key: str) -> View | None:
        return ItemView(key) if key == "pinned" or key.startswith("item:") else None


app = PagerApp()
