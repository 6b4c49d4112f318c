"""``parts`` written with ``App.stored``: ``put`` stores ``kb`` KiB under a name; ``drop``."""

import hashlib
from collections.abc import Mapping
from typing import Any

from aotui.sandbox.sdk import App, View, operation


class PartsView(View["BigStoreApp"]):
    template = """<section view="Parts"><p>Parts: {{ count }}</p><p>Digest: {{ digest }}</p>
{{ view.buttons() }}</section>"""

    def context(self) -> Mapping[str, Any]:
        return {"count": len(self.app.stored), "digest": self.app.digest()}

    @operation
    def put(self, name: str, kb: int) -> str:
        """Store kb KiB under name."""
        # Each value differs (its name seeds it): a restore that mixed them up would show.
        seed = hashlib.sha256(name.encode()).hexdigest()
        self.app.stored[name] = (seed * (kb * 1024 // 64 + 1))[: kb * 1024]
        return self.app.digest()

    @operation
    def drop(self, name: str) -> str:
        """Delete what is stored under name."""
        if name in self.app.stored:
            del self.app.stored[name]
        return self.app.digest()


class BigStoreApp(App):
    def roots(self) -> list[View[Any]]:
        return [PartsView("parts")]

    def digest(self) -> str:
        whole = hashlib.sha256()
        for name in sorted(self.stored):
            whole.update(f"{name}={self.stored[name]};".encode())
        return f"{len(self.stored)}:{whole.hexdigest()[:16]}"


app = BigStoreApp()
