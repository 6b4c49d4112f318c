"""The app's side of the wall; imports ``protocol`` and never ``supervisor``.

- :mod:`sandbox.render` — ``render_view``: semantic HTML → Markdown, refs, operations, links;
  ``markdown``, ``flow``, ``marks``, ``controls``, ``tables`` and ``parsing`` are its parts.
- :mod:`sandbox.sdk` — what app authors import: ``App``, ``View``, ``operation``, ``OperationCall``.
- :mod:`sandbox.worker` — the worker process's loop (one per running app).
- :mod:`sandbox.zygote` — the pre-loaded process that forks workers.
- :mod:`sandbox.confine` — confinement applied before the app's first line.
"""

from sandbox.render import RenderedView, ViewLink, render_view
from sandbox.sdk import App, OperationCall, Timer, View, operation

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
