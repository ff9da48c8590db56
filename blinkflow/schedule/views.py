"""Views of a lowered all-reduce schedule for a fast path that runs it differently but to the
same bits: the one-hop stars of a host, and the part of the schedule that crosses hosts.

The CPU backend's single-copy all-reduce reads its peers' tensors in place instead of running
the intra-host steps chunk by chunk (see ``backends/cpu/single_copy.py``). It may do so only
where the schedule's trees inside a host are one-hop stars (a ForestColl reduce-scatter +
all-gather on a fully connected host, Blink's phase 1 and 3): then each range is combined at its
star's root, own value first and the children in the order of the root's ``recv_reduce`` steps,
and copied to every child, which is what the fast path does. Between hosts it runs the
schedule's own cross-host steps (phase 2) through the runner. Both views are read from the one
schedule the simulator simulates and the checker proves.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .ir import Schedule, Step


@dataclasses.dataclass(frozen=True)
class Star:
    """Elements ``[offset, offset + count)`` are combined at ``root`` from ``kids`` (that order,
    after the root's own value) and copied back to every kid."""

    channel: int
    root: int
    kids: Tuple[int, ...]
    offset: int
    count: int


def one_hop_stars(schedule: Schedule, host_devices: Sequence[int]) -> Optional[List[Star]]:
    """The stars of ``host_devices``' part of an all-reduce schedule, in channel order, or None
    when that part is not made of one-hop stars (deeper trees, a reduction order that changes
    from chunk to chunk, a range that is not contiguous)."""
    on_host = set(host_devices)
    by_channel: Dict[int, Dict[int, List[Step]]] = {}
    for device, steps in schedule.programs:
        if device not in on_host:
            continue
        for step in steps:
            if step.op == "copy":
                return None
            if not {p for p in (step.peer, step.send_to) if p is not None} <= on_host:
                continue  # a cross-host step (phase 2)
            by_channel.setdefault(step.channel, {}).setdefault(device, []).append(step)
    stars = []
    for channel in sorted(by_channel):
        star = _star(channel, by_channel[channel])
        if star is None:
            return None
        stars.append(star)
    return stars


def _star(channel: int, programs: Dict[int, List[Step]]) -> Optional[Star]:
    roots = [d for d, steps in programs.items() if any(s.op == "recv_reduce" for s in steps)]
    if len(roots) != 1:
        return None
    root = roots[0]
    chunks: Dict[Tuple[int, int], List[int]] = {}
    for s in programs[root]:
        if s.op == "recv_reduce":
            chunks.setdefault((s.offset, s.count), []).append(s.peer)
        elif s.op != "send":
            return None
    orders = {tuple(kids) for kids in chunks.values()}
    if len(orders) != 1:
        return None
    kids = next(iter(orders))
    if set(kids) != set(programs) - {root} or len(set(kids)) != len(kids):
        return None
    for kid in kids:
        for s in programs[kid]:
            if s.op not in ("send", "recv") or s.peer != root:
                return None  # a kid that forwards or reduces: not one hop
    spans = sorted(chunks)
    at = spans[0][0]
    for offset, count in spans:
        if offset != at:
            return None
        at += count
    return Star(channel, root, kids, spans[0][0], at - spans[0][0])


def restrict(schedule: Schedule, keep: Callable[[int, Step], bool]) -> Schedule:
    """The steps ``keep(device, step)`` accepts, with their deps renumbered (deps on dropped
    steps are dropped: the caller orders what it dropped itself). Valid when every kept send's
    receive is kept too, as for :func:`cross_host_part`."""
    programs = []
    for device, steps in schedule.programs:
        index: Dict[int, int] = {}
        kept = []
        for i, step in enumerate(steps):
            if keep(device, step):
                index[i] = len(kept)
                kept.append(dataclasses.replace(step, deps=tuple(index[d] for d in step.deps if d in index)))
        programs.append((device, tuple(kept)))
    return dataclasses.replace(schedule, programs=tuple(programs))


def cross_host_part(schedule: Schedule, host_of: Callable[[int], object]) -> Schedule:
    """The steps whose transfer crosses hosts: phase 2 of a three-phase all-reduce."""
    def crosses(device: int, step: Step) -> bool:
        return any(p is not None and host_of(p) != host_of(device) for p in (step.peer, step.send_to))

    return restrict(schedule, crosses)
