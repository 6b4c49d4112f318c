"""The supervisor process (circus's arbiter and controller): one desktop's sockets and dispatch.

- :mod:`~supervisor.server.process` — ``Supervisor``: the process, its control and signal sockets,
  request dispatch, signal publishing.
- :mod:`~supervisor.server.registry` — snapshot ids and their ref tables.
- :mod:`~supervisor.server.sessions` — which snapshot each session last read.
- :mod:`~supervisor.server.lease` — the input lease.
- :mod:`~supervisor.server.throttle` — signal throttling.
- :mod:`~supervisor.server.client_queues`, :mod:`~supervisor.server.conn_guard` — what one client
  may make the supervisor spend (queued requests, connections, descriptors).
- :mod:`~supervisor.server.stall` — time the supervisor itself did not run.
"""

__all__: list[str] = []
