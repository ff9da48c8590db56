"""Compile one rank's part of a :class:`~blinkflow.schedule.ir.Schedule` into actions.

Pure Python (no CuPy, no MPI), so the CPU suite checks it. The GPU executor follows the
schedule's dependencies and transfer matching rather than its rounds (see the schedule IR's
docstring), which lets the chunks of a tree pipeline (Blink §4.2). Following dependencies out
of order is only safe if every hazard on the local buffer is a dependency, so on top of the
declared ``deps`` we add one for every earlier step whose element range conflicts with this
one (read-after-write, write-after-read, write-after-write): the executor then never relies on
how the lowering chose to spell ordering.

Transfers are numbered per (peer, channel) in program order: the k-th send to ``dst`` on
channel ``c`` carries sequence number k and lands in receive slot ``k mod nslots`` of ``dst``;
the k-th receive from ``src`` on ``c`` reads that slot. This is the FIFO matching the IR
defines, made explicit so out-of-order issue cannot mix chunks up.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Tuple

from ...errors import ScheduleError
from ...schedule.ir import RECEIVING_OPS, REDUCING_OPS, Schedule, Step

Pair = Tuple[int, int]  # (peer rank, channel)


@dataclasses.dataclass(frozen=True)
class Action:
    """One schedule step, with peers as ranks and transfers numbered."""

    index: int
    op: str
    offset: int
    count: int
    channel: int
    deps: Tuple[int, ...]
    """Declared deps plus buffer hazards: indexes of earlier actions that must be issued first."""
    recv_from: Optional[int] = None
    recv_seq: Optional[int] = None
    send_to: Optional[int] = None
    send_seq: Optional[int] = None
    src_offset: Optional[int] = None

    @property
    def reduces(self) -> bool:
        return self.op in REDUCING_OPS


@dataclasses.dataclass(frozen=True)
class RankProgram:
    """What one rank executes for one schedule."""

    rank: int
    nelems: int
    nchannels: int
    actions: Tuple[Action, ...]
    sends: Dict[Pair, int]
    """Transfers this rank sends per (destination rank, channel)."""
    recvs: Dict[Pair, int]
    """Transfers this rank receives per (source rank, channel)."""
    slot_elems: int
    """Largest transfer of the whole schedule (every rank computes the same value)."""
    cross_stream_deps: Tuple[bool, ...]
    """``[i]``: some later action on another channel depends on action ``i`` (needs an event)."""
    dependents: Tuple[Tuple[int, ...], ...] = ()
    """``[i]``: the actions that list ``i`` in their deps (precomputed for the issue loop)."""


def _ranges(step: Step) -> Tuple[List[Tuple[int, int]], List[Tuple[int, int]]]:
    """(reads, writes) of a step on the local buffer, as half-open element ranges."""
    span = (step.offset, step.offset + step.count)
    if step.op == "send":
        return [span], []
    if step.op in ("recv", "recv_send"):
        return [], [span]
    if step.op in REDUCING_OPS:
        return [span], [span]
    if step.op == "copy":
        return [(step.src_offset, step.src_offset + step.count)], [span]
    raise ScheduleError(f"unknown step op {step.op!r}")


def _overlap(a: List[Tuple[int, int]], b: List[Tuple[int, int]]) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b if x1 > x0 and y1 > y0)


def compile_program(schedule: Schedule, device: int, rank_of: Mapping[int, int]) -> RankProgram:
    """The :class:`RankProgram` of ``device`` (a schedule device id); ``rank_of`` maps schedule
    devices to the ranks of the communicator the executor messages on."""
    steps = schedule.program(device)
    me = rank_of[device]
    send_seq: Dict[Pair, int] = {}
    recv_seq: Dict[Pair, int] = {}
    footprints = [_ranges(s) for s in steps]
    # Earlier steps are found through the blocks of ``block`` elements they touch, so finding
    # hazards costs about (steps x steps-per-block) instead of steps squared; a 256 MiB buffer
    # in 4 KiB chunks has 65536 steps per phase.
    block = max(1, schedule.chunk_elems, max((s.count for s in steps), default=1))
    touched: Dict[int, List[int]] = {}
    actions: List[Action] = []
    for i, s in enumerate(steps):
        reads, writes = footprints[i]
        deps = set(s.deps)
        blocks = {b for lo, hi in reads + writes if hi > lo for b in range(lo // block, (hi - 1) // block + 1)}
        for j in {j for b in blocks for j in touched.get(b, ())}:
            r, w = footprints[j]
            if _overlap(writes, r) or _overlap(writes, w) or _overlap(reads, w):
                deps.add(j)
        for b in blocks:
            touched.setdefault(b, []).append(i)
        fields = {}
        if s.op in RECEIVING_OPS:
            key = (rank_of[s.peer], s.channel)
            fields.update(recv_from=key[0], recv_seq=recv_seq.get(key, 0))
            recv_seq[key] = fields["recv_seq"] + 1
        dst = s.destination
        if dst is not None:
            key = (rank_of[dst], s.channel)
            if key[0] == me:
                raise ScheduleError(f"device {device} step {i} sends to itself")
            fields.update(send_to=key[0], send_seq=send_seq.get(key, 0))
            send_seq[key] = fields["send_seq"] + 1
        actions.append(Action(index=i, op=s.op, offset=s.offset, count=s.count, channel=s.channel,
                              deps=tuple(sorted(deps)), src_offset=s.src_offset, **fields))
    cross = [False] * len(actions)
    dependents: List[List[int]] = [[] for _ in actions]
    for a in actions:
        for d in a.deps:
            dependents[d].append(a.index)
            if actions[d].channel != a.channel:
                cross[d] = True
    slot = max((s.count for _, prog in schedule.programs for s in prog if s.destination is not None), default=0)
    return RankProgram(rank=me, nelems=schedule.nelems, nchannels=max(1, schedule.nchannels),
                       actions=tuple(actions), sends=send_seq, recvs=recv_seq, slot_elems=slot,
                       cross_stream_deps=tuple(cross), dependents=tuple(tuple(x) for x in dependents))
