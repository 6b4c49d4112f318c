"""An app whose handler never returns in time."""

import time

from aotui.sandbox.sdk import App, View, operation


class SlowView(View):
    def render(self) -> str:
        return """<section view="Slow"><p>I am slow.</p>
<button operation="hang" args='{"seconds": "number"}'>Hang</button></section>"""

    @operation
    def hang(self, seconds: float) -> None:
        time.sleep(float(seconds))


class SlowApp(App):
    def roots(self) -> list[View]:
        return [SlowView("slow")]


app = SlowApp()
