"""Vault: seed 004's controls from the app's side (tests/test_controls.py).

The root "Vault" has ``deposit``, ``wipe`` (SDK ``confirm=True``), ``purge`` and ``slow``; it links
two dialogs: "Close Account" (an SDK view with ``modal = True``) and "Raw Dialog" (markup written
by hand: ``modal`` on its root, ``confirm`` on its ``drop`` button).
"""

from __future__ import annotations

import time
from typing import Any

from aotui.sandbox.sdk import App, View, operation


class VaultView(View["VaultApp"]):
    """The root: the balance and every operation of the test."""

    template = """
<section view="Vault" description="A balance">
  <p>Balance: {{ app.balance }}</p>
  <p>Wipes: {{ app.wipes }}</p>
  <ul>
    <li{{ view.link_attrs("close", "A dialog") }}>Close Account</li>
    <li{{ view.link_attrs("raw", "A dialog written as markup") }}>Raw Dialog</li>
  </ul>
  {{ view.buttons() }}
</section>"""

    @operation
    def deposit(self, amount: int) -> int:
        """Add to the balance."""
        self.app.balance += amount
        return self.app.balance

    @operation(confirm=True)
    def wipe(self) -> int:
        """Set the balance to zero."""
        self.app.balance = 0
        self.app.wipes += 1
        return self.app.wipes

    @operation
    def purge(self) -> str:
        """Forget everything (the desktop policy of the tests denies it)."""
        self.app.balance = 0
        return "purged"

    @operation
    def slow(self, ms: int) -> int:
        """Take ms milliseconds."""
        time.sleep(ms / 1000)
        return ms


class CloseDialog(View["VaultApp"]):
    """A dialog declared with the SDK."""

    modal = True
    template = """
<section view="Close Account" description="Really close it?">
  <p>Close the account with balance {{ app.balance }}?</p>
  {{ view.buttons() }}
</section>"""

    @operation
    def close_account(self) -> str:
        """Close the account."""
        self.app.closed = True
        return "closed"


class RawDialog(View["VaultApp"]):
    """A dialog written as markup by hand."""

    def render(self) -> str:
        return """<section view="Raw Dialog" modal>
<p>Drop the vault?</p>
<button operation="drop" confirm description="Drop it">Drop</button></section>"""

    @operation
    def drop(self) -> str:
        self.app.dropped += 1
        return "dropped"


class VaultApp(App):
    """The balance, and counters the tests read."""

    def __init__(self) -> None:
        super().__init__()
        self.balance = 0
        self.wipes = 0
        self.dropped = 0
        self.closed = False
        self.root = VaultView("vault")

    def roots(self) -> list[View[Any]]:
        return [self.root]

    def resolve_view(self, key: str) -> View[Any] | None:
        kinds: dict[str, type[View[Any]]] = {"close": CloseDialog, "raw": RawDialog}
        return kinds[key](key) if key in kinds else None

    def serialize(self) -> Any:
        return {"balance": self.balance, "wipes": self.wipes, "dropped": self.dropped}

    def restore(self, data: Any) -> None:
        self.balance, self.wipes, self.dropped = data["balance"], data["wipes"], data["dropped"]


app = VaultApp()
