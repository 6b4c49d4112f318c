"""Worker processes (circus's watcher and process): starting, watching and restarting apps.

- :mod:`~supervisor.workers.runner` — ``AppRunner``: launch, stop, heartbeats, watchdog, restarts.
- :mod:`~supervisor.workers.launcher` — the zygote that forks workers, supervised and restarted.
- :mod:`~supervisor.workers.handle` — ``WorkerHandle``: one worker's channel, frames checked.
- :mod:`~supervisor.workers.exits` — ``ExitReason``: why the supervisor ended a worker.
- :mod:`~supervisor.workers.watchdog` — memory and CPU limits over each app's process group.
- :mod:`~supervisor.workers.restart` — ``RestartPolicy``, clamped to sane bounds.
- :mod:`~supervisor.workers.uids` — per-app uids, unique on the machine.
- :mod:`~supervisor.workers.app_logs` — each app's stdout/stderr, bounded and rotated.
"""

__all__: list[str] = []
