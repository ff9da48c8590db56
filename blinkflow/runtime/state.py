"""What user threads and the background thread share: the submission queue, the names in
flight, the handle table and the runtime's failure (if any).

User threads only ever touch this object (never MPI). An entry (request, arrays, result slot)
stays here, in the table of names in flight, from its submission (a second call under a name in
flight: once the first completes) until the executor completes it (Horovod's tensor table):
each cycle the background thread drains the queue's *requests* for the negotiation, which deals
in requests alone, and the executor takes the entries of the responses it runs from here
(:meth:`SharedState.entry`). A failure (a dead peer, a shutdown, a crash of the background
thread) completes every entry in flight with that error, and later submissions raise it.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..config import Config
from ..errors import BlinkflowError, DuplicateNameError
from .doorbell import Doorbell
from .handles import Handle, HandleTable, Slot
from .messages import Request, shown


@dataclasses.dataclass
class Entry:
    """One tensor submitted on this rank, from submission until its collective completes."""

    request: Request
    array: Any
    slot: Slot
    submitted: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.request.name


class SharedState:
    """One process set's queue and names in flight (a name is unique within a set); ``handles``
    is shared by every set of the runtime, since ``synchronize(handle)`` does not name the set."""

    def __init__(self, config: Config, rank: int, handles: Optional[HandleTable] = None):
        self.config = config
        self.rank = rank
        self.handles = handles if handles is not None else HandleTable()
        self._lock = threading.Lock()
        self._queue: List[Entry] = []
        self._in_flight: Dict[str, Entry] = {}
        self._deferred: Dict[str, List[Entry]] = {}
        """Refused duplicates of a name in flight, in submission order, sent once it completes."""
        self._work = Doorbell()
        """Set by a submission or a shutdown request: the background thread stops sleeping."""
        self.failure: Optional[BlinkflowError] = None
        self.shutdown_reason: Optional[str] = None
        """Set when this rank asks the job to stop (``shutdown()`` or the stall inspector)."""

    def queue(self, requests_arrays: List[Tuple[Request, Any]], finish: Callable[[List[Any]], Any],
              timeline=None) -> Handle:
        """Queue ``(request, arrays)`` pairs atomically (a group is negotiated together); the
        returned handle (not entered in the handle table) completes with ``finish`` of the
        requests' results. ``timeline`` (the set's, if one is written) marks them queued."""
        slots = [Slot() for _ in requests_arrays]
        entries = [Entry(request, array, slot) for (request, array), slot in zip(requests_arrays, slots)]
        if timeline is not None:
            for entry in entries:
                timeline.start(entry.name, "QUEUED")  # before submit: the background may drain at once
        try:
            self.submit(entries)
        except BlinkflowError:
            if timeline is not None:
                for entry in entries:
                    timeline.end(entry.name, "QUEUED")
            raise
        return Handle(slots, finish)

    def submit(self, entries: List[Entry]) -> None:
        """Queue ``entries`` atomically (a group is negotiated together).

        A name already in flight on this rank is not refused here alone: the peers' next call
        under that name would wait forever for this rank's. The second entry becomes a refusal
        (DuplicateNameError) that waits behind the first and is negotiated under the name once
        the first completes, so every rank's second call under the name fails with it."""
        with self._lock:
            if self.failure is not None:
                raise self.failure
            for entry in entries:
                if entry.name in self._in_flight:
                    self._defer_duplicate(entry)
                else:
                    self._in_flight[entry.name] = entry
                    self._queue.append(entry)
            self._work.set()

    def _defer_duplicate(self, entry: Entry) -> None:
        reason = (f"tensor name {shown(entry.name)} was submitted again on rank {self.rank} while its first call was "
                  "in flight there: synchronize the first call before submitting the name again, or give the "
                  "second tensor another name")
        entry.request = dataclasses.replace(entry.request, rejected=reason, rejected_as=DuplicateNameError.__name__)
        entry.array = None  # never moved: its memory is the user's again
        self._deferred.setdefault(entry.name, []).append(entry)

    def drain(self) -> List[Tuple[Request, float]]:
        """The requests submitted since the last drain, each with its submission time; their
        entries stay in flight here."""
        with self._lock:
            self._work.clear()  # under the lock: a submission after this sets it again
            out, self._queue = self._queue, []
        return [(entry.request, entry.submitted) for entry in out]

    def entry(self, name: str) -> Optional[Entry]:
        """The entry in flight under ``name``, or None."""
        return self._in_flight.get(name)  # one dict read, atomic: no lock

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
                waiting = self._deferred.get(entry.name)
                if waiting:  # the duplicate submitted meanwhile goes out under the name now
                    after = waiting.pop(0)
                    if not waiting:
                        del self._deferred[entry.name]
                    self._in_flight[entry.name] = after
                    self._queue.append(after)
                    self._work.set()
        if error is not None:
            entry.slot.set_error(error)
        else:
            entry.slot.set_result(result)

    def fail(self, error: BlinkflowError) -> None:
        """Stop for good: every entry in flight and every later call gets ``error``.

        It may come from another thread (the watchdog, another process set's loop, an elastic
        reset) while this set's cycle runs responses every rank agreed to: entries already
        drained stay in the table until the executor completes them (or the state goes), so this
        rank still takes part in those collectives with its own data; taken out, it would add
        zeros, as a joined rank does, and the peers of a healthy set would get a wrong sum."""
        with self._lock:
            if self.failure is None:
                self.failure = error
            entries = list(self._in_flight.values()) + [e for waiting in self._deferred.values() for e in waiting]
            undrained = {id(e) for e in self._queue}
            self._in_flight = {name: e for name, e in self._in_flight.items() if id(e) not in undrained}
            self._deferred.clear()
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
