"""The human-readable tables the CLI prints: ``aotui status`` and ``aotui doctor``."""

from __future__ import annotations

from typing import Any

__all__ = ["format_doctor", "format_status"]


def format_doctor(report: dict[str, Any]) -> str:
    """The doctor's table: every layer for this user and for an unprivileged one."""
    lines = [
        f"kernel {report['kernel']} ({report['machine']}), Python {report['python']}, "
        f"Landlock ABI {report['landlock_abi']}, running as euid {report['euid']}",
    ]
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
    return "\n".join(lines)


def format_status(status: dict[str, Any]) -> str:
    """The status table."""
    header = ("APP", "ID", "STATE", "PID", "RSS", "CPU%", "RESTARTS", "LAST EXIT")
    rows = [header]
    for app in status["apps"]:
        rss = app["rss_bytes"]
        rows.append(
            (
                app["app"],
                app["id"],
                app["state"],
                str(app["pid"] or "-"),
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
    return "\n".join(lines)
