"""Spins the CPU from a timer once asked to (runaway-CPU tests)."""

import time

from aotui.sandbox.sdk import App, View, operation


class SpinView(View):
    def render(self) -> str:
        return """<section view="Spinner"><p>Idle until told.</p>
<button operation="spin">Spin</button></section>"""

    @operation
    def spin(self) -> None:
        self.app.call_every(0.01, burn)  # type: ignore[union-attr]


def burn() -> None:
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pass


class SpinnerApp(App):
    def roots(self) -> list[View]:
        return [SpinView("spin")]


app = SpinnerApp()
