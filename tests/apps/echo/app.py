"""A no-op app: its operation returns at once (used for round-trip benchmarks)."""

from aotui.sandbox.sdk import App, View, operation


class EchoView(View):
    def inputs(self) -> int:
        # What the view shows: a no-op is then a round trip alone, without a render.
        return self.app.count  # type: ignore[union-attr, no-any-return]

    def render(self) -> str:
        count = self.app.count  # type: ignore[union-attr]
        return f"""<section view="Echo"><p>Calls: {count}</p>
<button operation="noop" args='{{"value?": "string"}}'>No-op</button>
<button operation="bump">Bump</button></section>"""

    @operation
    def noop(self, value: str | None = None) -> object:
        return value

    @operation
    def bump(self) -> int:
        self.app.count += 1  # type: ignore[union-attr]
        return self.app.count  # type: ignore[union-attr]


class EchoApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def roots(self) -> list[View]:
        return [EchoView("echo")]

    def serialize(self) -> object:
        return {"count": self.count}

    def restore(self, data: object) -> None:
        self.count = data["count"]  # type: ignore[index]


app = EchoApp()
