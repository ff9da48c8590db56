"""Compile one device's part of a :class:`~blinkflow.schedule.ir.Schedule` into actions.

Pure Python (no CuPy, no MPI). The runner (:mod:`.runner`) follows the schedule's dependencies
and transfer matching rather than its rounds (see the IR's docstring), which lets the chunks of
a tree pipeline (Blink §4.2). Following dependencies out of order is only safe if every hazard on
the local buffer is a dependency, so on top of the declared ``deps`` we add one for every
earlier step whose element range conflicts with this one (read-after-write, write-after-read,
write-after-write): the runner then never relies on how the lowering chose to spell ordering.

Transfers are numbered per (peer, channel) in program order: the k-th send to ``dst`` on
channel ``c`` carries sequence number k; the k-th receive from ``src`` on ``c`` consumes it.
This is the FIFO matching the IR defines, made explicit so out-of-order issue cannot mix
chunks up.

Two facts per action serve transports that do not copy data out when a send is issued:

* ``releases``: the earlier sends whose source range this action overwrites. Where a receiver
  reads the sender's buffer in place (the CPU's shared memory) or MPI still reads it (an
  ``Isend`` in flight), the action must wait until those sends were released.
* ``final``: nothing later on this device reads or writes the action's range, so its value is
  the device's result there and may be written straight to an out-of-place output;
  ``leftover`` lists the ranges no final action writes (they are copied out at the end).
"""
from __future__ import annotations

import bisect
import dataclasses
from typing import Dict, List, Mapping, Optional, Tuple

from ..errors import ScheduleError
from .ir import RECEIVING_OPS, REDUCING_OPS, SENDING_OPS, Schedule, Step

Pair = Tuple[int, int]  # (peer rank, channel)


@dataclasses.dataclass(frozen=True)
class Action:
    """One schedule step (or several fused reductions of one range), with peers as ranks and
    transfers numbered."""

    index: int
    op: str
    offset: int
    count: int
    channel: int
    deps: Tuple[int, ...]
    """Declared deps plus buffer hazards: indexes of earlier actions that must be issued first."""
    inputs: Tuple[Tuple[int, int], ...] = ()
    """(source rank, recv seq) of every chunk this action receives, in combination order (one for
    a plain receive; several when consecutive reductions of one range were fused)."""
    send_to: Optional[int] = None
    send_seq: Optional[int] = None
    src_offset: Optional[int] = None
    releases: Tuple[int, ...] = ()
    """Earlier sending actions whose source range this action overwrites."""
    final: bool = False
    """No later action of this device touches this action's range (it writes the result there)."""
    steps: Tuple[int, ...] = ()
    """The schedule steps this action performs (their indexes in the device's program)."""
    in_keys: Tuple[Pair, ...] = ()
    """(source rank, channel) of every input: the queue its recv seq counts in."""
    send_key: Optional[Pair] = None
    """(destination rank, channel) of the send, if any."""
    copy_out: Tuple[Tuple[int, int], ...] = ()
    """Ranges of ``leftover`` that nothing after this action touches: once it ran they hold the
    device's result, so a transport that runs actions synchronously may copy them to the
    out-of-place output right then, while later actions still wait for peers, instead of at the
    end."""

    @property
    def reduces(self) -> bool:
        return self.op in REDUCING_OPS

    @property
    def recv_seq(self) -> Optional[int]:
        return self.inputs[0][1] if self.inputs else None


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
    leftover: Tuple[Tuple[int, int], ...] = ()
    """Half-open element ranges no final action writes: the device's own data or a value it
    computed and then only sent on (copied to an out-of-place output; see ``Action.copy_out``)."""
    untouched: Tuple[Tuple[int, int], ...] = ()
    """The part of ``leftover`` no action's ``copy_out`` covers (copied out at the end)."""
    schedule: Optional[Schedule] = dataclasses.field(default=None, compare=False, repr=False)
    """The schedule this program was compiled from (what a trace is compared with)."""


def _ranges(step: Step) -> Tuple[List[Tuple[int, int]], List[Tuple[int, int]]]:
    """(reads, writes) of a step on the local buffer, as half-open element ranges. A sending
    step reads its range after any write it makes (``recv_send`` forwards what it received)."""
    span = (step.offset, step.offset + step.count)
    if step.op == "send":
        return [span], []
    if step.op == "recv":
        return [], [span]
    if step.op == "recv_send":
        return [span], [span]
    if step.op in REDUCING_OPS:
        return [span], [span]
    if step.op == "copy":
        return [(step.src_offset, step.src_offset + step.count)], [span]
    raise ScheduleError(f"unknown step op {step.op!r}")


def _overlap(a: List[Tuple[int, int]], b: List[Tuple[int, int]]) -> bool:
    return any(x0 < y1 and y0 < x1 for x0, x1 in a for y0, y1 in b if x1 > x0 and y1 > y0)


def compile_program(schedule: Schedule, device: int, rank_of: Mapping[int, int], fuse_inputs: int = 1) -> RankProgram:
    """The :class:`RankProgram` of ``device`` (a schedule device id); ``rank_of`` maps schedule
    devices to the ranks the transport addresses.

    ``fuse_inputs`` > 1 fuses a chain of reductions of one range from different peers (a tree
    node folding in its children, Blink §4) into one action combining up to that many received
    chunks with the local value in one pass, as NCCL's and Blink's kernels do: the same order
    (own value, then the children in program order), so the same bits, and one pass over memory
    instead of one per child."""
    steps = schedule.program(device)
    me = rank_of[device]
    footprints = [_ranges(s) for s in steps]
    # Steps are found through the blocks of ``block`` elements they touch, so finding hazards
    # costs about (steps x steps-per-block) instead of steps squared; a 256 MiB buffer in 4 KiB
    # chunks has 65536 steps per phase.
    block = max(1, schedule.chunk_elems, max((s.count for s in steps), default=1))
    by_block: Dict[int, List[int]] = {}
    blocks_of: List[List[int]] = []
    for i, (reads, writes) in enumerate(footprints):
        blocks = sorted({b for lo, hi in reads + writes if hi > lo for b in range(lo // block, (hi - 1) // block + 1)})
        blocks_of.append(blocks)
        for b in blocks:
            by_block.setdefault(b, []).append(i)
    deps: List[set] = []
    releases: List[set] = []
    for i, s in enumerate(steps):
        reads, writes = footprints[i]
        mine, released = set(s.deps), set()
        for j in {j for b in blocks_of[i] for j in by_block[b] if j < i}:
            r, w = footprints[j]
            if _overlap(writes, r) or _overlap(writes, w) or _overlap(reads, w):
                mine.add(j)
            if steps[j].op in SENDING_OPS and _overlap(writes, [(steps[j].offset, steps[j].offset + steps[j].count)]):
                released.add(j)
        deps.append(mine)
        releases.append(released)
    later = [_later_touching(i, footprints, blocks_of, by_block) for i in range(len(steps))]
    # Transfers are numbered per (peer, channel) in program order, before any fusion.
    recv_seq: Dict[Pair, int] = {}
    send_seq: Dict[Pair, int] = {}
    numbers: List[Tuple[Optional[Tuple[int, int]], Optional[Tuple[int, int]]]] = []
    for i, s in enumerate(steps):
        rin = sout = None
        if s.op in RECEIVING_OPS:
            key = (rank_of[s.peer], s.channel)
            rin = (key[0], recv_seq.get(key, 0))
            recv_seq[key] = rin[1] + 1
        dst = s.destination
        if dst is not None:
            key = (rank_of[dst], s.channel)
            if key[0] == me:
                raise ScheduleError(f"device {device} step {i} sends to itself")
            sout = (key[0], send_seq.get(key, 0))
            send_seq[key] = sout[1] + 1
        numbers.append((rin, sout))
    groups = _fuse(steps, deps, later, fuse_inputs, _sent_rounds(schedule, device, steps) if fuse_inputs > 1 else [])
    action_of = {}
    for a, group in enumerate(groups):
        for i in group:
            action_of[i] = a
    actions = []
    for a, group in enumerate(groups):
        last = steps[group[-1]]
        first = steps[group[0]]
        members = set(group)
        sout = numbers[group[-1]][1]
        final = later[group[-1]] is None and last.op in ("recv", "recv_reduce") and last.count > 0
        inputs = tuple(numbers[i][0] for i in group if numbers[i][0] is not None)
        actions.append(Action(
            index=a, op=last.op, offset=first.offset, count=first.count, channel=first.channel,
            deps=tuple(sorted({action_of[d] for i in group for d in deps[i] if d not in members})),
            inputs=inputs, in_keys=tuple((src, first.channel) for src, _ in inputs),
            send_to=sout[0] if sout else None, send_seq=sout[1] if sout else None,
            send_key=(sout[0], first.channel) if sout else None, src_offset=first.src_offset,
            releases=tuple(sorted({action_of[j] for i in group for j in releases[i] if j not in members})),
            final=final, steps=tuple(group)))
    cross = [False] * len(actions)
    dependents: List[List[int]] = [[] for _ in actions]
    for a in actions:
        for d in a.deps:
            dependents[d].append(a.index)
            if actions[d].channel != a.channel:
                cross[d] = True
    slot = max((s.count for _, prog in schedule.programs for s in prog if s.destination is not None), default=0)
    written = sorted((a.offset, a.offset + a.count) for a in actions if a.final)
    leftover = _complement(written, 0, schedule.nelems)
    early = _copy_out(actions, groups, footprints, later, leftover)
    actions = [dataclasses.replace(a, copy_out=tuple(early[a.index])) if early[a.index] else a for a in actions]
    copied = sorted(span for spans in early for span in spans)
    return RankProgram(rank=me, nelems=schedule.nelems, nchannels=max(1, schedule.nchannels), actions=tuple(actions),
                       sends=send_seq, recvs=recv_seq, slot_elems=slot, cross_stream_deps=tuple(cross),
                       dependents=tuple(tuple(x) for x in dependents),
                       leftover=tuple(leftover),
                       untouched=tuple(span for lo, hi in leftover for span in _complement(copied, lo, hi)),
                       schedule=schedule)


def _copy_out(actions, groups, footprints, later, leftover: List[Tuple[int, int]]) -> List[List[Tuple[int, int]]]:
    """``[a]``: the parts of ``leftover`` (sorted, disjoint) that action ``a`` touches last, i.e.
    whose value is final once it ran. Only an action whose last step nothing later touches at
    all qualifies (an element it shares with a later step is not final there); every earlier
    write of those elements is a hazard dependency of that step, so it ran before. Two
    qualifying actions never touch the same element (the first would have the second later)."""
    starts = [lo for lo, _ in leftover]
    out: List[List[Tuple[int, int]]] = [[] for _ in actions]
    for a, group in zip(actions, groups):
        if later[group[-1]] is not None or a.final:
            continue
        spans = sorted({span for i in group for span in footprints[i][0] + footprints[i][1] if span[1] > span[0]})
        for lo, hi in _merge(spans):
            at = max(0, bisect.bisect_right(starts, lo) - 1)
            while at < len(leftover) and leftover[at][0] < hi:
                a_lo, a_hi = max(lo, leftover[at][0]), min(hi, leftover[at][1])
                if a_lo < a_hi:
                    out[a.index].append((a_lo, a_hi))
                at += 1
    return out


def _merge(spans: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Sorted spans, overlapping or touching ones joined."""
    out: List[Tuple[int, int]] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _complement(spans: List[Tuple[int, int]], lo: int, hi: int) -> List[Tuple[int, int]]:
    """The parts of ``[lo, hi)`` no span (sorted, disjoint: final actions' ranges never
    overlap, nor do ``copy_out`` ranges) covers."""
    out, at = [], lo
    for a, b in spans[max(0, bisect.bisect_right(spans, (lo, lo)) - 1):]:
        if a >= hi:
            break
        if b <= at:
            continue
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < hi:
        out.append((at, hi))
    return out


def _later_touching(i: int, footprints, blocks_of, by_block) -> Optional[int]:
    """The first step after ``i`` that reads or writes any element ``i`` reads or writes."""
    mine = footprints[i][0] + footprints[i][1]
    best = None
    for b in blocks_of[i]:
        steps = by_block[b]  # ascending
        for at in range(bisect.bisect_right(steps, i), len(steps)):
            j = steps[at]
            if best is not None and j >= best:
                break
            if _overlap(mine, footprints[j][0] + footprints[j][1]):
                best = j
                break
    return best


def _sent_rounds(schedule: Schedule, device: int, steps) -> List[int]:
    """``[i]``: the round of the send that step ``i``'s receive matches (FIFO per peer and channel)."""
    queues: Dict[Tuple[int, int], List[int]] = {}
    for sender, program in schedule.programs:
        for s in program:
            if s.destination == device:
                queues.setdefault((sender, s.channel), []).append(s.round)
    taken: Dict[Tuple[int, int], int] = {}
    out = []
    for s in steps:
        if s.op in RECEIVING_OPS:
            key = (s.peer, s.channel)
            out.append(queues[key][taken.get(key, 0)])
            taken[key] = taken.get(key, 0) + 1
        else:
            out.append(-1)
    return out


def _fuse(steps, deps, later, fuse_inputs: int, sent_rounds: List[int]) -> List[List[int]]:
    """Steps grouped into actions, in program order of each group's first step. A group is a
    ``recv_reduce`` followed by the next steps touching its range while each is a reduction of
    exactly that range, on its channel, from another peer, depending on nothing after the
    group's start but the group (so issuing the group where it starts cannot wait on a local
    step that waits on the group), and receiving what was sent in a round before the group's
    first step (a fused action holds back its first input's release until its last input is
    there: that input must not depend, through other ranks, on the release; what was sent
    before the round of the group's start cannot); a ``recv_reduce_send`` ends it."""
    grouped: set = set()
    groups = []
    for i, s in enumerate(steps):
        if i in grouped:
            continue
        group = [i]
        if s.op == "recv_reduce" and fuse_inputs > 1:
            peers = {s.peer}
            j = later[i]
            while j is not None and len(group) < fuse_inputs:
                t = steps[j]
                if (t.op not in REDUCING_OPS or (t.offset, t.count, t.channel) != (s.offset, s.count, s.channel)
                        or t.peer in peers or any(d >= i and d not in group for d in deps[j])
                        or sent_rounds[j] >= s.round):
                    break
                group.append(j)
                peers.add(t.peer)
                if t.op == "recv_reduce_send":
                    break
                j = later[j]
        grouped.update(group)
        groups.append(group)
    return groups


