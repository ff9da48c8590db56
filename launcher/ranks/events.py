"""The one-line messages a rank's wrapper sends ``blinkrun`` through mpirun's own output stream.

Every MPI forwards each rank's stderr to mpirun, across hosts, so a wrapper that prints
``@@blinkrun@@ {json}`` on its stderr reaches blinkrun without files on a shared disk or a socket.
blinkrun takes these lines out of the output the user sees.
"""
from __future__ import annotations

import json
import math
from typing import Optional, Tuple

MARK = "@@blinkrun@@ "
MAX_LINE = 3500           # stay below PIPE_BUF (4096) so the line is written atomically
STARTED = "started"
FAILED = "failed"
EXITED = "exited"
"""The rank's process ended: its ``status``, and ``declared_dead`` when Open MPI aborted it as a
rank its failure detector had declared dead (the loss's cause is then the missing heartbeat)."""
MPI_STARTING = "mpi"
"""The rank's process begins MPI's initialisation (it imports ``mpi4py.MPI``)."""
LOST = "lost"
"""An elastic job's survivors went on without ``ranks`` (blinkrun's rank numbers): sent by the
rank itself, not its wrapper, since a lost host takes the lost ranks' wrappers with it."""


def encode(event: dict) -> str:
    """One line (with its newline); a long ``tail`` loses its oldest lines to fit, then the
    longest text field (a long exception message) is shortened — the line stays valid JSON, so
    blinkrun still learns of the failure."""
    event = dict(event)
    while True:
        line = MARK + json.dumps(event, separators=(",", ":"), ensure_ascii=True) + "\n"
        if len(line) <= MAX_LINE:
            return line
        tail = event.get("tail") or []
        if tail:
            event["tail"] = tail[1:] if len(tail) > 1 else [tail[0][-500:]] if len(tail[0]) > 500 else []
            continue
        texts = [k for k, v in event.items() if isinstance(v, str) and len(v) > len(" ...")]
        if not texts:
            return line[:MAX_LINE - 1] + "\n"  # nothing left to shorten (never happens for our events)
        longest = max(texts, key=lambda k: len(event[k]))
        text = event[longest]
        # Characters to drop: the excess in escaped form, scaled to raw characters (a non-ASCII
        # character takes 6 in the line); the loop checks again.
        excess = len(line) - MAX_LINE + len(" ...")
        per_char = len(json.dumps(text, ensure_ascii=True)) / len(text)
        event[longest] = text[:max(0, len(text) - math.ceil(excess / per_char))] + " ..."


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
