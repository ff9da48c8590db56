"""Handles: what an asynchronous call returns and ``synchronize`` waits on.

A :class:`Slot` is the completion of one tensor (set once, by the background thread or by a
failure); a :class:`Handle` groups the slots of one user call and knows how to turn their
results into what the call returns. Public handles are small integers (Horovod's), kept in a
:class:`HandleTable` until ``synchronize`` takes them out.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Dict, List, Optional

# How often a waiting user thread wakes to re-check; waiting never depends on MPI progress.
_WAIT_SLICE_S = 0.25


class Slot:
    """The result of one tensor's collective; the first outcome wins."""

    __slots__ = ("_event", "_lock", "result", "error")

    def __init__(self):
        self._event = threading.Event()
        self._lock = threading.Lock()
        self.result: Any = None
        self.error: Optional[BaseException] = None

    def set_result(self, value) -> None:
        with self._lock:
            if not self._event.is_set():
                self.result = value
                self._event.set()

    def set_error(self, error: BaseException) -> None:
        with self._lock:
            if not self._event.is_set():
                self.error = error
                self._event.set()

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)


class Handle:
    """One user call: its slots and the function that assembles the call's return value."""

    def __init__(self, slots: List[Slot], finish: Callable[[List[Any]], Any]):
        self.slots = slots
        self._finish = finish

    def done(self) -> bool:
        return all(s.done() for s in self.slots)

    def wait(self, should_abort: Callable[[], Optional[BaseException]]) -> Any:
        """Block until every slot is done; raise the first error. ``should_abort`` is asked on
        every wake-up, so a dead runtime surfaces even if nobody completes the slots."""
        for slot in self.slots:
            while not slot.wait(_WAIT_SLICE_S):
                error = should_abort()
                if error is not None:
                    slot.set_error(error)
        for slot in self.slots:
            if slot.error is not None:
                raise slot.error
        return self._finish([s.result for s in self.slots])


class HandleTable:
    """Integer ids for handles (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._handles: Dict[int, Handle] = {}
        self._ids = itertools.count(1)

    def add(self, handle: Handle) -> int:
        with self._lock:
            hid = next(self._ids)
            self._handles[hid] = handle
            return hid

    def get(self, hid: int) -> Handle:
        with self._lock:
            try:
                return self._handles[hid]
            except KeyError:
                from ..errors import BlinkflowError

                raise BlinkflowError(f"unknown handle {hid!r}: it was never returned by an *_async call "
                                     "or was already synchronized") from None

    def pop(self, hid: int) -> None:
        with self._lock:
            self._handles.pop(hid, None)
