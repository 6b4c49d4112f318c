"""Chaos testing: a history of commands, faults and recoveries, judged and drawn afterwards.

- :mod:`~supervisor.chaos.events` — the records of a history, one frozen dataclass per kind.
- :mod:`~supervisor.chaos.history` — the JSONL file: ``HistoryWriter``, ``read_history``.
- :mod:`~supervisor.chaos.check` — ``aotui chaos check``: the invariants a history must hold.
- :mod:`~supervisor.chaos.report` — ``aotui chaos report``: summary table and SVG timeline.
- :mod:`~supervisor.chaos.timeline` — the timeline picture, SVG built with escaping by construction.
"""

__all__: list[str] = []
