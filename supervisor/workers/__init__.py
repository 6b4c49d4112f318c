"""Worker processes (circus's watcher and process): starting, watching and restarting apps.

- :mod:`~supervisor.workers.runner` — ``AppRunner``: the worker side of a desktop, its parts wired.
- :mod:`~supervisor.workers.lifecycle` — ``AppLifecycle``: open, close, kill, discard a worker.
- :mod:`~supervisor.workers.recovery` — ``Recovery``: exits, restart policy, a dead zygote revived.
- :mod:`~supervisor.workers.channel_events` — ``ChannelEvents``: what a worker says, handled.
- :mod:`~supervisor.workers.http_calls` — ``HttpCalls``: a worker's brokered HTTP, off the loop.
- :mod:`~supervisor.workers.heartbeat` — ``Heartbeat``: pings; a silent worker is killed.
- :mod:`~supervisor.workers.limits` — ``LimitEnforcer``: the watchdog's verdicts carried out.
- :mod:`~supervisor.workers.leases` — ``WorkerLeases``: each worker's uid, temp dir, app dir.
- :mod:`~supervisor.workers.app_copy` — the race-free, bounded copy of an app its uid cannot read.
- :mod:`~supervisor.workers.host` — ``RunnerHost``: what the parts need of their desktop.
- :mod:`~supervisor.workers.kill` — ``kill_worker``: the one way a worker is killed, with why.
- :mod:`~supervisor.workers.launcher` — the zygote that forks workers, supervised and restarted.
- :mod:`~supervisor.workers.zygote_start` — starting the zygote early, importing nothing heavy.
- :mod:`~supervisor.workers.handle` — ``WorkerHandle``: one worker's channel, frames checked.
- :mod:`~supervisor.workers.restore` — a restarted worker's state, in frame-sized chunks.
- :mod:`~supervisor.workers.exits` — ``ExitReason``: why the supervisor ended a worker.
- :mod:`~supervisor.workers.watchdog` — memory and CPU limits over each app's process group.
- :mod:`~supervisor.workers.restart` — ``RestartPolicy``, clamped to sane bounds.
- :mod:`~supervisor.workers.uids` — per-app uids, unique on the machine.
- :mod:`~supervisor.workers.app_tmp` — the apps' private temp dirs, reachable by name.
- :mod:`~supervisor.workers.app_logs` — each app's stdout/stderr, bounded and rotated.
"""

__all__: list[str] = []
