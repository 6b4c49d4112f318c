"""A loopback HTTP server for the benches' pages (the Browser reaches it by a test grant)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Quiet", "serve"]


class Quiet(http.server.SimpleHTTPRequestHandler):
    """A directory's files, without a log line per request."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path, handler: type[Quiet] = Quiet) -> Iterator[int]:
    """``directory`` served on a loopback port the kernel picks (yielded) until the block ends."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
