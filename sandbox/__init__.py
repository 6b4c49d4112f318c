"""The app's side of the wall; imports ``protocol`` and never ``supervisor``.

- :mod:`sandbox.render` — ``render_view``: semantic HTML → Markdown, refs, operations, links;
  ``markdown``, ``flow``, ``marks``, ``controls``, ``tables`` and ``parsing`` are its parts.
- :mod:`sandbox.sdk` — what app authors import: ``App``, ``View``, ``operation``, ``OperationCall``;
  ``stored_data`` is ``App.stored``, the app's data that records its own writes.
- :mod:`sandbox.worker` — the worker process's loop (one per running app).
- :mod:`sandbox.zygote` — the pre-loaded process that forks workers; ``warm_up`` is what it
  runs once before forking, so that every worker shares what that builds.
- :mod:`sandbox.confine` — confinement applied before the app's first line, layer by layer:
  ``policy`` (what the supervisor grants), ``cgroups``, ``namespaces``, ``fsview`` (the worker's
  own filesystem view: a mount namespace holding only its grants), ``rlimits``, ``landlock``,
  ``seccomp``, on ``linux`` (the ctypes calls); ``probe`` says which layers a machine allows
  (``python -m aotui.sandbox.probe``). See ``docs/sandbox.md``.
- :mod:`sandbox.browser` and :mod:`sandbox.cdp` — a headless Chromium inside a worker's
  confinement, driven over ``--remote-debugging-pipe`` (the start of web apps, issue 22);
  :mod:`sandbox.web_generic` reads and drives a page with no aotui marks (``assets/generic.js``).
- :mod:`sandbox.webmcp` — a page's WebMCP tools as operations of its views; ``webmcp_schema``
  maps their JSON Schema onto the args grammar.
"""

# Exports load on first use (protocol/lazy.py): `aotui status` and every worker import one
# submodule, not the whole room, so a command's start-up pays only for what it runs.
from __future__ import annotations

from typing import TYPE_CHECKING

from aotui.protocol.lazy import lazy_exports

if TYPE_CHECKING:
    from aotui.sandbox.render import RenderedView, ViewLink, render_view
    from aotui.sandbox.sdk import App, OperationCall, Timer, View, operation

__all__ = [
    "App",
    "OperationCall",
    "RenderedView",
    "Timer",
    "View",
    "ViewLink",
    "operation",
    "render_view",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "aotui.sandbox.render": ("RenderedView", "ViewLink", "render_view"),
        "aotui.sandbox.sdk": ("App", "OperationCall", "Timer", "View", "operation"),
    },
)
