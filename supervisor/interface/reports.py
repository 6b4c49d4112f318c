"""The human-readable tables the CLI prints: ``aotui status``, ``doctor`` and ``desktops``."""

from __future__ import annotations

import time
from pathlib import Path

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["format_desktops", "format_doctor", "format_status"]


def format_desktops(folder: Path, rows: list[dict[str, Any]]) -> str:
    """The stored desktops: damage, an I/O failure and "held by pid N" each said apart."""
    lines = [f"desktops in {folder}:"] if rows else [f"no desktops in {folder} yet"]
    for row in rows:
        when = [
            time.strftime("%Y-%m-%d %H:%M", time.localtime(row[k])) if row[k] else "?"
            for k in ("created", "last_used")
        ]
        if row.get("running_pid"):
            state = f"running (pid {row['running_pid']})"
        elif row.get("held_by"):
            state = f"held by pid {row['held_by']} (not answering)"
        else:
            state = "stopped"
        health = {
            "damaged": f"  DAMAGED: {row['problem']} (see --repair)",
            "io error": f"  I/O ERROR: {row['problem']} (the file may be intact: fix the disk; "
            "nothing to repair)",
        }.get(row["health"], "")
        if row.get("quarantined"):
            health += f"  {row['quarantined']} app row(s) quarantined (damaged, kept)"
        if row.get("wal_damage"):
            health += f"  WAL DAMAGE: {row['wal_damage']}"
        for kept in row.get("damaged_wals", []):
            health += f"  damaged WAL kept: {kept}"
        apps = "?" if row["apps"] is None else row["apps"]
        lines.append(
            f"  {row['desktop']:<16} created {when[0]}  last used {when[1]}  "
            f"{row['size_bytes'] / 1024:.0f} KB  {apps} apps  {state}{health}"
        )
    return "\n".join(lines)


def format_doctor(report: dict[str, Any]) -> str:
    """The doctor's table: every layer for this user and for an unprivileged one."""
    lines = [
        f"kernel {report['kernel']} ({report['machine']}), Python {report['python']}, "
        f"Landlock ABI {report['landlock_abi']}, running as euid {report['euid']}",
    ]
    interpreter = report.get("interpreter")
    if interpreter:
        lines.append(
            f"interpreter {interpreter['path']} ({interpreter['implementation']} "
            f"{interpreter['version']})"
        )
    for title, key in (("this user", "this_user"), ("an unprivileged user", "unprivileged_user")):
        section = report.get(key)
        if not section:
            continue
        lines += ["", f"Layers for {title} ({section['mode']}):"]
        for layer, info in section["layers"].items():
            mark = "yes" if info["available"] else "NO "
            cost = section.get("cost_ms", {}).get(layer)
            extra = f"  {cost:.2f} ms" if isinstance(cost, int | float) else ""
            lines.append(f"  {mark} {layer:<16}{extra}  {info['reason']}".rstrip())
        ready = (
            "yes"
            if section.get("strict_ready")
            else ("NO (missing: " + ", ".join(section.get("missing_for_strict", [])) + ")")
        )
        lines.append(f"  strict mode can run apps: {ready}")
        if section.get("warning"):
            lines.append(f"  warning: {section['warning']}")
    web = report.get("browser")
    if web:
        lines.append("")
        if web.get("installed"):
            lines.append(f"browser for web apps: {web['version']} ({web['path']})")
            confined = web.get("confined") or {}
            if "start_ms" in confined:
                own = "on" if confined["chromium_sandbox"] else f"off: {confined['reason']}"
                lines.append(
                    f"  starts inside a worker's sandbox in {confined['start_ms']:.0f} ms"
                    f" (Chromium's own sandbox {own})"
                )
            elif confined:
                lines.append(f"  does NOT start inside a worker's sandbox: {confined['error']}")
        else:
            lines.append(f"browser for web apps: none installed (install it: {web['install']})")
    return "\n".join(lines)


def format_status(status: dict[str, Any]) -> str:
    """The status table."""
    # RSS and CPU% are the app's whole process group, PROCS its size.
    header = ("APP", "ID", "STATE", "PID", "PROCS", "RSS", "CPU%", "RESTARTS", "LAST EXIT")
    rows = [header]
    for app in status["apps"]:
        rss = app["rss_bytes"]
        rows.append(
            (
                app["app"],
                app["id"],
                app["state"],
                str(app["pid"] or "-"),
                str(app.get("processes") or "-"),
                f"{rss / 1048576:.1f}M" if rss else "-",
                f"{app['cpu_percent']:.0f}" if app["cpu_percent"] is not None else "-",
                str(app["restarts"]),
                app["last_exit"] or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        f"desktop {status['desktop']}  supervisor pid {status['pid']}  "
        f"rss {status['rss_bytes'] / 1048576:.1f}M  fds {status['open_fds']}  "
        f"uptime {status['uptime_s']:.0f}s  input lease: {status['lease_owner'] or 'free'}",
        "",
    ]
    lines += [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    layers = sorted({layer for app in status["apps"] for layer in app.get("layers", [])})
    lines += ["", f"worker confinement layers: {', '.join(layers) or '(no worker running)'}"]
    for app in status["apps"]:
        if app.get("web") and app["pid"]:
            own = "chromium-sandbox" in app.get("layers", [])
            lines.append(
                f"{app['app']} is a web app: Chromium's own sandbox "
                + ("on, inside the worker's" if own else "off (--no-sandbox inside the worker's)")
            )
    return "\n".join(lines)
