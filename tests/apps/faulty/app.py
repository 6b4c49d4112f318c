"""An app with delayed faults: dying in the middle of an operation, or a stored state whose
render hangs (so every start from that state times out)."""

import os
import time

from aotui.sandbox.sdk import App, View, operation


class FaultyView(View):
    def render(self) -> str:
        if self.app.hang:  # type: ignore[union-attr]
            time.sleep(3600)
        count = self.app.count  # type: ignore[union-attr]
        return f"""<section view="Faulty"><p>Count: {count}</p>
<button operation="bump">Bump</button>
<button operation="die_after" args='{{"seconds": "number"}}'>Die later</button>
<button operation="poison">Store a state that cannot be rendered</button></section>"""

    @operation
    def bump(self) -> int:
        self.app.count += 1  # type: ignore[union-attr]
        return self.app.count  # type: ignore[union-attr]

    @operation
    def die_after(self, seconds: float) -> None:
        time.sleep(float(seconds))
        os._exit(3)

    @operation
    def poison(self) -> None:
        self.app.poisoned = True  # type: ignore[union-attr]


class FaultyApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.poisoned = False
        self.hang = False

    def roots(self) -> list[View]:
        return [FaultyView("faulty")]

    def serialize(self) -> object:
        return {"count": self.count, "poisoned": self.poisoned}

    def restore(self, data: object) -> None:
        self.count = data["count"]  # type: ignore[index]
        self.poisoned = self.hang = data["poisoned"]  # type: ignore[index]


app = FaultyApp()
