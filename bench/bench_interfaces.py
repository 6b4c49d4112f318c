"""Round trips through the agent-facing faces: JSON-RPC on ``rpc.sock`` and ``aotui mcp``.

One desktop runs the ``echo`` app (its ``noop`` answers at once). Measured:

- JSON-RPC through a raw Unix socket (newline-delimited JSON, as ``socat`` speaks it): ``ping``,
  ``snapshot`` (Markdown, and ``format: json``), a no-op ``exec``;
- MCP tool calls through the official SDK's client against a real ``aotui mcp`` subprocess
  (stdio): ``snapshot`` and a no-op ``run_commands``;
- the ``aotui`` command as a shell agent runs it, a whole process a call: ``snapshot``, a no-op
  ``exec``, ``status``, ``ping`` and ``--help``, each paired run by run with a bare
  ``python -c pass`` (issue 13's goal: a median at most 60 ms wall, and at most 60 ms over the
  bare interpreter's, which a loaded machine slows as much as it slows us; issue 21's: a median
  at most 1.5 times the bare interpreter's, the ``ratio`` column). The children keep
  their bytecode in a temporary cache, as an installed package has it compiled, whatever
  PYTHONDONTWRITEBYTECODE says.

Goals from seed 002: RPC p95 < 100 ms and snapshot export < 10 ms; the issue asks to beat them by
an order of magnitude, so the ``×10`` column checks p95 < 10 ms and < 1 ms.

Run: ``python -m bench.bench_interfaces`` (``--cli``: only the command line).
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aotui.supervisor.paths import unix_address  # noqa: E402
from bench.bench_desktop import TEST_APPS, Desktop, _pct  # noqa: E402

NOOP = '<context app_id="app_0" view_id="view_0">execute noop</context>'
ROUNDS = 300
MCP_ROUNDS = 200
#: (name, goal in ms for p95) per seed 002.
RPC_GOAL_MS = 100.0
EXPORT_GOAL_MS = 10.0
#: Issue 13: an ``aotui`` call's median wall time at most this (and, read against the same run's
#: ``python -c pass``, at most this much over it).
CLI_GOAL_MS = 60.0
#: Issue 21: an ``aotui`` call's median wall time at most this many times ``python -c pass``'s.
CLI_RATIO_GOAL = 1.5
CLI_ROUNDS = 21


class RawRpc:
    """A JSON-RPC peer on a plain socket."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(unix_address(path))
        self.file = self.sock.makefile("rb")
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> Any:
        request = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        self.sock.sendall(json.dumps(request).encode() + b"\n")
        answer = json.loads(self.file.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer["result"]

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def _time(work: Callable[[], Any], rounds: int) -> list[float]:
    for _ in range(10):
        work()  # warm up
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _mcp_samples(desktop: Desktop) -> dict[str, list[float]]:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    where = ["--socket", str(desktop.tmp / "run")]
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "aotui.supervisor", "mcp", "--desktop", "bench", *where],
        env={**os.environ, "AOTUI_HOME": str(desktop.tmp / "home")},
    )
    samples: dict[str, list[float]] = {}

    async def main() -> None:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for name, arguments in (("snapshot", {}), ("run_commands", {"text": NOOP})):
                for _ in range(10):
                    await session.call_tool(name, arguments)
                times = []
                for _ in range(MCP_ROUNDS):
                    started = time.perf_counter()
                    result = await session.call_tool(name, arguments)
                    times.append((time.perf_counter() - started) * 1000)
                    assert not result.isError, result
                samples[f"mcp {name}"] = times

    anyio.run(main)
    return samples


def _cli_command() -> list[str]:
    """The ``aotui`` script beside this interpreter, as installed; else ``python -m``."""
    script = Path(sys.executable).parent / "aotui"
    return [str(script)] if script.exists() else [sys.executable, "-m", "aotui.supervisor"]


def _run_ms(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one run of ``command``."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    wall = (time.perf_counter() - started) * 1000
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime) * 1000
    return wall, cpu


def _cli_figures(desktop: Desktop) -> dict[str, float]:
    """Each command against the bare interpreter, in turn (A B A B ...), and the table."""
    cache = Path(tempfile.mkdtemp(prefix="aotui-bench-pyc-"))
    env = {
        **os.environ,
        "AOTUI_HOME": str(desktop.tmp / "home"),
        "AOTUI_SESSION": "bench",
        "PYTHONPYCACHEPREFIX": str(cache),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    where = ["--desktop", "bench", "--socket", str(desktop.tmp / "run")]
    aotui = _cli_command()
    bare = [sys.executable, "-c", "pass"]
    commands = {
        "snapshot": [*aotui, "snapshot", *where],
        "exec (no-op)": [*aotui, "exec", NOOP, *where],
        "status": [*aotui, "status", *where],
        "ping": [*aotui, "ping", *where],
        "--help": [*aotui, "--help"],
    }
    figures: dict[str, float] = {}
    # CPU time is printed too: on a loaded machine it moves less than the wall time.
    header = (
        f"{'aotui command':<20}{'ours ms':>9}{'bare ms':>9}{'+ms':>8}{'ratio':>7}{'+cpu ms':>9}"
    )
    print(f"{header}  goal")
    try:
        for name, command in commands.items():
            for _ in range(3):  # warm up, and fill the bytecode cache
                _run_ms(command, env)
                _run_ms(bare, env)
            ours, theirs = [], []
            for _ in range(CLI_ROUNDS):
                ours.append(_run_ms(command, env))
                theirs.append(_run_ms(bare, env))
            mine, base = (statistics.median(wall for wall, _ in runs) for runs in (ours, theirs))
            cpu = statistics.median(c for _, c in ours) - statistics.median(c for _, c in theirs)
            wall = "ok" if mine <= CLI_GOAL_MS else "MISSED"
            over = "ok" if mine - base <= CLI_GOAL_MS else "MISSED"
            ratio = "ok" if mine <= CLI_RATIO_GOAL * base else "MISSED"
            print(
                f"{name:<20}{mine:>9.1f}{base:>9.1f}{mine - base:>8.1f}{mine / base:>7.2f}"
                f"{cpu:>9.1f}  <= {CLI_GOAL_MS:g} ms wall {wall}, +{CLI_GOAL_MS:g} ms {over}, "
                f"ratio <= {CLI_RATIO_GOAL:g} {ratio}"
            )
            figures[f"cli {name} median ms"] = mine
            figures[f"cli {name} ratio to bare"] = mine / base
            figures[f"cli {name} over bare ms"] = mine - base
            figures[f"cli {name} cpu over bare ms"] = cpu
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return figures


def run_cli() -> dict[str, float]:
    """Only the command line's table."""
    desktop = Desktop([TEST_APPS / "echo"])
    try:
        desktop.client.execute("<context>open --application app_0</context>")
        return _cli_figures(desktop)
    finally:
        desktop.close()


def run() -> dict[str, float]:
    """Measure and print the tables; returns the figures."""
    desktop = Desktop([TEST_APPS / "echo"])
    try:
        desktop.client.execute("<context>open --application app_0</context>")
        cli = _cli_figures(desktop)
        rpc = RawRpc(desktop.tmp / "run" / "bench" / "rpc.sock")
        try:
            samples = {
                "rpc ping": _time(lambda: rpc.call("ping"), ROUNDS),
                "rpc snapshot (markdown)": _time(lambda: rpc.call("snapshot"), ROUNDS),
                "rpc snapshot (json)": _time(lambda: rpc.call("snapshot", format="json"), ROUNDS),
                "rpc exec (no-op)": _time(lambda: rpc.call("exec", text=NOOP), ROUNDS),
            }
        finally:
            rpc.close()
        samples.update(_mcp_samples(desktop))
    finally:
        desktop.close()
    figures: dict[str, float] = {}
    print(f"{'round trip':<26}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}  goal (seed 002)   ×10")
    for name, times in samples.items():
        p50, p95, p99 = (_pct(times, q) for q in (0.5, 0.95, 0.99))
        goal = EXPORT_GOAL_MS if "snapshot" in name else RPC_GOAL_MS
        verdict = "ok" if p95 < goal else "MISSED"
        tenfold = "ok" if p95 < goal / 10 else "missed"
        label = f"p95 < {goal:g} ms {verdict}"
        print(f"{name:<26}{p50:>9.2f}{p95:>9.2f}{p99:>9.2f}  {label:<17} {tenfold}")
        figures[f"{name} p50 ms"] = p50
        figures[f"{name} p99 ms"] = p99
    return {**figures, **cli}


if __name__ == "__main__":
    if "--cli" in sys.argv:
        run_cli()
    else:
        run()
