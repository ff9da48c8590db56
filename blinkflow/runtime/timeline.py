"""Chrome-trace timeline (``BLINKFLOW_TIMELINE=path``), readable by Perfetto and chrome://tracing.

The file uses the trace-event *JSON Array Format*. It is written incrementally and stays valid
if the job is killed at any moment: the file starts with ``[``, every event after the first is
written with a *leading* ``,\\n`` in one unbuffered ``write`` call, and a clean close appends
``]``. A killed job therefore leaves a complete array missing only its closing ``]``, which the
format explicitly allows ("the ] at the end is optional", for traces of processes that crash);
there is never a dangling comma or a half-written event.

Each tensor gets its own track (a ``tid`` named after it): NEGOTIATE from submission until every
rank is ready, then the collective with nested COPY_IN / backend phases / COPY_OUT. Backends report
their phases through ``start(name, phase)`` / ``end(name, phase)``. Rank 0 writes ``path``;
rank r > 0 writes ``path`` with ``.rank<r>`` before the suffix, so ranks never share a file.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Dict, Optional

from ..errors import ConfigError


def rank_path(path: str, rank: int) -> str:
    if rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


class Timeline:
    def __init__(self, path: str, rank: int):
        self.path = rank_path(path, rank)
        self.rank = rank
        self._lock = threading.Lock()
        self._tids: Dict[str, int] = {}
        try:
            self._fd: Optional[int] = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise ConfigError(f"BLINKFLOW_TIMELINE: rank {rank} cannot write its timeline {self.path!r} "
                              f"({e.strerror}); give a file path in a writable folder") from None
        self._first = True
        self._write({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"name": f"blinkflow rank {rank}"}})

    # ---- the interface backends use (BackendContext.timeline) ---------------------------------
    def start(self, name: str, phase: str, args: Optional[dict] = None) -> None:
        self._event(name, "B", phase, args)

    def end(self, name: str, phase: str) -> None:
        self._event(name, "E", phase)

    # ---- runtime helpers ----------------------------------------------------------------------
    def instant(self, name: str, what: str, args: Optional[dict] = None) -> None:
        self._event(name, "i", what, args)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, b"\n]\n")
                os.close(self._fd)
                self._fd = None

    # ---- internals ----------------------------------------------------------------------------
    def _event(self, track: str, ph: str, what: str, args: Optional[dict] = None) -> None:
        event = {"name": what, "ph": ph, "ts": time.time_ns() // 1000, "pid": self.rank, "tid": self._tid(track)}
        if ph == "i":
            event["s"] = "t"
        if args:
            event["args"] = args
        self._write(event)

    def _tid(self, track: str) -> int:
        tid = self._tids.get(track)
        if tid is None:
            with self._lock:
                tid = self._tids.get(track)
                if tid is None:
                    tid = self._tids[track] = len(self._tids) + 1
                    self._write_locked({"name": "thread_name", "ph": "M", "pid": self.rank, "tid": tid,
                                        "args": {"name": track}})
        return tid

    def _write(self, event: dict) -> None:
        with self._lock:
            self._write_locked(event)

    def _write_locked(self, event: dict) -> None:
        if self._fd is None:
            return
        text = json.dumps(event, separators=(",", ":"))
        # One write() per event: a kill never leaves half an event behind.
        os.write(self._fd, (("[\n" if self._first else ",\n") + text).encode())
        self._first = False
