"""Keeps every text it is given, so its stored state grows (store-fault and frame-limit tests)."""

from aotui.sandbox.sdk import App, View, operation


class HoardView(View):
    def render(self) -> str:
        hoard = self.app.items  # type: ignore[union-attr]
        size = sum(len(item) for item in hoard)
        return f"""<section view="Hoard"><p>Items: {len(hoard)}</p><p>Bytes: {size}</p>
<button operation="add" args='{{"text": "string"}}'>Add</button>
<button operation="grow" args='{{"kb": "integer"}}'>Grow</button>
<button operation="big_result" args='{{"kb": "integer"}}'>Big result</button></section>"""

    @operation
    def add(self, text: str) -> int:
        self.app.items.append(str(text))  # type: ignore[union-attr]
        return len(self.app.items)  # type: ignore[union-attr]

    @operation
    def grow(self, kb: int) -> int:
        self.app.items.append("x" * (int(kb) * 1024))  # type: ignore[union-attr]
        return len(self.app.items)  # type: ignore[union-attr]

    @operation
    def big_result(self, kb: int) -> str:
        self.app.items.append("r")  # type: ignore[union-attr]
        return "y" * (int(kb) * 1024)


class HoardApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []

    def roots(self) -> list[View]:
        return [HoardView("hoard")]

    def serialize(self) -> object:
        return {"items": self.items}

    def restore(self, data: object) -> None:
        self.items = list(data["items"])  # type: ignore[index]


app = HoardApp()
