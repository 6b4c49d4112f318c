"""A hostile app: its operation ``attack --what X`` tries to starve the desktop (issue class D).

``stdout``: writes empty lines as fast as its output pipe takes them; ``log``: logs at the
admitted rate (10 lines a second) to push other apps' reports out of System Logs, or with
``--arg N`` N lines every 0.1 s (a flood the supervisor must receive and drop); ``biglog``: a
raw log frame of ``--arg`` characters (default 1,000,000) every 0.1 s, past the SDK's cut;
``http``: fills the broker with seven slow requests to ``--arg URL`` at once (raw ``HttpCall``
frames on its own channel, one fewer than the flood limit); ``storm``: exits 0.3 s from now and,
through its acknowledged state, 0.3 s after every restart, so that its manifest's restart policy
(``max_restarts`` 1e8 in 0.001 s without back-off) would restart it without end.
Each flood runs on a timer for ``--seconds`` (default 5) and the operation returns at once.
"""

from __future__ import annotations

import gc
import os
import time

import zmq

from aotui.protocol import codec
from aotui.protocol.messages import HttpCall, HttpRequest, LogLevel, LogRecord
from aotui.sandbox.sdk import App, Timer, View, operation

NEWLINES = b"\n" * 65536


class FlooderView(View):
    def render(self) -> str:
        return """<section view="Flooder"><p>Quiet for now.</p>
<button operation="attack" args='{"what": "string", "arg?": "string", "seconds?": "number"}'>
Attack</button></section>"""

    @operation
    def attack(self, what: str, arg: str | None = None, seconds: float | None = None) -> str:
        what = str(what)
        arg = str(arg or "")
        seconds = float(seconds or 5)
        app: FlooderApp = self.app  # type: ignore[assignment]
        if what == "storm":
            app.storm = True
            app.call_later(0.3, lambda: os._exit(3))
        elif what == "stdout":
            app.every(0.001, seconds, lambda: os.write(1, NEWLINES))
        elif what == "log":
            counter = iter(range(10**9))
            burst = int(arg or 1)  # lines a tick: 1 is the admitted rate, more a flood
            app.every(
                0.1, seconds, lambda: [app.log(f"chatter {next(counter)}") for _ in range(burst)]
            )
        elif what == "biglog":
            # Raw frames, past the SDK's 2,000-character cut: ``--arg`` characters a line.
            sock, line = _channel(), "chatter " * (int(arg or 1_000_000) // 8)
            frame = codec.encode(LogRecord(level=LogLevel.INFO, message=line))
            app.every(0.1, seconds, lambda: sock.send(frame))
        elif what == "http":
            sock = _channel()
            for call_id in range(10**6, 10**6 + 7):
                sock.send(codec.encode(HttpCall(call_id, HttpRequest("GET", arg))))
        else:
            raise LookupError(f"no attack {what!r}")
        return f"started {what}"


def _channel() -> zmq.Socket[bytes]:
    """The worker's own channel socket, to send raw frames the SDK would not."""
    return next(
        obj
        for obj in gc.get_objects()
        if isinstance(obj, zmq.Socket) and not obj.closed and obj.socket_type == zmq.PAIR
    )


class FlooderApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.timers: list[Timer] = []
        self.storm = False

    def every(self, interval: float, seconds: float, callback: object) -> None:
        """Run ``callback`` every ``interval`` seconds for ``seconds``."""
        until = time.monotonic() + seconds

        def tick() -> None:
            if time.monotonic() > until:
                for timer in self.timers:
                    timer.cancel()
                self.timers.clear()
                return
            callback()  # type: ignore[operator]

        self.timers.append(self.call_every(interval, tick))

    def roots(self) -> list[View]:
        return [FlooderView("flooder")]

    def serialize(self) -> object:
        return {"storm": self.storm}

    def restore(self, data: object) -> None:
        self.storm = bool(data.get("storm")) if isinstance(data, dict) else False

    def on_start(self) -> None:
        if self.storm:
            self.call_later(0.3, lambda: os._exit(3))


app = FlooderApp()
