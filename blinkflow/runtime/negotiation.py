"""One negotiation cycle: which tensors are ready on every rank, in one order for all.

Steady state costs one ``Allreduce(BAND)`` of a small packed bit vector (non-blocking, waited on
without spinning: :mod:`quiet_wait`)::

    [flags (1 byte) | cache-hit bits (capacity, padded to bytes) | invalid bits (likewise)]

(bit ``i`` of a region is bit ``i % 8`` of its byte ``i // 8``: a region is a little-endian
integer, so the vector is built and read with Python's integer operations, a handful of C calls
per cycle whatever the capacity; a cycle runs right after a large reduction has flushed the
caches, where every extra Python or numpy call costs ten times its warm price).

Cache-hit bits are AND-ed (ready everywhere); flags and invalid bits need OR, so they travel
inverted and come back through the same AND (not(OR(x)) == AND(not x)). Flags: some rank has
requests the coordinator must see; some rank asks to shut down; some rank has joined; the
coordinator has new settings for every rank (the autotuner's, :mod:`.autotune`).

Only when some rank has such requests, or the coordinator has settings, does the slow path run:
ranks gather their requests to rank 0, whose :class:`MessageTable` decides what is ready,
validates it, and broadcasts the responses with the settings. Every rank then runs the cache hits
(in bit order) followed by the broadcast responses: the same list, in the same order,
everywhere, and puts the settings in force after them (:attr:`Negotiator.agreed_settings`).

An error the coordinator decides before some rank submitted the name (``add_process_set`` or
``remove_process_set`` out of order, :mod:`.fences`) is broadcast with the ranks it is still
*owed* to (``Response.owed_to``). Such a rank keeps it (:attr:`Negotiator.owed`) and, when its
call under the name comes, answers that call itself with the error, in the cycle it is submitted:
the others have had the error and gone on, so the call must not wait for them (it would pair
with nothing). Answering it is local and collective-free, so it runs after the cycle's agreed
responses without changing what the ranks run together.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..backends import quiet_wait
from .coordinator import MessageTable
from .messages import JOIN_NAME, Kind, Request, Response
from .response_cache import HIT, INVALID, ResponseCache

@dataclasses.dataclass
class Waiting:
    """A request this rank submitted, from its cycle until its response runs (its entry, with the
    arrays, waits in the state's table: :mod:`.state`)."""

    request: Request
    submitted: float
    bit: Optional[int] = None
    """Its response-cache bit while it is a cache hit."""
    sent: bool = False
    """Whether its request reached the coordinator."""

    @property
    def name(self) -> str:
        return self.request.name


#: Flag bits of byte 0 (set = "no", so that AND across ranks answers "nobody").
_NO_REQUESTS, _NO_SHUTDOWN, _NO_JOIN, _NO_SETTINGS = 1, 2, 4, 8
#: Owed errors a rank keeps: a verdict owes a rank a few names, and a program that never makes
#: those calls must not grow the table for good.
OWED_KEPT = 256


class Negotiator:
    def __init__(self, comm, rank: int, size: int, cache: ResponseCache, report_after_s: Optional[float], band,
                 ranks=None, label: str = ""):
        self.comm = comm
        self.band = band
        """``MPI.BAND`` (passed in, so this module runs on a stand-in communicator in tests)."""
        self.rank = rank
        self.size = size
        self.cache = cache
        self.table = MessageTable(size, ranks, label, report_after_s) if rank == 0 else None
        """Rank 0's coordinator; ``ranks`` (global ranks of a process set's members) and ``label``
        (which set) only shape its messages."""
        self.pending: Dict[str, Waiting] = {}
        """The names this rank submitted whose responses have not run yet (the executor pops them)."""
        # A cache hit that waits this long is also reported to the coordinator, so the stall
        # inspector can see who has it (hits are otherwise invisible to rank 0).
        self.report_after_s = report_after_s
        region = self._region = -(-cache.capacity // 8)
        self._ones = (1 << 8 * region) - 1
        self._none_invalid = self._ones.to_bytes(region, "little")
        """The invalid region when this rank found nothing invalid (invalid bits travel inverted)."""
        self._agreed = bytearray(1 + 2 * region)
        view = memoryview(self._agreed)
        self._agreed_hits, self._agreed_invalid = view[1:1 + region], view[1 + region:]
        self.proposed_settings = None
        """Rank 0: settings to send every rank in the next cycle (the autotuner's), or None."""
        self.agreed_settings = None
        """What the last cycle's broadcast carried for every rank to apply after its responses."""
        self.owed: "collections.OrderedDict[str, Tuple[Response, int]]" = collections.OrderedDict()
        """Errors owed to this rank (module docstring): name -> (the error, the slow path that
        brought it: one verdict). Oldest first, at most :data:`OWED_KEPT`."""
        self._answered: List[Response] = []
        """Owed errors of calls submitted this cycle, run after the agreed responses."""
        self.stats = {"cycles": 0, "slow_paths": 0, "cache_hits": 0}
        """Counters for tests and debugging: the fast path shows as cycles without slow paths."""

    def add(self, submitted: Sequence[Tuple[Request, float]]) -> List[int]:
        """Take newly submitted requests (with their submission times); returns the cache bits
        they found invalid."""
        invalid = []
        for request, when in submitted:
            waiting = self.pending[request.name] = Waiting(request, when)
            if self.owed and waiting.name in self.owed:
                self._answer(waiting)
                continue
            if waiting.request.kind in (Kind.JOIN, Kind.BARRIER):
                continue
            status, bit = self.cache.lookup(waiting.request)
            if status == HIT:
                waiting.bit = bit
            elif status == INVALID:
                invalid.append(bit)
        return invalid

    def _answer(self, waiting: Waiting) -> None:
        """``waiting`` is a call whose error this rank is owed: it is answered here, never sent. The
        other names of the same verdict are dropped: this rank has now made its call of them,
        and a later call under another of those names is a new one."""
        response, verdict = self.owed.pop(waiting.name)
        waiting.sent = True
        self._answered.append(response)
        for name in [n for n, (_, v) in self.owed.items() if v == verdict]:
            del self.owed[name]

    def _keep_owed(self, responses: List[Response]) -> None:
        """Keep the errors of ``responses`` (one slow path: at most one verdict) owed to this
        rank. None if this rank has one of the verdict's names pending: a cache hit it had not
        reported yet is a call it made, which the error completes like the others' calls."""
        owed = [r for r in responses if r.owed_to and self.rank in r.owed_to]
        if not owed or any(r.name in self.pending for r in owed):
            return
        for response in owed:
            self.owed[response.name] = (response, self.stats["slow_paths"])
            self.owed.move_to_end(response.name)
        while len(self.owed) > OWED_KEPT:
            self.owed.popitem(last=False)

    def on_evict(self, bit: int) -> None:
        """A cache entry was dropped on every rank: its waiting hits must negotiate in full."""
        for waiting in self.pending.values():
            if waiting.bit == bit:
                waiting.bit = None

    def cycle(self, new: Sequence[Tuple[Request, float]], shutdown_reason: Optional[str], wake=None, failure=None
              ) -> Tuple[List[Response], Optional[List[Optional[str]]]]:
        """Run one cycle with the requests submitted since the last (:meth:`.state.SharedState.drain`);
        returns (responses to execute, every rank's shutdown reason or None).
        ``wake`` (a :class:`~.doorbell.Doorbell`) is set when new work is submitted meanwhile; ``failure()``
        returns the runtime's failure, if any (see quiet_wait)."""
        invalid = self.add(new)
        now = time.monotonic()
        joined = JOIN_NAME in self.pending
        to_send = [e for e in self.pending.values() if not e.sent and self._must_send(e, now)]

        hits = 0
        if not joined:
            for e in self.pending.values():
                if e.bit is not None:
                    hits |= 1 << e.bit
        region = self._region
        if invalid:
            found = 0
            for bit in invalid:
                found |= 1 << bit
            inverted = (self._ones ^ found).to_bytes(region, "little")
        else:
            inverted = self._none_invalid
        self.agreed_settings = None
        flags = ((_NO_REQUESTS if not to_send else 0) | (_NO_SHUTDOWN if shutdown_reason is None else 0)
                 | (_NO_JOIN if not joined else 0) | (_NO_SETTINGS if self.proposed_settings is None else 0))
        packed = b"%c" % flags + hits.to_bytes(region, "little") + inverted
        agreed = self._agreed
        quiet_wait.wait(self.comm.Iallreduce(packed, agreed, op=self.band), wake, failure)  # no spinning
        flags = agreed[0]

        if self._agreed_invalid == self._none_invalid:  # the steady state: nothing found invalid anywhere
            invalid_set = set()
        else:
            invalid_set = set(_bits_of(self._ones ^ int.from_bytes(self._agreed_invalid, "little")))
        responses = [self.cache.get(b) for b in _bits_of(int.from_bytes(self._agreed_hits, "little"))
                     if b not in invalid_set and self.cache.has_bit(b)]
        for bit in invalid_set:
            self.cache.evict(bit)  # calls on_evict: their requests negotiate in full next cycle

        self.stats["cycles"] += 1
        self.stats["cache_hits"] += len(responses)
        reasons = None
        if not flags & _NO_SHUTDOWN:
            reasons = self.comm.allgather(shutdown_reason)
        if not flags & _NO_JOIN:
            # Someone joined: it cannot vote on cache bits, so everything goes to the coordinator.
            to_send = [e for e in self.pending.values() if not e.sent]
        hit_names = [r.name for r in responses]
        if not flags & _NO_REQUESTS or not flags & _NO_SETTINGS or (not flags & _NO_JOIN and reasons is None):
            responses += self._slow_path(to_send, hit_names)
        elif self.table is not None:
            # A hit some rank had reported earlier (stall report, join) must not linger on the
            # coordinator, where a later report of the same name would pair with the stale one.
            for name in hit_names:
                self.table.forget(name)
        if self._answered:
            responses += self._answered
            self._answered = []
        return responses, reasons

    def _must_send(self, waiting: Waiting, now: float) -> bool:
        if waiting.bit is None:
            return True
        return self.report_after_s is not None and now - waiting.submitted > self.report_after_s

    def _slow_path(self, to_send: List[Waiting], hit_names: List[str]) -> List[Response]:
        self.stats["slow_paths"] += 1
        now = time.monotonic()
        gathered = self.comm.gather([dataclasses.replace(e.request, waited=now - e.submitted) for e in to_send],
                                    root=0)
        for e in to_send:
            e.sent = True
        ready = None
        if self.table is not None:
            for r, requests in enumerate(gathered):
                self.table.add(r, requests)
            for name in hit_names:
                self.table.forget(name)
            ready = self.table.pop_ready()
        ready, self.agreed_settings = self.comm.bcast((ready, self.proposed_settings), root=0)
        self.proposed_settings = None
        self._keep_owed(ready)
        return ready


def _bits_of(bits: int) -> List[int]:
    """Indices of the set bits of ``bits``, ascending (one C-level scan, a step per set bit)."""
    digits = bin(bits)[:1:-1]  # least significant first
    out = []
    at = digits.find("1")
    while at >= 0:
        out.append(at)
        at = digits.find("1", at + 1)
    return out
