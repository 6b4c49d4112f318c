"""Which confinement layers strict mode insists on, importable without the layers themselves.

The supervisor names a worker's missing layers in System Logs as each app opens; importing
:mod:`sandbox.confine` for that would load Landlock, seccomp, namespaces and the rest (~10 ms of
every supervisor start) into a process that never confines itself.
"""

from __future__ import annotations

__all__ = ["required_layers"]


def required_layers(root: bool) -> frozenset[str]:
    """The layers strict mode insists on, as root or as an unprivileged user."""
    common = {"minimal-env", "no-core-dumps", "rlimits", "netns", "ipcns", "mntns", "no-new-privs"}
    common |= {"landlock", "seccomp"}
    if root:
        return frozenset(common | {"uid-drop", "cgroup"})
    # Without a uid of its own, only the Landlock scope stops signals to same-uid processes.
    return frozenset(common | {"userns", "landlock-scope"})
