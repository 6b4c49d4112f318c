"""Keyed data that grows past a frame: ``put`` stores one part of ``kb`` KiB (large-state tests)."""

import hashlib
from typing import Any

from aotui.sandbox.sdk import App, View, operation


class PartsView(View["PartsApp"]):
    def inputs(self) -> int:
        return self.app.version

    def render(self) -> str:
        parts = self.app.parts
        size = sum(len(value) for value in parts.values())
        return f"""<section view="Parts"><p>Parts: {len(parts)}</p><p>Bytes: {size}</p>
<p>Digest: {self.app.digest()}</p>
<button operation="put" args='{{"name": "string", "kb": "integer"}}'>Put</button>
<button operation="drop" args='{{"name": "string"}}'>Drop</button></section>"""

    @operation
    def put(self, name: str, kb: int) -> str:
        name, kb = str(name), int(kb)
        # Each part differs (its name seeds it): a restore that mixed parts up would show.
        seed = hashlib.sha256(name.encode()).hexdigest()
        self.app.parts[name] = (seed * (kb * 1024 // 64 + 1))[: kb * 1024]
        self.app.changed(name)
        self.app.version += 1
        return self.app.digest()

    @operation
    def drop(self, name: str) -> str:
        name = str(name)
        self.app.parts.pop(name, None)
        self.app.changed(name)
        self.app.version += 1
        return self.app.digest()


class PartsApp(App):
    def __init__(self) -> None:
        super().__init__()
        self.parts: dict[str, str] = {}
        self.version = 0

    def roots(self) -> list[View[Any]]:
        return [PartsView("parts")]

    def digest(self) -> str:
        whole = hashlib.sha256()
        for name in sorted(self.parts):
            whole.update(f"{name}={self.parts[name]};".encode())
        return f"{len(self.parts)}:{whole.hexdigest()[:16]}"

    def state_inputs(self) -> int:
        return self.version

    def serialize(self) -> Any:
        return dict(self.parts)

    def serialize_part(self, part: str) -> Any:
        return self.parts.get(part)

    def restore(self, data: Any) -> None:
        self.parts = {name: value for name, value in data.items() if value is not None}


app = PartsApp()
