"""An app whose handler never returns in time."""

import time

from aotui.sandbox.sdk import App, OperationCall, View, operation


class SlowView(View):
    def render(self) -> str:
        return """<section view="Slow"><p>I am slow.</p>
<button operation="hang" args='{"seconds": "number"}'>Hang</button></section>"""

    @operation("hang")
    def hang(self, call: OperationCall) -> None:
        time.sleep(float(call.args["seconds"]))


class SlowApp(App):
    def roots(self) -> list[View]:
        return [SlowView("slow")]


app = SlowApp()
