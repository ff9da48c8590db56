"""Handles: what an asynchronous call returns and ``synchronize`` waits on.

A :class:`Slot` is the completion of one tensor (set once, by the background thread or by a
failure); a :class:`Handle` groups the slots of one user call and knows how to turn their
results into what the call returns. Public handles are small integers (Horovod's), kept in a
:class:`HandleTable` until ``synchronize`` takes them out.
"""
from __future__ import annotations

import itertools
import threading
from _thread import allocate_lock
from typing import Any, Callable, Dict, List, Optional

# How often a waiting user thread wakes to re-check; waiting never depends on MPI progress.
_WAIT_SLICE_S = 0.25
# One sequence for every table of the process: after shutdown() and init() a stale handle of the
# old runtime must be unknown to the new one, never the id of someone else's new call.
_IDS = itertools.count(1)


class Slot:
    """The result of one tensor's collective; the first outcome wins.

    Two raw locks instead of a ``threading.Event`` (see :mod:`.doorbell`): ``_claim`` makes the
    first outcome the only one, ``_pending`` is held until that outcome is published and is
    what a waiter sleeps on."""

    __slots__ = ("_claim", "_pending", "finished", "result", "error")

    def __init__(self):
        self._claim = allocate_lock()
        self._pending = allocate_lock()
        self._pending.acquire()
        self.finished = False
        self.result: Any = None
        self.error: Optional[BaseException] = None

    def set_result(self, value) -> None:
        self._settle(value, None)

    def set_error(self, error: BaseException) -> None:
        self._settle(None, error)

    def _settle(self, value, error: Optional[BaseException]) -> None:
        if self._claim.acquire(False):
            self.result, self.error = value, error
            self.finished = True
            self._pending.release()

    def done(self) -> bool:
        return self.finished

    def wait(self, timeout: float) -> bool:
        if self.finished:
            return True
        if self._pending.acquire(True, timeout):
            self._pending.release()  # for any other thread waiting on the same slot
            return True
        return self.finished


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

    def add(self, handle: Handle) -> int:
        with self._lock:
            hid = next(_IDS)
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
