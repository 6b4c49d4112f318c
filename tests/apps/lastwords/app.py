"""An app whose start fails while the supervisor is not reading its channel.

It logs as many lines as the supervisor takes from one worker in a second (10 shown, 500 more
read and dropped: supervisor/workers/handle.py), so the supervisor leaves its channel unread for
the rest of that second; then, once those have surely been read, it raises. Its exit is heard
while its traceback waits unread: the report is logged only if the supervisor reads the channel
of a worker that ended to the end before closing it.
"""

import time

from aotui.sandbox.sdk import App, View

#: LOG_LINES_PER_S + LOG_DROPS_PER_S: the supervisor's log budget for one worker and second.
BURST = 510


class LastWordsApp(App):
    def roots(self) -> list[View]:
        return []

    def on_start(self) -> None:
        for line in range(BURST):
            self.log(f"warming up {line}")
        # Few enough frames follow that ZeroMQ still takes them in while nobody reads (its
        # queue holds 4): what is lost otherwise is lost inside libzmq, past any reader.
        time.sleep(0.5)
        raise ValueError("the settings are corrupt")


app = LastWordsApp()
