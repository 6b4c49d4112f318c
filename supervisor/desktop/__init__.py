"""One desktop's contents: its apps, their views, and the snapshot assembled from them.

- :mod:`~supervisor.desktop.desktop` — ``Desktop``: what each command does to apps and views.
- :mod:`~supervisor.desktop.app_record` — one app's record and state machine (the desktop owns it).
- :mod:`~supervisor.desktop.view_tree` — an app's views, ids and cached fragments, with budgets.
- :mod:`~supervisor.desktop.snapshot` — the Markdown snapshot from cached fragments, with budgets.
- :mod:`~supervisor.desktop.instructions`, :mod:`~supervisor.desktop.system_log` — the system views.
- :mod:`~supervisor.desktop.snapshot_pull` — what one pull shows: focus, diff, token budget
  (:mod:`~supervisor.desktop.snapshot_diff`, :mod:`~supervisor.desktop.snapshot_budget`,
  :mod:`~supervisor.desktop.tokens`).
- :mod:`~supervisor.desktop.controls` — seed 004's checks before an operation: dialogs, policy.
- :mod:`~supervisor.desktop.confirmations` — operations waiting for the user, and their outcomes.
"""

__all__: list[str] = []
