"""Whether a process lives, from its pid: the runtime's watchdog (peers on this machine), the
schedule proofs' claims (a claimant that died) and blinkrun's reclaiming of dead jobs' leftovers
ask it. A zombie counts as gone: it ran its last instruction and only waits to be reaped."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    return process_state(pid) not in ("gone", "Z", "X")


def process_state(pid: int) -> str:
    """'gone', or the state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z' zombie,
    ...), or '?' where /proc does not say (macOS: the process exists) or the process is
    another user's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "?"
    try:
        with open(f"/proc/{pid}/stat") as f:
            # state is the field after the parenthesised command name
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "?"
