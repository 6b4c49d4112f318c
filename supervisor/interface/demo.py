"""``aotui demo``: a scripted agent session on the bundled apps, printed as a transcript.

It starts a private desktop (its own runtime directory, so it never touches a desktop you run),
then acts like an agent would: it reads each snapshot, finds the ids it needs in the text, and
writes ``<context>`` commands. Every process it starts is stopped before it returns.

A new desktop's chat holds only the (empty) conversation with the user: the demo's conversations
are demo data, so the demo brings them itself, through the way any state reaches a desktop — it
exports the chat's state, adds :data:`DEMO_CONVERSATIONS` and :data:`DEMO_CONTACTS` to it and
imports it back (as ``aotui export`` / ``aotui import`` would), before the agent's first snapshot.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.interface.client import Client, DesktopUnavailable
from aotui.supervisor.interface.launch import DesktopLaunch, launch_desktop

__all__ = ["DEMO_CONTACTS", "DEMO_CONVERSATIONS", "import_demo_chat", "run_demo", "with_demo_chat"]

_RULE = "─" * 78
#: The bundled chat's manifest id.
CHAT = "system.chat"
_DEMO_TIME = "2025-12-14 16:09:46"
#: The chat's conversations the demo adds: id → (the conversation, its messages as (sender, text)).
DEMO_CONVERSATIONS: dict[str, tuple[dict[str, str], tuple[tuple[str, str], ...]]] = {
    "johnny": (
        {"title": "Johnny", "type": "Private Chat", "email": "johnny@example.com"},
        (("Johnny", "Hello"),),
    ),
    "tui": (
        {
            "title": "TUI Tech Group",
            "type": "Group Chat",
            "description": "Tech support group for TUI project.",
        },
        (("John", "Hello"), ("Jane", "Who own this project?")),
    ),
}
#: The chat's contacts the demo adds.
DEMO_CONTACTS = (
    {"id": "johnny", "name": "Johnny", "email": "johnny@example.com"},
    {"id": "jane", "name": "Jane", "email": "jane@example.com"},
)


def with_demo_chat(data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The chat's stored data with the demo's conversations (unread) and contacts added.

    ``None``: a chat that has stored nothing yet (the chat keeps its conversation with the user).
    """
    added = dict(data or {})
    next_id = int(added.get("next_id", 1))
    for conv_id, (conversation, messages) in DEMO_CONVERSATIONS.items():
        added[f"conv:{conv_id}"] = {**conversation, "unread": len(messages)}
        for sender, text in messages:
            message_id = f"msg_{next_id}"
            added[f"msg:{message_id}"] = {
                "conv": conv_id, "id": message_id, "sender": sender, "time": _DEMO_TIME,
                "text": text,
            }  # fmt: skip
            next_id += 1
    added["next_id"] = next_id
    added["contacts"] = [*(added.get("contacts") or ()), *DEMO_CONTACTS]
    return added


def import_demo_chat(client: Client) -> bool:
    """Give the desktop's chat the demo's conversations by export and import; False: it had them."""
    state = client.export_state()
    chat = next((app for app in state["apps"] if app["manifest_id"] == CHAT), None)
    if chat is None:
        raise AotuiError(ErrorCode.E_NOT_FOUND, f"the desktop has no chat ({CHAT}) to fill")
    if all(f"conv:{conv_id}" in (chat["data"] or {}) for conv_id in DEMO_CONVERSATIONS):
        return False  # a run before this one on the same desktop brought them
    client.import_state({**state, "apps": [{**chat, "data": with_demo_chat(chat["data"])}]})
    return True


def _find(markdown: str, label: str, kind: str) -> str:
    """The id of ``[label](kind:ID…)`` in a snapshot, as an agent would read it."""
    match = re.search(rf"\[{re.escape(label)}\]\({kind}:([A-Za-z0-9_.]+)", markdown)
    if match is None:
        raise AotuiError(ErrorCode.E_NOT_FOUND, f"the snapshot shows no [{label}]({kind}:…)")
    return match.group(1)


def _app_block(markdown: str, app_id: str) -> str:
    start = markdown.find(f'<application id="{app_id}"')
    end = markdown.find("</application>", start)
    return markdown[start : end + len("</application>")] if start >= 0 else ""


class Transcript:
    """Prints the session: snapshots, the agent's messages, the desktop's replies."""

    def __init__(self, client: Client, json_output: bool) -> None:
        self.client = client
        self.json_output = json_output
        self.events: list[dict[str, Any]] = []

    def show(self, title: str, text: str) -> None:
        self.events.append({"kind": title, "text": text})
        if not self.json_output:
            print(f"\n{_RULE}\n{title}\n{_RULE}\n{text.rstrip()}")

    def snapshot(self, focus: str | None = None) -> str:
        markdown = self.client.snapshot()
        shown = _app_block(markdown, focus) if focus else markdown
        label = f"snapshot {self.client.snapshot_id}" + (f" (showing {focus})" if focus else "")
        self.show(label, shown)
        return markdown

    def agent(self, message: str) -> Any:
        self.show("agent", message)
        result = self.client.execute(message)
        self.show("desktop", json.dumps(result, ensure_ascii=False))
        return result


def _script(t: Transcript) -> None:
    if import_demo_chat(t.client):
        conversations = ", ".join(c[0]["title"] for c in DEMO_CONVERSATIONS.values())
        t.show("demo data (aotui import)", f"the chat is given the conversations {conversations}")
    markdown = t.snapshot()
    chat = _find(markdown, "ChatWithUser", "application")
    thoughts = _find(markdown, "ThoughtRecorder", "application")
    notes = _find(markdown, "Notes", "application")

    t.show("user (aotui say)", "Can you answer the question in the TUI Tech Group?")
    t.client.say("Can you answer the question in the TUI Tech Group?")

    block = _app_block(markdown, chat)
    conversations = _find(block, "Conversations", "view")
    t.agent(f'<context app_id="{chat}">mount --view {conversations}</context>')
    block = _app_block(t.snapshot(chat), chat)

    johnny = _find(block, "Johnny", "view")
    group = _find(block, "TUI Tech Group", "view")
    both = f"    mount --view {johnny};\n    mount --view {group};"
    t.agent(f'<context app_id="{chat}">\n{both}\n</context>')
    t.snapshot(chat)

    t.agent(
        "I lead the TUI project, so I answer Jane and note why.\n"
        f'<context app_id="{chat}" view_id="{group}">\n'
        '    execute reply_message --message_to_be_replied message_history[1] --content "Me."\n'
        "</context>\n"
        f'<context app_id="{thoughts}" view_id="view_0">'
        'execute record_thought --text "Answered Jane in the TUI group." --tag chat</context>'
    )
    t.snapshot(chat)

    t.agent(f"<context>open --application {notes}</context>")
    t.agent(
        f'<context app_id="{notes}" view_id="view_0">'
        'execute add_note --title "TUI" --text "I own the TUI project."</context>'
    )
    t.agent(f"<context>collapse --application {chat}</context>")
    _web_app(t)
    t.snapshot()

    t.show("a mistake the agent can recover from", "mount without app_id")
    try:
        t.client.execute("<context>mount --view view_3</context>")
    except AotuiError as exc:
        t.show("desktop (error)", f"{exc.code.value} (exit {exc.code.exit_code}): {exc.message}")


def _web_app(t: Transcript) -> None:
    """Tasks, the bundled web app: a page in a headless browser, driven like any app."""
    from aotui.sandbox.browser import INSTALL_HINT, find_browser  # only the demo needs it

    if find_browser() is None:
        t.show("Tasks (a web app) skipped", f"no headless browser here; install: {INSTALL_HINT}")
        return
    tasks = _find(t.client.snapshot(), "Tasks", "application")
    t.agent(f"<context>open --application {tasks}</context>")
    t.agent(
        f'<context app_id="{tasks}" view_id="view_0">\n'
        '    execute add_task --title "Answer Jane";\n'
        '    execute add_task --title "Review the TUI notes";\n'
        "</context>"
    )
    t.snapshot(tasks)
    t.agent(
        f'<context app_id="{tasks}" view_id="view_0">execute complete --task tasks[0]</context>'
    )
    t.snapshot(tasks)


def _start_failures(client: Client) -> list[str]:
    """What System Logs say about apps that could not be opened (why a demo step failed)."""
    try:
        markdown = client.snapshot()
    except AotuiError:
        return []
    # Only the System Logs view: an app's own text cannot pose as a start failure.
    logs = re.search(r'<view id="view_\d+" name="System Logs">\n(.*?)\n</view>', markdown, re.S)
    lines = logs.group(1).splitlines() if logs else []
    # The desktop's own lines carry its source marker (System Logs: "desktop: …").
    marks = ("] Could not open ", "] desktop: Could not open ")
    return [line.removeprefix("- ") for line in lines if any(m in line for m in marks)]


def _report_start_failures(failures: list[str], then: str) -> int:
    print("aotui demo: an app the demo uses could not start:", file=sys.stderr)
    for line in failures:
        print(f"  {line}", file=sys.stderr)
    print(f"({then}; `aotui doctor` checks what this machine can run)", file=sys.stderr)
    return ErrorCode.E_APP_ERROR.exit_code


def run_demo(json_output: bool = False, script: Callable[[Transcript], None] = _script) -> int:
    """Start a private desktop, run the script against it, stop it; returns the exit code."""
    with tempfile.TemporaryDirectory(prefix="aotui-demo-") as runtime:
        # The default apps and Tasks, the bundled web app.
        config = Path(runtime) / "demo.toml"
        apps = [*DesktopConfig().apps, "tasks"]
        config.write_text(f"apps = {json.dumps(apps)}\n")
        # A private store too: the demo never touches your desktops.
        launch = DesktopLaunch(
            "demo",
            config=config,
            socket=Path(runtime),
            env={**os.environ, "AOTUI_HOME": str(Path(runtime) / "home")},
        )
        try:
            supervisor = launch_desktop(launch)
        except DesktopUnavailable as exc:
            print(f"aotui demo: {exc.message}", file=sys.stderr)
            return exc.code.exit_code
        client = supervisor.client(timeout_s=20)
        try:
            apps = client.status()["apps"]
            down = [app for app in apps if app["system"] and app["state"] != "running"]
            failures = _start_failures(client) if down else []
            if failures:  # the script would stop at its first step on that app, saying less
                return _report_start_failures(failures, "so the demo did not run")
            transcript = Transcript(client, json_output)
            script(transcript)
            if json_output:
                print(json.dumps(transcript.events, ensure_ascii=False, indent=2))
            else:
                print(f"\n{_RULE}\ndemo finished: every command was answered.")
            return 0
        except AotuiError as exc:
            failures = _start_failures(client)
            if failures:
                return _report_start_failures(failures, f"the demo stopped at: {exc}")
            print(f"aotui demo: {exc}", file=sys.stderr)
            return exc.code.exit_code
        finally:
            client.close()
            supervisor.stop()
