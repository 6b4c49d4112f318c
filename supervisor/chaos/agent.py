"""The built-in random agent of ``aotui chaos app``: seeded exploration of one app.

Like a hypothesis stateful test, each step reads the desktop (a structured pull in its own
session), lists the moves the app offers right now — every visible operation with arguments
drawn from its declared schema (refs from the visible items of the wanted type), and mounting a
view the tree lists — and makes one, chosen by a seeded ``random.Random``. Errors are answers,
not failures: the history records them and the checker judges them.
"""

from __future__ import annotations

import random
import re
import string
import time
from dataclasses import dataclass
from typing import Any

from aotui.protocol.errors import AotuiError
from aotui.supervisor.chaos.run import DESKTOP
from aotui.supervisor.interface.client import Client, DesktopUnavailable

__all__ = ["Move", "RandomAgent"]

#: The session the agent reads and acts in (the history tells its commands by it).
SESSION = "chaos-random"
_TREE_LINK = re.compile(r"\[([^\]]*)\]\(view:(view_\d+)\)(?!, mounted)")
_WORDS = ("alpha", "beta", "gamma", "delta", "note", "plan", "todo", "x", "42", "été")


@dataclass(frozen=True)
class Move:
    """One thing the agent can do: a structured command."""

    #: ``execute`` or ``mount``.
    kind: str
    #: The structured command (CONTRACT §5) or the mount's context text.
    command: dict[str, Any] | str


class RandomAgent:
    """Drives one app (by manifest id) with seeded random moves."""

    def __init__(
        self,
        manifest_id: str,
        seed: int,
        steps: int,
        deadline_s: float = 60.0,
        pause_s: float = 0.02,
    ) -> None:
        self.manifest_id = manifest_id
        self.rng = random.Random(f"{seed}:agent")
        #: Confirmations answered (as the user: confirmed or refused).
        self.answered = 0
        self.steps = steps
        self.deadline_s = deadline_s
        self.pause_s = pause_s
        self.moves = 0

    def __call__(self, env: dict[str, str]) -> int:
        """Run until ``steps`` moves are made or the desktop goes away; 0 when all were made."""
        with Client(DESKTOP, env["AOTUI_SOCKET"], timeout_s=30.0) as client:
            try:
                app = self._open(client)
                deadline = time.monotonic() + self.deadline_s
                while self.moves < self.steps and time.monotonic() < deadline:
                    self._step(client, app)
                    time.sleep(self.pause_s)
            except DesktopUnavailable:
                return 1
        return 0

    def _open(self, client: Client) -> str:
        apps = client.status()["apps"]
        app = next((a["app"] for a in apps if a["id"] == self.manifest_id), None)
        if app is None:
            raise DesktopUnavailable(f"{self.manifest_id} is not installed on the chaos desktop")
        self._send(client, f"<context>open --application {app}</context>")
        return str(app)

    def _step(self, client: Client, app: str) -> None:
        try:
            pulled = client.call("snapshot", format="json", session=SESSION)
        except DesktopUnavailable:
            raise
        except AotuiError:
            self.moves += 1
            return
        block = next((a for a in pulled.get("apps", []) if a["app"] == app), None)
        if block is None:  # closed, restarting or failed: open it again
            self._send(client, f"<context>open --application {app}</context>")
            return
        moves = self.offered(app, block)
        if not moves:
            self.moves += 1
            return
        move = self.rng.choice(moves)
        if move.kind == "mount":
            assert isinstance(move.command, str)
            self._send(client, move.command)
        else:
            self._send(client, move.command, pulled["snapshot_id"])

    def offered(self, app: str, block: dict[str, Any]) -> list[Move]:
        """Every move the app's block offers now."""
        moves: list[Move] = []
        for view in block.get("views", []):
            refs: dict[str, dict[str, Any]] = view.get("refs", {})
            for operation in view.get("operations", []):
                args = self._args(operation.get("args", {}), refs)
                if args is not None:
                    command = {
                        "app": app,
                        "view": view["view"],
                        "operation": operation["id"],
                        "args": args,
                    }
                    moves.append(Move("execute", command))
        for _label, view_id in _TREE_LINK.findall(block.get("info", "")):
            text = f'<context app_id="{app}">mount --view {view_id}</context>'
            moves.append(Move("mount", text))
        return moves

    def _args(self, schema: Any, refs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """Arguments drawn from the schema; None when a required ref has nothing to point at."""
        if not isinstance(schema, dict):
            return {}
        args: dict[str, Any] = {}
        for raw_name, kind in schema.items():
            name = raw_name.rstrip("?")
            if raw_name.endswith("?") and self.rng.random() < 0.5:
                continue
            value = self._value(str(kind), refs)
            if value is None:
                if raw_name.endswith("?"):
                    continue
                return None
            args[name] = value
        return args

    def _value(self, kind: str, refs: dict[str, dict[str, Any]]) -> Any:
        if kind == "string":
            words = self.rng.randint(1, 3)
            text = " ".join(self.rng.choice(_WORDS) for _ in range(words))
            return f"{text} {self.rng.choice(string.ascii_lowercase)}{self.rng.randrange(100)}"
        if kind == "integer":
            return self.rng.randint(0, 20)
        if kind == "number":
            return round(self.rng.uniform(0, 100), 2)
        if kind == "boolean":
            return self.rng.random() < 0.5
        matching = sorted(ref for ref, info in refs.items() if info.get("type") == kind)
        return self.rng.choice(matching) if matching else None

    def _send(
        self, client: Client, command: dict[str, Any] | str, snapshot: str | None = None
    ) -> None:
        self.moves += 1
        params: dict[str, Any] = {"session": SESSION}
        if snapshot is not None:
            params["snapshot_id"] = snapshot
        if isinstance(command, str):
            method, params["text"] = "exec", command
        else:
            method = "execute"
            params.update(command)
        try:
            reply = client.call(method, **params)
        except DesktopUnavailable:
            raise
        except AotuiError:
            return  # an answer like any other: the history has it
        waiting = reply.get("waiting") if isinstance(reply, dict) else None
        if waiting is not None:
            self._answer(client, waiting)

    def _answer(self, client: Client, waiting: dict[str, Any]) -> None:
        """Be the user: confirm or refuse (seeded, half each) what waits for them."""
        deny = self.rng.random() < 0.5
        self.answered += 1
        try:
            client.call("confirm", confirmation=waiting["confirmation"], deny=deny)
        except DesktopUnavailable:
            raise
        except AotuiError:
            pass  # a refusal answers E_PERMISSION; a failure its error: the history has it
