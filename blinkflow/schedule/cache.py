"""Lowered schedules and compiled programs, made once per call shape and validated before they run.

A backend asks for "the all-reduce of 812,416 elements in chunks of 65,536" on every fused
step of a training loop; lowering the plan and compiling this rank's program costs far more
than the step's bookkeeping, so both are kept (a training loop cycles through a few shapes).
Every schedule passes :meth:`~.ir.Schedule.validate` (ranges, matched transfers, channels)
when it is made, before its first run: a malformed schedule is a typed error on every rank
(they all make the same one), never a deadlock. The collective's postcondition is proven
separately by the symbolic checker, together with the device executor's deadlock-freedom,
on every new call shape when the caller asks (``BLINKFLOW_CHECK_SCHEDULES=1``, on in the tests;
:mod:`.proofs`).
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from .ir import Schedule
from .lower import lower
from .program import RankProgram, compile_program

#: Call shapes remembered (a training step has a handful; evaluation and checkpoints a few more).
CAPACITY = 64
ScheduleFor = Callable[..., Schedule]
"""``schedule_for(collective, root_device, nelems, chunk_elems, shard_counts=None) -> Schedule``
(``shard_counts`` maps every device to its shard's element count, for all-gather and
reduce-scatter): replaces lowering the plans (hand-made schedules in tests and benchmarks)."""


class Programs:
    """This rank's programs, by call shape. ``plan_for(collective, root=device)`` gives the agreed
    plans; ``devices[r]`` is the device rank ``r`` drives (transports address ranks)."""

    def __init__(self, plan_for: Callable[..., Any], devices: Sequence[int], rank: int, fuse_inputs: int = 1,
                 schedule_for: Optional[ScheduleFor] = None, capacity: int = CAPACITY, check: bool = False,
                 window: int = 1, proven: Optional[str] = None):
        self.plan_for = plan_for
        self.devices = tuple(devices)
        self.rank = rank
        self.rank_of: Dict[int, int] = {d: r for r, d in enumerate(self.devices)}
        self.fuse_inputs = fuse_inputs
        self.schedule_for = schedule_for
        self.capacity = capacity
        self.check = check
        """Prove every new schedule (postcondition, and deadlock-freedom of its device tables with
        ``window`` slots per connection) before its first run."""
        self.window = window
        self.proven = proven
        """A folder of schedules proven before (``BLINKFLOW_CHECK_CACHE``, :mod:`.proofs`), or None."""
        self._cache: "collections.OrderedDict[tuple, RankProgram]" = collections.OrderedDict()

    def get(self, collective: str, nelems: int, chunk_elems: int, root: Optional[int] = None,
            counts: Optional[Sequence[int]] = None) -> RankProgram:
        """The program of ``collective`` on ``nelems`` elements; ``root`` is a rank (broadcast,
        reduce), ``counts[r]`` rank ``r``'s shard (all-gather, reduce-scatter)."""
        key: Tuple = (collective, nelems, chunk_elems, root, None if counts is None else tuple(counts))
        program = self._cache.get(key)
        if program is not None:
            self._cache.move_to_end(key)
            return program
        schedule = self.schedule(collective, nelems, chunk_elems, root, counts)
        program = compile_program(schedule, self.devices[self.rank], self.rank_of, self.fuse_inputs)
        self._cache[key] = program
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return program

    def schedule(self, collective: str, nelems: int, chunk_elems: int, root: Optional[int] = None,
                 counts: Optional[Sequence[int]] = None) -> Schedule:
        """The validated schedule every rank runs for this call shape (uncached)."""
        root_device = None if root is None else self.devices[root]
        by_device = None if counts is None else {self.devices[r]: int(c) for r, c in enumerate(counts)}
        if self.schedule_for is not None:
            schedule = self.schedule_for(collective, root_device, nelems, chunk_elems, shard_counts=by_device)
        else:
            plan = self.plan_for(collective, root=root_device) if root_device is not None else self.plan_for(collective)
            shards = None if by_device is None else [by_device[d] for d in plan.devices]
            schedule = lower(plan, nelems, chunk_elems, shard_counts=shards)
        schedule.validate()
        if self.check:
            from .proofs import prove

            prove(schedule, self.window, self.fuse_inputs, self.rank_of, self.proven)
        return schedule
