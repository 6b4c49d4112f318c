"""A counter whose data is several megabytes, so storing an acknowledged bump takes a while.

``bump --die true`` makes the worker kill itself ``DIE_AFTER_S`` after the operation returns:
after its acknowledgement has left, while the supervisor may still be storing it.
"""

import os
import signal
import threading
import time

from aotui.sandbox.sdk import App, View, operation

#: Data stored with every acknowledged bump (whole, not in parts).
PAD = "x" * (3 << 20)
#: When a dying worker kills itself, after the operation returned.
DIE_AFTER_S = 0.015


def _die_soon() -> None:
    time.sleep(DIE_AFTER_S)
    os.kill(os.getpid(), signal.SIGKILL)


class CounterView(View):
    def inputs(self) -> int:
        return self.app.count  # type: ignore[union-attr, no-any-return]

    def render(self) -> str:
        count = self.app.count  # type: ignore[union-attr]
        return f"""<section view="Counter"><p>Count: {count}</p>
<button operation="bump" args='{{"die?": "boolean"}}'>Bump</button></section>"""

    @operation
    def bump(self, die: bool | None = None) -> int:
        self.app.count += 1  # type: ignore[union-attr]
        if die:
            threading.Thread(target=_die_soon, daemon=True).start()
        return self.app.count  # type: ignore[union-attr]


class SlowStoreApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def roots(self) -> list[View]:
        return [CounterView("counter")]

    def serialize(self) -> object:
        return {"count": self.count, "pad": PAD}

    def restore(self, data: object) -> None:
        self.count = data["count"]  # type: ignore[index]


app = SlowStoreApp()
