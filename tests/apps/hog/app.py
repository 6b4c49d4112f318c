"""Allocates memory until stopped (runaway-memory tests and benchmark)."""

import time

from aotui.sandbox.sdk import App, View, operation


class HogView(View):
    def render(self) -> str:
        return """<section view="Hog"><p>Hungry.</p>
<button operation="eat" args='{"mb_per_step": "integer", "steps": "integer"}'>Eat</button>
</section>"""

    @operation
    def eat(self, mb_per_step: int, steps: int) -> None:
        hoard = []
        for _ in range(int(steps)):
            chunk = bytearray(int(mb_per_step) * 1024 * 1024)
            chunk[::4096] = b"x" * len(chunk[::4096])  # touch every page so it is resident
            hoard.append(chunk)
            time.sleep(0.005)


class HogApp(App):
    def roots(self) -> list[View]:
        return [HogView("hog")]


app = HogApp()
