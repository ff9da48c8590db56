"""The one-line messages a rank's wrapper sends ``blinkrun`` through mpirun's own output stream.

Every MPI forwards each rank's stderr to mpirun, across hosts, so a wrapper that prints
``@@blinkrun@@ {json}`` on its stderr reaches blinkrun without files on a shared disk or a socket.
blinkrun takes these lines out of the output the user sees.
"""
from __future__ import annotations

import json
from typing import Optional, Tuple

MARK = "@@blinkrun@@ "
MAX_LINE = 3500           # stay below PIPE_BUF (4096) so the line is written atomically
STARTED = "started"
FAILED = "failed"


def encode(event: dict) -> str:
    """One line (with its newline); a long ``tail`` loses its oldest lines to fit."""
    event = dict(event)
    while True:
        line = MARK + json.dumps(event, separators=(",", ":"), ensure_ascii=True) + "\n"
        tail = event.get("tail") or []
        if len(line) <= MAX_LINE or not tail:
            return line if len(line) <= MAX_LINE else line[:MAX_LINE - 1] + "\n"
        event["tail"] = tail[1:] if len(tail) > 1 else [tail[0][-500:]] if len(tail[0]) > 500 else []


def split(line: str) -> Tuple[str, Optional[dict]]:
    """``(ordinary text, event)`` of one line of mpirun's stderr.

    An MPI may print its own text without a final newline just before a rank's event, so the
    event can start mid-line; the text before it is ordinary output.
    """
    at = line.find(MARK)
    if at < 0:
        return line, None
    try:
        event = json.loads(line[at + len(MARK):])
    except ValueError:
        return line, None
    if not isinstance(event, dict):
        return line, None
    before = line[:at]
    return (before + "\n" if before.strip() else ""), event
