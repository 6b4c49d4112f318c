"""An app whose worker takes 1.5 s to restore its data: a restart is seen from outside."""

import time

from aotui.sandbox.sdk import App, View, operation


class CounterView(View):
    template = '<section view="Counter"><p>Count: {{ app.count }}</p>{{ view.buttons() }}</section>'

    @operation
    def bump(self) -> int:
        """Count one more."""
        self.app.count += 1  # type: ignore[attr-defined]
        return self.app.count  # type: ignore[attr-defined, no-any-return]


class SlowstartApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def roots(self) -> list[View]:
        return [CounterView("counter")]

    def serialize(self) -> object:
        return {"count": self.count}

    def restore(self, data: object) -> None:
        self.count = data["count"]  # type: ignore[index]
        if self.count:
            time.sleep(1.5)  # a restart with data: slow to show its views again


app = SlowstartApp()
