"""A hostile app: ``orphan`` double-forks, so the grandchild is re-parented away from the worker
and holds ``--mb`` MB (or spins with ``--spin``) where a parent-chain walk cannot see it."""

from __future__ import annotations

import os
import time

from aotui.sandbox.sdk import App, View, operation


class OrphanerView(View):
    def render(self) -> str:
        return """<section view="Orphaner"><p>Quiet for now.</p>
<button operation="orphan" args='{"mb?": "integer", "spin?": "boolean"}'>Orphan</button>
</section>"""

    @operation
    def orphan(self, mb: int | None = None, spin: bool | None = None) -> int:
        megabytes = int(mb or 0)
        spin = bool(spin)
        read_end, write_end = os.pipe()
        if os.fork() == 0:
            if os.fork() == 0:
                block = b"\x01" * (megabytes << 20)  # written, so resident
                os.write(write_end, str(os.getpid()).encode())
                while block is not None:
                    if not spin:
                        time.sleep(1)
            os._exit(0)
        os.wait()  # the middle child is gone: the grandchild is an orphan now
        os.close(write_end)
        pid = int(os.read(read_end, 32) or b"0")
        os.close(read_end)
        return pid


class OrphanerApp(App):
    def roots(self) -> list[View]:
        return [OrphanerView("orphaner")]


app = OrphanerApp()
