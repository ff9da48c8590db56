"""Prove a schedule correct by symbolic execution (MSCCL's checker, ``msccl/language``).

Instead of numbers every element holds *which ranks' inputs it is the sum of* (a count per rank)
and *which input position* those inputs come from. Running the schedule on these symbols checks
the collective's postcondition exactly, for every element and every rank:

* all-reduce — every rank ends with every rank's input, each counted exactly once;
* broadcast — every rank ends with the root's data;
* reduce — the root ends with the full sum;
* all-gather — every rank ends with shard ``d`` from device ``d`` only;
* reduce-scatter — device ``d``'s shard holds the full sum.

Besides the postcondition the checker enforces the execution rules of :mod:`.ir`, so that
*every* legal executor (round by round, pulling from a peer's buffer, or one stream per channel
following ``deps``) computes the same thing:

1. structure (:meth:`Schedule.validate`): ranges, FIFO transfer matching;
2. rounds: programs sorted by round, each step after its deps and after the matching send, and a
   sent range is not overwritten on the sender before the receiving round has passed;
3. hazards: two steps of a device touching the same elements, one of them writing, are ordered
   by a chain of ``deps`` (else a concurrent executor could run them in either order);
4. no step sends, reduces or copies data that is not there yet (an undefined range).

Every failure raises :class:`ScheduleError` naming the device, step and elements.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Optional, Tuple

from ..errors import ScheduleError
from .intervals import IntervalMap
from .ir import RECEIVING_OPS, REDUCING_OPS, Schedule, Step

# A symbolic value: (shift, counts). ``counts[i]`` = how many times rank i's input is summed in;
# the inputs come from element ``position + shift``. ``None`` = nothing defined there yet.
Value = Optional[Tuple[int, Tuple[int, ...]]]


def check(schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` unless ``schedule`` provably implements its collective.

    >>> from blinkflow.planner import Plan, Tree
    >>> from blinkflow.schedule.lower import lower
    >>> plan = Plan("allreduce", "t", (0, 1, 2), (Tree(0, 1.0, ((0, 1), (1, 2))),), 1.0, 1.0)
    >>> check(lower(plan, 10, chunk_elems=3))                 # passes silently
    >>> import dataclasses
    >>> broken = dataclasses.replace(lower(plan, 10, 3), collective="reducescatter",
    ...                              shards=((0, 0, 5), (1, 5, 5)))
    >>> check(broken)
    Traceback (most recent call last):
    ...
    blinkflow.errors.ScheduleError: reducescatter needs one shard per device tiling the buffer; 2 shards for 3 devices cover 10 of 10 elements
    """
    schedule.validate()
    _check_shards(schedule)
    matches = _matching(schedule)
    _check_rounds(schedule, matches)
    _check_hazards(schedule)
    state = _execute(schedule, matches)
    _check_postcondition(schedule, state)


# ---- rules ------------------------------------------------------------------------------------
def _check_shards(s: Schedule) -> None:
    if s.collective in ("allgather", "reducescatter"):
        pos = 0
        for device, off, n in sorted(s.shards, key=lambda x: x[1]):
            if off != pos or device not in s.devices:
                raise ScheduleError(f"{s.collective} shards must tile the buffer; shard of device {device} "
                                    f"starts at {off}, expected {pos}")
            pos += n
        if pos != s.nelems or len(s.shards) != len(s.devices):
            raise ScheduleError(f"{s.collective} needs one shard per device tiling the buffer; {len(s.shards)} "
                                f"shards for {len(s.devices)} devices cover {pos} of {s.nelems} elements")
    if s.collective in ("broadcast", "reduce") and s.root not in s.devices:
        raise ScheduleError(f"{s.collective} root {s.root} is not a device of the schedule")


def _matching(s: Schedule) -> Dict[Tuple[int, int], Tuple[int, int]]:
    """(device, receive index) -> (sender, send index), FIFO per (src, dst, channel)."""
    sends: Dict[Tuple[int, int, int], collections.deque] = collections.defaultdict(collections.deque)
    for device, steps in s.programs:
        for i, st in enumerate(steps):
            if st.destination is not None:
                sends[(device, st.destination, st.channel)].append(i)
    out = {}
    for device, steps in s.programs:
        for i, st in enumerate(steps):
            if st.op in RECEIVING_OPS:
                out[(device, i)] = (st.peer, sends[(st.peer, device, st.channel)].popleft())
    return out


def _check_rounds(s: Schedule, matches) -> None:
    programs = s.as_dict_programs()
    recv_round = {send: programs[dev][i].round for (dev, i), send in matches.items()}
    for device, steps in s.programs:
        last_send: IntervalMap = IntervalMap(max(s.nelems, 1), ())
        for i, st in enumerate(steps):
            where = f"device {device} step {i} ({st.op}, round {st.round})"
            if st.round < 0:
                raise ScheduleError(f"{where}: negative round")
            if i and st.round < steps[i - 1].round:
                # Walking a program in order must walk it round by round (schedule docstring).
                raise ScheduleError(f"{where}: programs must be sorted by round; step {i - 1} is in "
                                    f"round {steps[i - 1].round}")
            for d in st.deps:
                if steps[d].round >= st.round:
                    raise ScheduleError(f"{where}: not after its dep {d} (round {steps[d].round})")
            if (device, i) in matches:
                src, j = matches[(device, i)]
                if programs[src][j].round >= st.round:
                    raise ScheduleError(f"{where}: receives in the round of its send (device {src} step {j}, "
                                        f"round {programs[src][j].round}) or earlier")
            if _writes(st):
                for _, _, sent in last_send.items(st.offset, st.offset + st.count):
                    for j in sent:
                        if recv_round[(device, j)] >= st.round:
                            raise ScheduleError(f"{where}: overwrites elements its step {j} sent before they "
                                                f"are received (round {recv_round[(device, j)]})")
                last_send.assign(st.offset, st.offset + st.count, ())
            if st.destination is not None:
                last_send.update(st.offset, st.offset + st.count, lambda sent, i=i: sent + (i,))


def _writes(st: Step) -> bool:
    return st.op != "send"


def _reads(st: Step) -> List[Tuple[int, int]]:
    if st.op == "copy":
        return [(st.src_offset, st.src_offset + st.count)]
    if st.op in ("send", "recv_reduce", "recv_reduce_send"):
        return [(st.offset, st.offset + st.count)]
    return []


def _check_hazards(s: Schedule) -> None:
    """Conflicting steps of one device must be ordered by deps: against the last writer of each
    element (every earlier writer is, transitively, before that one) and, for a write, against
    every reader since."""
    for device, steps in s.programs:
        before: List[int] = []  # bitset of each step's transitive deps
        state = IntervalMap(max(s.nelems, 1), (None, ()))
        for i, st in enumerate(steps):
            anc = 0
            for d in st.deps:
                anc |= before[d] | (1 << d)
            before.append(anc)
            need = []
            for lo, hi in _reads(st):
                need += [(w, lo2, hi2) for lo2, hi2, (w, _) in state.items(lo, hi) if w is not None]
            if _writes(st):
                for lo, hi, (w, readers) in state.items(st.offset, st.offset + st.count):
                    need += [(x, lo, hi) for x in ((w,) if w is not None else ()) + readers]
            for j, lo, hi in need:
                if j != i and not (anc >> j) & 1:
                    raise ScheduleError(f"device {device} step {i} ({st.op}) and step {j} ({steps[j].op}) both touch "
                                        f"elements [{lo}, {hi}) and one writes, but no deps order them")
            for lo, hi in _reads(st):
                state.update(lo, hi, lambda v, i=i: (v[0], v[1] + (i,)))
            if _writes(st):
                state.assign(st.offset, st.offset + st.count, (i, (i,) if st.destination is not None else ()))


# ---- symbolic execution -----------------------------------------------------------------------
def _initial(s: Schedule) -> Dict[int, IntervalMap]:
    n = len(s.devices)
    rank = {d: r for r, d in enumerate(s.devices)}

    def own(d):
        return (0, tuple(int(r == rank[d]) for r in range(n)))

    size = max(s.nelems, 1)
    if s.collective in ("allreduce", "reduce", "reducescatter"):
        return {d: IntervalMap(size, own(d)) for d in s.devices}
    if s.collective == "broadcast":
        return {d: IntervalMap(size, own(d) if d == s.root else None) for d in s.devices}
    state = {d: IntervalMap(size, None) for d in s.devices}  # all-gather: only the own shard
    for d, off, cnt in s.shards:
        state[d].assign(off, off + cnt, own(d))
    return state


def _read(m: IntervalMap, lo: int, hi: int, where: str) -> List[Tuple[int, int, Value]]:
    out = list(m.items(lo, hi))
    for a, b, v in out:
        if v is None:
            raise ScheduleError(f"{where}: reads elements [{a}, {b}) before any data arrived there")
    return out


def _execute(s: Schedule, matches) -> Dict[int, IntervalMap]:
    state = _initial(s)
    in_flight: Dict[Tuple[int, int], list] = {}
    order = sorted(((st.round, di, i) for di, (d, steps) in enumerate(s.programs) for i, st in enumerate(steps)))
    for _, di, i in order:
        device, steps = s.programs[di]
        st = steps[i]
        mem = state[device]
        where = f"device {device} step {i} ({st.op}, round {st.round})"
        lo, hi = st.offset, st.offset + st.count
        if st.op in RECEIVING_OPS:
            data = in_flight.pop(matches[(device, i)])
            if st.op in REDUCING_OPS:
                _read(mem, lo, hi, where)
                for a, b, v in data:
                    for a2, b2, w in mem.items(a, b):
                        mem.assign(a2, b2, _combine(w, v, f"{where}, elements [{a2}, {b2})"))
            else:
                for a, b, v in data:
                    mem.assign(a, b, v)
        elif st.op == "copy":
            shift = st.src_offset - st.offset
            src = _read(mem, st.src_offset, st.src_offset + st.count, where)
            for a, b, (sh, counts) in src:
                mem.assign(a - shift, b - shift, (sh + shift, counts))
        if st.destination is not None:
            in_flight[(device, i)] = _read(mem, lo, hi, where)
    return state


def _combine(mine: Value, theirs: Value, where: str) -> Value:
    if mine is None or theirs is None:
        raise ScheduleError(f"{where}: reduces into or from elements that hold no data yet")
    if mine[0] != theirs[0]:
        raise ScheduleError(f"{where}: adds inputs of different positions")
    return (mine[0], tuple(x + y for x, y in zip(mine[1], theirs[1])))


# ---- postconditions ---------------------------------------------------------------------------
def _check_postcondition(s: Schedule, state: Dict[int, IntervalMap]) -> None:
    n = len(s.devices)
    rank = {d: r for r, d in enumerate(s.devices)}
    everyone = (0, (1,) * n)

    def expect(device: int, lo: int, hi: int, want: Value, what: str) -> None:
        for a, b, v in state[device].items(lo, hi):
            if v != want:
                raise ScheduleError(f"{s.collective} postcondition fails: device {device} elements [{a}, {b}) "
                                    f"hold {_describe(v, s.devices)}; expected {what}")

    if s.nelems == 0:
        return
    if s.collective == "allreduce":
        for d in s.devices:
            expect(d, 0, s.nelems, everyone, "every rank's input exactly once")
    elif s.collective == "reduce":
        expect(s.root, 0, s.nelems, everyone, "every rank's input exactly once")
    elif s.collective == "broadcast":
        root = (0, tuple(int(r == rank[s.root]) for r in range(n)))
        for d in s.devices:
            expect(d, 0, s.nelems, root, f"device {s.root}'s data")
    elif s.collective == "reducescatter":
        for d, off, cnt in s.shards:
            expect(d, off, off + cnt, everyone, "every rank's input exactly once")
    else:  # allgather
        for owner, off, cnt in s.shards:
            want = (0, tuple(int(r == rank[owner]) for r in range(n)))
            for d in s.devices:
                expect(d, off, off + cnt, want, f"device {owner}'s shard")


def _describe(v: Value, devices) -> str:
    if v is None:
        return "nothing"
    shift, counts = v
    parts = [f"{c}x device {d}" for d, c in zip(devices, counts) if c]
    where = f" from position +{shift}" if shift else ""
    return ("the sum of " + ", ".join(parts) if parts else "an empty sum") + where
