"""Chaos testing: a history of commands, faults and recoveries, judged and drawn afterwards.

- :mod:`~supervisor.chaos.events` — the records of a history, one frozen dataclass per kind.
- :mod:`~supervisor.chaos.history` — the JSONL file: ``HistoryWriter``, ``read_history``.
- :mod:`~supervisor.chaos.check` — ``aotui chaos check``: the invariants a history must hold.
- :mod:`~supervisor.chaos.report` — ``aotui chaos report``: summary table and SVG timeline.
- :mod:`~supervisor.chaos.timeline` — the timeline picture, SVG built with escaping by construction.
- :mod:`~supervisor.chaos.plan` — seeded plans (TOML or flags): which faults, where, how often.
- :mod:`~supervisor.chaos.run` — ``aotui chaos run``: the desktop, the agent, timed faults, the end.
- :mod:`~supervisor.chaos.reaper` — the runner as the run's child subreaper: every process the run
  started, found at the end (``setsid`` and double forks too), recorded and killed.
- :mod:`~supervisor.chaos.nemesis` — inside a chaos run's supervisor: records, decides, injects.
- :mod:`~supervisor.chaos.injector` — how each fault is injected (signals, views, disks, HTTP).
- :mod:`~supervisor.chaos.views` — view digests, and the drift and lie faults that change views.
- :mod:`~supervisor.chaos.disk` — a small filesystem filled for real (disk_full).
- :mod:`~supervisor.chaos.agent` — ``aotui chaos app``'s seeded random agent.
- :mod:`~supervisor.chaos.cli` — the ``aotui chaos`` command group.
"""

__all__: list[str] = []
