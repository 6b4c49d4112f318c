"""An app that fails on demand: a raising handler, or the whole process exiting."""

import os
import sys
import time

from aotui.sandbox.sdk import App, View, operation


class CrashyView(View):
    def render(self) -> str:
        count = self.app.count  # type: ignore[union-attr]
        return f"""<section view="Crashy"><p>Count: {count}</p>
<button operation="bump">Bump</button>
<button operation="fail" args='{{"message": "string"}}'>Fail</button>
<button operation="die" args='{{"code": "integer"}}'>Die</button>
<button operation="forbidden">Read /root</button>
<button operation="shout" args='{{"text": "string"}}'>Print</button>
<button operation="spawn">Start a child process</button></section>"""

    @operation
    def bump(self) -> int:
        self.app.count += 1  # type: ignore[union-attr]
        return self.app.count  # type: ignore[union-attr]

    @operation
    def fail(self, message: str) -> None:
        raise ValueError(message)

    @operation
    def die(self, code: int) -> None:
        os._exit(int(code))

    @operation
    def shout(self, text: str) -> None:
        print(f"out: {text}", flush=True)
        print(f"err: {text}", file=sys.stderr, flush=True)

    @operation
    def spawn(self) -> int:
        pid = os.fork()
        if pid == 0:  # a child that would outlive everything if nobody killed it
            time.sleep(120)
            os._exit(0)
        return pid

    @operation
    def forbidden(self) -> None:
        raise PermissionError("[Errno 13] Permission denied: '/root/secret'")


class CrashyApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def roots(self) -> list[View]:
        return [CrashyView("crashy")]

    def serialize(self) -> object:
        return {"count": self.count}

    def restore(self, data: object) -> None:
        self.count = data["count"]  # type: ignore[index]


app = CrashyApp()
