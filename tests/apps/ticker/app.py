"""An app that changes on its own, every 10 ms, for signal throttling tests."""

from aotui.sandbox.sdk import App, View


class TickView(View):
    def render(self) -> str:
        return f'<section view="Ticker"><p>Ticks: {self.app.ticks}</p></section>'  # type: ignore[union-attr]


class TickerApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0

    def roots(self) -> list[View]:
        return [TickView("ticker")]

    def on_start(self) -> None:
        self.call_every(0.01, self.tick)

    def tick(self) -> None:
        self.ticks += 1


app = TickerApp()
