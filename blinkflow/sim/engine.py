"""Discrete-event execution of a :class:`Schedule` in virtual time on a :class:`Topology`.

The model is the one chunk-level simulators of collectives use (e.g. the ASTRA-sim and
MSCCL-style analyses), kept deliberately small:

* a step starts when its ``deps`` have completed and, for a receive, its data has arrived
  (the dataflow order a stream-per-channel GPU executor follows);
* a transfer occupies every link of its route at once for ``bytes / bottleneck bandwidth``
  (cut-through), links serve transfers first come first served, and the data arrives after the
  sum of the hops' latencies on top of that;
* a reduction adds ``bytes / reduce_gbps`` before the step's result exists (fused with the
  transfer on a GPU, so it delays a chunk but does not share a resource).

A send completes when its data has left the links (the range may then be overwritten).
"""
from __future__ import annotations

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

_START, _XFER, _DONE, _ARRIVE = 0, 1, 2, 3


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
                 reduce_gbps: Optional[float] = None, copy_gbps: Optional[float] = None) -> SimResult:
    """Simulate ``schedule`` and return when every device finished and how busy each link was."""
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

    def satisfy(gid, t):
        if t > ready_at[gid]:
            ready_at[gid] = t
        remaining[gid] -= 1
        if remaining[gid] == 0:
            push(ready_at[gid], _START, gid)

    while heap:
        t, _, kind, gid = heapq.heappop(heap)
        device, st = flat[gid]
        if kind == _START:
            nbytes = st.count * elem_bytes
            if st.op in REDUCING_OPS:
                t += nbytes / rate(REDUCE_GBPS, reduce_gbps, device)
            elif st.op == "copy":
                t += nbytes / rate(COPY_GBPS, copy_gbps, device)
            push(t, _XFER if st.destination is not None else _DONE, gid)
        elif kind == _XFER:
            hops = router.hops(device, st.destination, schedule.fabric(st.channel))
            nbytes = st.count * elem_bytes
            bw = min(h[1] for h in hops) * 1e9
            start = max([t] + [free.get(h[0], 0.0) for h in hops])
            end = start + nbytes / bw
            for key, _, _ in hops:
                free[key] = end
                busy[key] = busy.get(key, 0.0) + (end - start)
                moved[key] = moved.get(key, 0.0) + nbytes
            push(end + sum(h[2] for h in hops), _ARRIVE, feeds[gid])
            push(end, _DONE, gid)
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
