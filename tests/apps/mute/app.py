"""Answers nothing once asked to freeze: its loop blocks forever (heartbeat tests)."""

import time

from aotui.sandbox.sdk import App, View, operation


class MuteView(View):
    def render(self) -> str:
        return """<section view="Mute"><p>Talkative, for now.</p>
<button operation="freeze">Freeze</button></section>"""

    @operation
    def freeze(self) -> None:
        while True:
            time.sleep(1)


class MuteApp(App):
    def roots(self) -> list[View]:
        return [MuteView("mute")]


app = MuteApp()
