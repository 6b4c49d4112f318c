"""Durable desktops: one store per named desktop (SQLite, or PostgreSQL), faults, locks, repair.

- :mod:`~supervisor.store.base` — the ``Store`` protocol both stores implement, ``Command``
  (command id → first reply), ``open_store`` (the store a config names).
- :mod:`~supervisor.store.store` — ``DesktopStore``: the SQLite default, one file per desktop.
- :mod:`~supervisor.store.postgres` — ``PostgresStore``: the desktop's rows in PostgreSQL.
- :mod:`~supervisor.store.rows` — the rows both keep: encoded, checksummed, assembled.
- :mod:`~supervisor.store.state` — ``DesktopState``, what is stored.
- :mod:`~supervisor.store.faults` — damage, I/O failure and "held" told apart.
- :mod:`~supervisor.store.lock` — one supervisor per store.
- :mod:`~supervisor.store.repair` — listing and salvage.
- :mod:`~supervisor.store.wal_check` — damage at the WAL's tail.
"""

__all__: list[str] = []
