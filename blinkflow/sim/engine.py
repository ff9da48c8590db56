"""Discrete-event execution of a :class:`Schedule` in virtual time on a :class:`Topology`.

The model is the one chunk-level simulators of collectives use (e.g. the ASTRA-sim and
MSCCL-style analyses), kept deliberately small:

* a step starts when its ``deps`` have completed and, for a receive, its data has arrived
  (the dataflow order a stream-per-channel GPU executor follows); a tree edge carries one chunk
  at a time, in order, so trees sharing a link interleave chunk by chunk as concurrent streams
  do instead of one tree's whole range flooding it;
* a transfer occupies each link of its route for ``bytes / link bandwidth``, links serve
  transfers first come first served; a hop starts as soon as its link is free and the previous
  hop has started (cut-through), and finishes no earlier than the previous hop (a switch buffers
  a chunk whose next link is busy, so a busy port does not leave the upstream link idle); the
  data arrives after the last hop plus the sum of the hops' latencies;
* a reduction adds ``bytes / reduce_gbps`` before the step's result exists (fused with the
  transfer on a GPU, so it delays a chunk but does not share a resource).

A send completes when its data has left the sender's first link (the range may then be
overwritten).
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
from typing import Dict, List, Optional, Tuple

from ..errors import ScheduleError
from ..planner.schedule import RECEIVING_OPS, REDUCING_OPS, Schedule
from ..topology.model import Topology
from .routes import Router

#: Reduction throughput per device kind, GB/s of each operand: a GPU's fused reduce kernel
#: streams at a fraction of HBM bandwidth (reads two operands, writes one); a CPU core with numpy
#: adds a few GB/s.
REDUCE_GBPS = {"gpu": 300.0, "cpu": 8.0}
COPY_GBPS = {"gpu": 600.0, "cpu": 10.0}

#: Per chunk and tree edge, the time a channel's stream spends between two chunks (flag
#: polling, kernel step synchronisation; NCCL's per-step cost is a few µs). It is what makes
#: tiny chunks slow and gives Blink's MIAD chunk tuning something to find.
CHUNK_OVERHEAD_US = 2.0

_START, _XFER, _DONE, _ARRIVE, _EDGE = 0, 1, 2, 3, 4


@dataclasses.dataclass(frozen=True)
class SimResult:
    """What one simulated collective call did."""

    collective: str
    seconds: float
    """Time until the last device finished its last step."""
    size_bytes: int
    per_rank: Dict[int, float]
    """Device -> time its last step completed."""
    link_utilisation: Dict[Tuple, float]
    """Link (src, dst) -> fraction of ``seconds`` it was busy (links that carried data)."""
    link_bytes: Dict[Tuple, float]
    chunk_elems: int
    nsteps: int
    ndevices: int

    @property
    def algbw_gbps(self) -> float:
        """Buffer bytes over time (nccl-tests' algorithm bandwidth), GB/s."""
        return self.size_bytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    @property
    def busbw_gbps(self) -> float:
        """Algorithm bandwidth times nccl-tests' bus factor, comparable across collectives."""
        return self.algbw_gbps * bus_factor(self.collective, self.ndevices)


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests ``PERFORMANCE.md``: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n,
    broadcast and reduce 1."""
    if n <= 1:
        return 1.0
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


def run_schedule(schedule: Schedule, topology: Topology, router: Optional[Router] = None, elem_bytes: int = 4,
                 reduce_gbps: Optional[float] = None, copy_gbps: Optional[float] = None,
                 chunk_overhead_us: float = CHUNK_OVERHEAD_US) -> SimResult:
    """Simulate ``schedule`` and return when every device finished and how busy each link was.

    ``reduce_gbps`` / ``copy_gbps`` override the per-device-kind rates; ``chunk_overhead_us`` is
    the per-chunk cost of a tree edge's stream (see :data:`CHUNK_OVERHEAD_US`).
    """
    overhead = chunk_overhead_us * 1e-6
    router = router or Router(topology)
    kinds = {n.id: n.kind for n in topology.nodes}
    # Flatten the programs: global step ids, dependents, the receive each send feeds.
    flat: List[Tuple[int, object]] = []
    base: Dict[int, int] = {}
    for device, steps in schedule.programs:
        base[device] = len(flat)
        flat.extend((device, st) for st in steps)
    n = len(flat)
    remaining = [0] * n
    ready_at = [0.0] * n
    dependents: List[List[int]] = [[] for _ in range(n)]
    feeds = [-1] * n
    queues: Dict[Tuple[int, int, int], List[int]] = {}
    for gid, (device, st) in enumerate(flat):
        for d in st.deps:
            dependents[base[device] + d].append(gid)
        remaining[gid] = len(st.deps)
        if st.destination is not None:
            queues.setdefault((device, st.destination, st.channel), []).append(gid)
    taken: Dict[Tuple[int, int, int], int] = {}
    for gid, (device, st) in enumerate(flat):
        if st.op in RECEIVING_OPS:
            key = (st.peer, device, st.channel)
            k = taken.get(key, 0)
            taken[key] = k + 1
            feeds[queues[key][k]] = gid
            remaining[gid] += 1

    def rate(table, override, device):
        return (override or table.get(kinds.get(device), table["gpu"])) * 1e9

    free: Dict[Tuple, float] = {}
    edge_busy: set = set()
    edge_waiting: Dict[Tuple, collections.deque] = {}
    edge_index: Dict[Tuple, int] = {}
    edge_keys: List[Tuple] = []
    busy: Dict[Tuple, float] = {}
    moved: Dict[Tuple, float] = {}
    done = [0.0] * n
    heap: List[Tuple[float, int, int, int]] = [(0.0, gid, _START, gid) for gid in range(n) if remaining[gid] == 0]
    heapq.heapify(heap)
    seq = n

    def push(t, kind, gid):
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, gid))

    def transmit(gid, edge, t):
        device, st = flat[gid]
        hops = router.hops(device, st.destination, schedule.fabric(st.channel))
        nbytes = st.count * elem_bytes
        start, end, first_end = t, t, None
        for key, gbps, _ in hops:
            # Cut-through when the next link is free; otherwise the switch buffers the chunk
            # and the upstream link is released (no idle gaps behind a busy port).
            start = max(start, free.get(key, 0.0))
            took = nbytes / (gbps * 1e9)
            end = max(start + took, end)
            free[key] = end
            busy[key] = busy.get(key, 0.0) + took
            moved[key] = moved.get(key, 0.0) + nbytes
            if first_end is None:
                first_end = end
        edge_busy.add(edge)
        if edge not in edge_index:
            edge_index[edge] = len(edge_keys)
            edge_keys.append(edge)
        push(first_end + overhead, _EDGE, edge_index[edge])
        push(end + sum(h[2] for h in hops), _ARRIVE, feeds[gid])
        push(first_end, _DONE, gid)

    def satisfy(gid, t):
        if t > ready_at[gid]:
            ready_at[gid] = t
        remaining[gid] -= 1
        if remaining[gid] == 0:
            push(ready_at[gid], _START, gid)

    while heap:
        t, _, kind, gid = heapq.heappop(heap)
        if kind == _EDGE:
            edge = edge_keys[gid]
            queue = edge_waiting.get(edge)
            if queue:
                transmit(queue.popleft(), edge, t)
            else:
                edge_busy.discard(edge)
            continue
        device, st = flat[gid]
        if kind == _START:
            nbytes = st.count * elem_bytes
            if st.op in REDUCING_OPS:
                t += nbytes / rate(REDUCE_GBPS, reduce_gbps, device)
            elif st.op == "copy":
                t += nbytes / rate(COPY_GBPS, copy_gbps, device)
            push(t, _XFER if st.destination is not None else _DONE, gid)
        elif kind == _XFER:
            edge = (device, st.destination, st.channel)
            if edge in edge_busy:
                # One chunk at a time per tree edge (a channel's stream sends in order), so
                # trees sharing a link interleave their chunks instead of one flooding it.
                edge_waiting.setdefault(edge, collections.deque()).append(gid)
                continue
            transmit(gid, edge, t)
        elif kind == _DONE:
            done[gid] = t
            for x in dependents[gid]:
                satisfy(x, t)
        else:  # _ARRIVE at the receiving step
            satisfy(gid, t)
    stuck = [gid for gid in range(n) if remaining[gid] > 0]
    if stuck:
        device, st = flat[stuck[0]]
        raise ScheduleError(f"simulation deadlocked: device {device} step {st.op} never became ready")
    per_rank = {d: max((done[base[d] + i] for i in range(len(steps))), default=0.0) for d, steps in schedule.programs}
    seconds = max(per_rank.values(), default=0.0)
    util = {k: (v / seconds if seconds > 0 else 0.0) for k, v in busy.items()}
    return SimResult(collective=schedule.collective, seconds=seconds, size_bytes=schedule.nelems * elem_bytes,
                     per_rank=per_rank, link_utilisation=util, link_bytes=moved, chunk_elems=schedule.chunk_elems,
                     nsteps=n, ndevices=len(schedule.devices))
