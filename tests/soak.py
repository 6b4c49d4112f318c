"""The soak driver: a scripted agent on several apps while workers are killed at random.

Used by ``tests/test_soak.py`` (2 minutes by default, ``--soak-seconds`` for longer) and by
``bench/bench_store.py`` (which prints the resource figures). It checks, as it goes:

- no lost acknowledgement: every ``bump`` acknowledged with count *n* is followed by an
  acknowledged count of exactly *n + 1* (a worker killed mid-operation loses only that
  unacknowledged operation, never an acknowledged one);
- every command is answered (an error reply is an answer; the client giving up is not);
- supervisor RSS and open descriptors, sampled after warm-up and at the end.
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field

import psutil

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.interface.client import Client

#: The apps a soak desktop runs (test apps and bundled ones).
SOAK_APPS = ["system/chat", "echo", "crashy", "lister"]
#: Settings that let a worker be killed every second for an hour without being marked failed.
SOAK_SETTINGS = {"max_restarts": 1_000_000, "restart_backoff_s": 0.01}


@dataclass
class SoakReport:
    """What a soak run saw."""

    commands: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    kills: int = 0
    rss: dict[str, int] = field(default_factory=dict)
    fds: dict[str, int] = field(default_factory=dict)


def _sample(report: SoakReport, label: str, pid: int) -> None:
    process = psutil.Process(pid)
    report.rss[label] = process.memory_info().rss
    report.fds[label] = process.num_fds()


def run_soak(client: Client, supervisor_pid: int, seconds: float, seed: int = 1) -> SoakReport:
    """Drive the desktop for ``seconds``; returns what happened."""
    rng = random.Random(seed)
    report = SoakReport()
    client.execute(
        "<context>open --application app_1; open --application app_2; "
        "open --application app_3</context>"
    )
    acked = {"app_1": _current(client, "app_1"), "app_2": _current(client, "app_2")}
    stop = threading.Event()

    # The killer has its own connection: a client is not thread-safe.
    killer_client = Client(client.paths.root.name, str(client.paths.root.parent), timeout_s=10)

    def killer() -> None:
        while not stop.wait(rng.uniform(0.5, 2.0)):
            try:
                rows = killer_client.status()["apps"]
            except AotuiError:
                continue
            for row in rows:
                if row["app"] in ("app_1", "app_2", "app_3") and row["pid"] and rng.random() < 0.5:
                    try:
                        os.kill(row["pid"], signal.SIGKILL)
                        report.kills += 1
                    except ProcessLookupError:
                        pass

    thread = threading.Thread(target=killer, daemon=True)
    started = time.monotonic()
    warm_at = started + min(30.0, seconds / 4)
    warmed = False
    thread.start()
    try:
        while time.monotonic() - started < seconds:
            if not warmed and time.monotonic() >= warm_at:
                _sample(report, "warm", supervisor_pid)
                warmed = True
            _step(client, rng, report, acked)
        _sample(report, "end", supervisor_pid)
    finally:
        stop.set()
        thread.join(timeout=10)
        killer_client.close()
    return report


def _current(client: Client, app: str) -> int:
    text = client.snapshot()
    block = text[text.index(f'<application id="{app}"') :]
    match = re.search(r"(?:Calls|Count): (\d+)", block)
    return int(match.group(1)) if match else 0


def _step(client: Client, rng: random.Random, report: SoakReport, acked: dict[str, int]) -> None:
    choice = rng.random()
    if choice < 0.55:
        app = rng.choice(["app_1", "app_2"])
        command = f'<context app_id="{app}" view_id="view_0">execute bump</context>'
    elif choice < 0.65:
        command = '<context app_id="app_3" view_id="view_0">execute pick --item items[3]</context>'
    elif choice < 0.75:
        command = (
            "<context>open --application app_1; open --application app_2; "
            "open --application app_3</context>"
        )
    elif choice < 0.85:
        command = '<context app_id="app_0">mount --view view_1</context>'
    else:
        command = ""
    report.commands += 1
    try:
        if command:
            result = client.execute(command)
            if "execute bump" in command:
                app = command.split('"')[1]
                count = result["results"][0]
                if count != acked[app] + 1:
                    report.lost.append(f"{app}: acknowledged {acked[app]}, then {count}")
                acked[app] = count
        else:
            client.snapshot()
            if rng.random() < 0.2:
                client.say(f"user message {report.commands}")
    except AotuiError as exc:
        if (
            exc.code is ErrorCode.E_TIMEOUT
            and "did not answer" in exc.message
            and "the desktop" in exc.message
        ):
            report.unanswered.append(command)
        report.errors[exc.code.value] = report.errors.get(exc.code.value, 0) + 1
