"""Package exports that load on first use (PEP 562), for the rooms' ``__init__`` modules.

``import aotui.protocol`` then imports no submodule; reading ``aotui.protocol.encode`` imports the
codec, once. ``aotui status`` and every worker import the one submodule they use, not the whole
room, so a command's start-up pays only for what it runs. It lives in ``protocol`` because every
room may import ``protocol`` and ``protocol`` imports nothing else of aotui.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``; ``exports`` maps modules to names."""
    home = {name: module for module, names in exports.items() for name in names}
    # Called while the package's __init__ runs: it is already in sys.modules.
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later reads find it without calling this again
        return value

    def __dir__() -> list[str]:
        return sorted(home)

    return __getattr__, __dir__
