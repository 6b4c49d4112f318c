"""The soak driver: a scripted agent on several apps while workers are killed at random.

Used by ``tests/test_soak.py`` (2 minutes by default, ``--soak-seconds`` for longer) and by
``bench/bench_store.py`` (which prints the resource figures). It checks, as it goes:

- no lost acknowledgement: every ``bump`` acknowledged with count *n* is followed by an
  acknowledged count of exactly *n + 1* (a worker killed mid-operation loses only that
  unacknowledged operation, never an acknowledged one);
- every command is answered (an error reply is an answer; the client giving up is not);
- supervisor RSS and open descriptors, sampled every 30 s (``samples``), after warm-up
  (:data:`WARM_UP_S`, or a quarter of a shorter run) and at the end, and the change between them
  (:meth:`SoakReport.growth`);
- every error's message: the first few of each code, and every ``E_INTERNAL`` (our bug).
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
#: How many messages of each error code a report keeps (every E_INTERNAL is kept).
MESSAGES_PER_CODE = 5
#: Seconds between RSS/descriptor samples.
SAMPLE_EVERY_S = 30.0
#: When the supervisor has its working set. The executor starts its threads as the store's
#: writes first overlap (a new one 150 s into a 12-minute soak), and each thread's stack and
#: allocations join the RSS then: 30 s was before that, and made the fill look like a leak.
WARM_UP_S = 300.0
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
    #: What the errors said, per code: the first few, and every E_INTERNAL.
    messages: dict[str, list[str]] = field(default_factory=dict)
    #: (seconds since start, RSS bytes, open descriptors), every SAMPLE_EVERY_S.
    samples: list[tuple[float, int, int]] = field(default_factory=list)

    def note_error(self, exc: AotuiError, command: str) -> None:
        """Count an error reply and keep its message if it is one worth reading."""
        code = exc.code.value
        self.errors[code] = self.errors.get(code, 0) + 1
        kept = self.messages.setdefault(code, [])
        if exc.code is ErrorCode.E_INTERNAL or len(kept) < MESSAGES_PER_CODE:
            kept.append(f"{command or 'snapshot/say'}: {exc.message}")

    def rss_table(self) -> str:
        """The RSS and descriptor samples as lines ``t=…s rss=… MB fds=…``."""
        return "\n".join(
            f"t={at:6.0f}s rss={rss / 2**20:6.1f} MB fds={fds}" for at, rss, fds in self.samples
        )

    def growth(self, label: str = "end") -> float:
        """How much the supervisor's RSS at ``label`` exceeds its RSS after warm-up, in %."""
        return (self.rss[label] / self.rss["warm"] - 1) * 100


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
    warm_at = started + min(WARM_UP_S, seconds / 4)
    warmed = False
    next_sample = started
    thread.start()
    try:
        while (now := time.monotonic()) - started < seconds:
            if now >= next_sample:
                _sample(report, "last", supervisor_pid)
                report.samples.append((now - started, report.rss["last"], report.fds["last"]))
                next_sample += SAMPLE_EVERY_S
            if not warmed and now >= warm_at:
                _sample(report, "warm", supervisor_pid)
                warmed = True
            _step(client, rng, report, acked)
        _sample(report, "end", supervisor_pid)
        report.samples.append((time.monotonic() - started, report.rss["end"], report.fds["end"]))
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
        report.note_error(exc, command)
