"""The child of the start-path benchmark: import what a worker needs, then say ready."""

from typing import Any


def ready(conn: Any) -> None:
    """Import the worker's heavy modules and report."""
    import lxml.html  # noqa: F401
    import msgpack  # noqa: F401
    import zmq  # noqa: F401

    conn.send(1)
