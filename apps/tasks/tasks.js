// Tasks, the bundled web app (docs/web-apps.md walks through it). The page marks its DOM with
// the same attributes as a Python app; the desktop reads the marked DOM and delivers each
// operation as an `aotui:operation` event, which aotui.operation() turns into a call.
"use strict";

// The app's data, kept across restarts through aotui.serialize / aotui.restore.
let state = { nextId: 1, tasks: [] };

const list = document.getElementById("tasks");
const empty = document.getElementById("empty");
const counts = document.getElementById("counts");

function show() {
  list.replaceChildren(...state.tasks.map((task) => {
    const item = document.createElement("li");
    item.setAttribute("key", task.id);
    item.dataset.value = JSON.stringify(task);
    const details = document.createElement("ul");
    const done = document.createElement("li");
    done.textContent = `Done: ${task.done ? "yes" : "no"}`;
    details.append(done);
    item.append(task.title, details);
    return item;
  }));
  list.hidden = state.tasks.length === 0;
  empty.hidden = state.tasks.length > 0;
  const finished = state.tasks.filter((task) => task.done).length;
  counts.textContent = `${state.tasks.length - finished} open, ${finished} done.`;
}

function find(ref) {
  // A reference arrives as the item the agent read: its key and its data-value.
  const task = state.tasks.find((t) => t.id === ref.key);
  if (!task) throw new Error(`task '${ref.key}' no longer exists; read the list again`);
  return task;
}

aotui.operation("add_task", ({ title }) => {
  title = title.split(/\s+/).filter(Boolean).join(" ");
  if (!title) throw new Error("a task needs a title");
  const task = { id: `task_${state.nextId}`, title, done: false };
  state.nextId += 1;
  state.tasks.push(task);
  show();
  return task;
});

aotui.operation("complete", ({ task }) => {
  const found = find(task);
  found.done = true;
  show();
  return found;
});

aotui.operation("reopen", ({ task }) => {
  const found = find(task);
  found.done = false;
  show();
  return found;
});

aotui.operation("delete_task", ({ task }) => {
  const found = find(task);
  state.tasks = state.tasks.filter((t) => t !== found);
  show();
  return found;
});

aotui.serialize = () => state;
aotui.restore = (saved) => {
  state = saved;
  show();
};

show();
