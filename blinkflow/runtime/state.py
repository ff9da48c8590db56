"""What user threads and the background thread share: the submission queue, the names in
flight, the handle table and the runtime's failure (if any).

User threads only ever touch this object (never MPI); the background thread drains the queue
each cycle and completes entries. A failure (a dead peer, a shutdown, a crash of the background
thread) completes every entry in flight with that error, and later submissions raise it.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Dict, List, Optional

from ..config import Config
from ..errors import BlinkflowError, DuplicateNameError
from .doorbell import Doorbell
from .handles import HandleTable, Slot
from .messages import Request, shown


@dataclasses.dataclass
class Entry:
    """One tensor submitted on this rank, from submission until its collective completes."""

    request: Request
    array: Any
    slot: Slot
    submitted: float = dataclasses.field(default_factory=time.monotonic)
    bit: Optional[int] = None
    """Its response-cache bit while it is a cache hit."""
    sent: bool = False
    """Whether its request reached the coordinator."""

    @property
    def name(self) -> str:
        return self.request.name


class SharedState:
    def __init__(self, config: Config, rank: int):
        self.config = config
        self.rank = rank
        self.handles = HandleTable()
        self._lock = threading.Lock()
        self._queue: List[Entry] = []
        self._in_flight: Dict[str, Entry] = {}
        self._work = Doorbell()
        """Set by a submission or a shutdown request: the background thread stops sleeping."""
        self.failure: Optional[BlinkflowError] = None
        self.shutdown_reason: Optional[str] = None
        """Set when this rank asks the job to stop (``shutdown()`` or the stall inspector)."""

    def submit(self, entries: List[Entry]) -> None:
        """Queue ``entries`` atomically (a group is negotiated together)."""
        with self._lock:
            if self.failure is not None:
                raise self.failure
            for entry in entries:
                if entry.name in self._in_flight:
                    raise DuplicateNameError(
                        f"tensor name {shown(entry.name)} is already in flight on rank {self.rank}: synchronize the "
                        "first call before submitting the name again, or give the second tensor another name")
            for entry in entries:
                self._in_flight[entry.name] = entry
            self._queue.extend(entries)
            self._work.set()

    def drain(self) -> List[Entry]:
        with self._lock:
            self._work.clear()  # under the lock: a submission after this sets it again
            out, self._queue = self._queue, []
            return out

    @property
    def work_submitted(self) -> Doorbell:
        """Set from a submission (or a shutdown request) until the next :meth:`drain`."""
        return self._work

    def wait_for_work(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, less if something is submitted (the rest of a cycle:
        the ranks that submit last then start the negotiation without waiting for a tick)."""
        if timeout > 0:
            self._work.wait(timeout)

    def complete(self, entry: Entry, result=None, error: Optional[BaseException] = None) -> None:
        with self._lock:
            if self._in_flight.get(entry.name) is entry:
                del self._in_flight[entry.name]
        if error is not None:
            entry.slot.set_error(error)
        else:
            entry.slot.set_result(result)

    def fail(self, error: BlinkflowError) -> None:
        """Stop for good: every entry in flight and every later call gets ``error``."""
        with self._lock:
            if self.failure is None:
                self.failure = error
            entries = list(self._in_flight.values())
            self._in_flight.clear()
            self._queue = []
        for entry in entries:
            entry.slot.set_error(self.failure)

    def abort_check(self) -> Optional[BaseException]:
        return self.failure

    def request_shutdown(self, reason: str) -> None:
        with self._lock:
            if self.shutdown_reason is None:
                self.shutdown_reason = reason
            self._work.set()
