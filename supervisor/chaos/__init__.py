"""Chaos testing: a history of commands, faults and recoveries, judged and drawn afterwards.

- :mod:`~supervisor.chaos.history` — the JSONL history: event records, ``HistoryWriter``,
  ``read_history``.
- :mod:`~supervisor.chaos.check` — ``aotui chaos check``: the invariants a history must hold.
- :mod:`~supervisor.chaos.report` — ``aotui chaos report``: summary table and SVG timeline.
"""

__all__: list[str] = []
