"""The System Instructions view: what a desktop is and every command, with one example each."""

from __future__ import annotations

__all__ = ["SYSTEM_INSTRUCTIONS"]

SYSTEM_INSTRUCTIONS = """\
# System Instructions
This is your text desktop. Installed applications are listed under Applications; an open
application shows its views inside an <application> block. You act by writing commands inside a
<context> block. Several commands in one block run in order, separated by `;` or new lines; the
first failure stops the rest and the reply says which ran.

## Applications
- Open an application: <context>open --application app_1</context>
- Close it (system apps cannot be closed): <context>close --application app_1</context>
- Collapse it (keeps running, hides its block): <context>collapse --application app_1</context>
- Show a collapsed application again: <context>show --application app_1</context>

## Views (need app_id)
- Mount a child view listed as [Name](view:view_3):
  <context app_id="app_0">mount --view view_3</context>
- Dismount it (and the views mounted under it):
  <context app_id="app_0">dismount --view view_3</context>
- Hide a mounted view from the snapshot: <context app_id="app_0">hide --view view_3</context>
- Show a hidden view again: <context app_id="app_0">show --view view_3</context>

## Operations (need app_id and view_id)
- Run an operation listed as [Send Message](operation:send_message):
  <context app_id="app_0" view_id="view_3">execute send_message --content "Hello"</context>
- Arguments are `--name value`, `--name "with spaces"` or `--flag` (true). An argument whose type is
  a list item type (e.g. `message`) takes a reference such as `message_history[0]` — the item as
  you saw it in this snapshot, even if it has moved since.

## System Logs
- `desktop:` lines are the desktop's own; `app_1 says:` lines are app_1's words.
"""
