"""Handles: what an asynchronous call returns and ``synchronize`` waits on.

A :class:`Slot` is the completion of one tensor (set once, by the background thread or by a
failure); a :class:`Handle` groups the slots of one user call and knows how to turn their
results into what the call returns. Public handles are integers (Horovod's), kept in a
:class:`HandleTable` until ``synchronize`` takes them out.

The integer an ``*_async`` call returns is a :class:`HandleId`, which owns its result: when the
user drops it without ``synchronize`` (a fire-and-forget call, an exception between submit and
wait), its table entry goes with it, so the result's memory is released once the collective
completes, however many such handles a program leaves behind. ``int(handle)`` gives up that
ownership: the plain number stays valid until ``synchronize`` (how the TensorFlow bindings carry
handles through graph tensors).
"""
from __future__ import annotations

import itertools
import numbers
import threading
from _thread import allocate_lock
from typing import Any, Callable, Dict, List, Optional

from ..errors import BlinkflowError, InvalidArgumentError
from .messages import shown

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


class HandleId(int):
    """The handle an ``*_async`` call returns: an int that releases its table entry (and so its
    result) when garbage-collected unsynchronized. ``int()`` of it (or ``operator.index``) hands
    out a plain number that keeps the entry until ``synchronize``."""

    def __new__(cls, value: int, table: "HandleTable"):
        self = super().__new__(cls, value)
        self._table = table
        self._owning = True
        return self

    def __int__(self) -> int:
        self._owning = False
        return int.__int__(self)

    __index__ = __int__

    def __del__(self):
        if self._owning:
            self._table.pop(int.__int__(self))

    def __reduce__(self):  # pickled (sent elsewhere): a plain number, which owns nothing
        return int, (int.__int__(self),)


class HandleTable:
    """Integer ids for handles (thread-safe)."""

    def __init__(self):
        # Reentrant: a HandleId collected by the cycle collector (say, in a traceback's frames)
        # pops its entry from whatever allocation triggered the collection, also one made
        # under this lock.
        self._lock = threading.RLock()
        self._handles: Dict[int, Handle] = {}

    def __len__(self) -> int:
        return len(self._handles)

    def add(self, handle: Handle) -> HandleId:
        with self._lock:
            hid = next(_IDS)
            self._handles[hid] = handle
        return HandleId(hid, self)

    def get(self, hid, what: str = "synchronize") -> Handle:
        # (A HandleId or an int first: the abstract Integral check costs a few microseconds.)
        if type(hid) is not HandleId and type(hid) is not int and (
                isinstance(hid, bool) or not isinstance(hid, numbers.Integral)):
            raise InvalidArgumentError(f"blinkflow.{what}() takes a handle (the int an *_async call returned), got "
                                       f"{type(hid).__name__} {shown(hid)}")
        with self._lock:
            try:
                return self._handles[_number(hid)]
            except KeyError:
                raise BlinkflowError(f"unknown handle {hid!r}: it was never returned by an *_async call "
                                     "or was already synchronized") from None

    def pop(self, hid: int) -> None:
        with self._lock:
            self._handles.pop(_number(hid), None)
        if type(hid) is HandleId:
            hid._owning = False  # its entry is gone: nothing left for its __del__ to release


def _number(hid) -> int:
    """The table key of a handle, without giving up a HandleId's ownership."""
    return int.__int__(hid) if isinstance(hid, int) else int(hid)
