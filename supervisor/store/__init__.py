"""Durable desktops: one SQLite store per named desktop, its faults, locks and repair.

- :mod:`~supervisor.store.store` — ``DesktopStore``: load and save, acknowledged writes.
- :mod:`~supervisor.store.state` — ``DesktopState``, what is stored.
- :mod:`~supervisor.store.faults` — damage, I/O failure and "held" told apart.
- :mod:`~supervisor.store.lock` — one supervisor per store.
- :mod:`~supervisor.store.repair` — listing and salvage.
- :mod:`~supervisor.store.wal_check` — damage at the WAL's tail.
"""

__all__: list[str] = []
