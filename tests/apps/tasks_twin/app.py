"""The Python twin of the bundled web app ``apps/tasks`` (HTML and JavaScript).

The same markup from a Python template: tests/test_web_apps.py drives both with the same
commands and checks that the agent reads byte-identical Markdown from each (issue 22: one
renderer, whichever kind of app wrote the HTML).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from aotui.sandbox.sdk import App, Ref, View, operation

Task = dict[str, Any]


class TasksView(View["TasksApp"]):
    """The list of tasks, oldest first."""

    template = """
<section view="Tasks" description="Things to do, and what is done">
  <h2>Tasks</h2>
{% if tasks %}
  <ul list="task[]:tasks" title="Tasks">
  {%- for task in tasks %}
    <li {{ view.item(task["id"], task) }}>{{ task["title"] }}
      <ul><li>Done: {{ "yes" if task["done"] else "no" }}</li></ul></li>
  {%- endfor %}
  </ul>
{% else %}
  <p>No tasks yet.</p>
{% endif %}
  <p>{{ open }} open, {{ done }} done.</p>
  {{ view.buttons() }}
</section>"""

    def context(self) -> Mapping[str, Any]:
        tasks = self.app.tasks()
        done = sum(1 for task in tasks if task["done"])
        return {"tasks": tasks, "open": len(tasks) - done, "done": done}

    @operation
    def add_task(self, title: str) -> Task:
        """Add a task."""
        title = " ".join(title.split())
        if not title:
            raise ValueError("a task needs a title")
        number = int(self.app.stored.get("next_id", 1))
        task = {"id": f"task_{number}", "title": title, "done": False}
        self.app.stored["next_id"] = number + 1
        self.app.stored[f"task:{task['id']}"] = task
        return task

    @operation
    def complete(self, task: Ref[Literal["task"]]) -> Task:
        """Mark a task done."""
        return self.app.mark(task.key, True)

    @operation
    def reopen(self, task: Ref[Literal["task"]]) -> Task:
        """Mark a done task open again."""
        return self.app.mark(task.key, False)

    @operation
    def delete_task(self, task: Ref[Literal["task"]]) -> Task:
        """Delete a task."""
        found = self.app.task(task.key)
        del self.app.stored[f"task:{task.key}"]
        return found


class TasksApp(App):
    """Tasks in ``stored``: ``task:<id>`` each, and ``next_id``."""

    def roots(self) -> list[View[Any]]:
        return [TasksView("tasks")]

    def tasks(self) -> list[Task]:
        found = [self.stored[k] for k in self.stored if k.startswith("task:")]
        return sorted(found, key=lambda task: int(task["id"].removeprefix("task_")))

    def task(self, task_id: str) -> Task:
        found: Task | None = self.stored.get(f"task:{task_id}")
        if found is None:
            raise LookupError(f"task {task_id!r} no longer exists; read the list again")
        return found

    def mark(self, task_id: str, done: bool) -> Task:
        task = {**self.task(task_id), "done": done}
        self.stored[f"task:{task_id}"] = task
        return task


app = TasksApp()
