"""The broker's pool sizes, importable without the broker (which loads ``http.client``, ``ssl``
and ``email``: ~8 ms of every supervisor start, for apps that may never make a request)."""

from __future__ import annotations

__all__ = ["BROKER_THREADS", "BROKER_THREADS_PER_APP"]

#: Threads performing brokered requests for the whole desktop…
BROKER_THREADS = 8
#: …of which one app may hold at most this many (its other requests wait their turn).
BROKER_THREADS_PER_APP = 4
