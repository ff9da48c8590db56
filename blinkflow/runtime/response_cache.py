"""The response cache: Horovod's fast path for tensors negotiated before.

Every rank keeps an identical cache (it is updated only by responses that every rank executes in
the same order), so a cached response is named by its bit position. In steady state a training
step's tensors are all cached, and negotiation is one small all-reduce of a bit vector instead of
a gather and a broadcast of pickled requests.

An entry is a hit for a new request only if the request equals this rank's request in the cached
response (same shape, dtype, op, splits, ...). A request under a cached name that differs is
*invalid*: its bit is OR-ed across ranks and every rank evicts the entry, so all ranks fall back to
full negotiation for that name and the coordinator can validate (and report mismatches).
"""
from __future__ import annotations

import collections
from typing import Dict, List, Optional, Tuple

from .messages import Kind, Request, Response

HIT, MISS, INVALID = "hit", "miss", "invalid"
_CACHEABLE = (Kind.ALLREDUCE, Kind.ALLGATHER, Kind.BROADCAST, Kind.REDUCESCATTER, Kind.ALLTOALL)


class ResponseCache:
    def __init__(self, capacity: int, rank: int):
        self.capacity = capacity
        self.rank = rank
        self._by_name: Dict[str, int] = {}
        self._by_bit: Dict[int, Response] = {}
        # Least recently used first; touched in execution order, which is identical on all ranks.
        self._lru: "collections.OrderedDict[int, None]" = collections.OrderedDict()
        self._free: List[int] = list(range(capacity - 1, -1, -1))

    def __len__(self) -> int:
        return len(self._by_bit)

    def lookup(self, request: Request) -> Tuple[str, Optional[int]]:
        """(HIT, bit), (INVALID, bit) or (MISS, None) for this rank's ``request``."""
        bit = self._by_name.get(request.name)
        if bit is None:
            return MISS, None
        cached = self._by_bit[bit].requests[self.rank]
        return (HIT, bit) if cached == request else (INVALID, bit)

    def get(self, bit: int) -> Response:
        return self._by_bit[bit]

    def has_bit(self, bit: int) -> bool:
        return bit in self._by_bit

    def touch(self, bit: int) -> None:
        self._lru.move_to_end(bit)

    def put(self, response: Response) -> None:
        """Remember an executed response (if it can be replayed: no joined ranks, no error)."""
        if self.capacity == 0 or response.kind not in _CACHEABLE or any(r is None for r in response.requests):
            return
        old = self._by_name.get(response.name)
        if old is not None:
            self._by_bit[old] = response
            self.touch(old)
            return
        if not self._free:
            self.evict(next(iter(self._lru)))
        bit = self._free.pop()
        self._by_name[response.name] = bit
        self._by_bit[bit] = response
        self._lru[bit] = None

    def evict(self, bit: int) -> None:
        response = self._by_bit.pop(bit, None)
        if response is None:
            return
        del self._by_name[response.name]
        self._lru.pop(bit, None)
        self._free.append(bit)
