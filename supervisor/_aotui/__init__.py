"""aotui: a text desktop for LLM agents. This file installs as the package ``aotui`` itself.

The rooms install beneath it (``aotui.protocol``, ``aotui.sandbox``, ``aotui.supervisor``; see
pyproject's ``package-dir``), and the Python client is importable from the top, as CONTRACT §9
promises::

    from aotui import Client

Exports load on first use, so ``import aotui`` costs nothing a command does not need.
"""

from __future__ import annotations

from aotui.protocol.lazy import lazy_exports

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)

if TYPE_CHECKING:
    from aotui.protocol.errors import AotuiError, ErrorCode
    from aotui.supervisor.interface.client import Client, DesktopUnavailable

__all__ = ["AotuiError", "Client", "DesktopUnavailable", "ErrorCode"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "aotui.supervisor.interface.client": ("Client", "DesktopUnavailable"),
        "aotui.protocol.errors": ("AotuiError", "ErrorCode"),
    },
)
