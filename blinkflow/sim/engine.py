"""Discrete-event execution of a :class:`Schedule` in virtual time on a :class:`Topology`.

A chunk-level model, kept deliberately small:

* a step starts when its ``deps`` have completed and, for a receive, its data has arrived (the
  dataflow order a stream-per-channel GPU executor follows);
* a tree edge carries one chunk at a time, in order, and pays ``chunk_overhead_us`` between
  chunks (a stream's per-step synchronisation), which is what makes tiny chunks slow;
* a transfer occupies each link of its route for ``bytes / link bandwidth``. A link shared by
  several trees serves them in proportion to the bytes each must move over it (weighted fair
  queueing, least-served tree first) — the share the plan's rate assumes. A hop may start as
  soon as it can stream behind the previous one and never ends before it (cut-through; a switch
  buffers a chunk whose next port is busy, so the upstream link is not held). Data arrives after
  the last hop plus the hops' latencies;
* a reduction adds ``bytes / reduce_gbps`` before the step's result exists (fused with the
  transfer on a GPU: it delays a chunk but does not share a resource);
* ``edge_gbps`` (optional) caps what one tree edge (a (peer, channel) connection) moves: a chunk
  of ``b`` bytes leaves no sooner than ``b / edge_gbps`` after it started and arrives no sooner
  than that plus the route's latency, without holding the links longer (they serve other edges
  meanwhile). It models an executor whose blocks keep a bounded number of bytes in flight
  (Little's law: bytes in flight over the round's latency).

A send completes when its data has left the sender's first link (the range may then be
overwritten).
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
from typing import Dict, List, Optional, Tuple

from ..errors import ScheduleError
from ..schedule.ir import RECEIVING_OPS, REDUCING_OPS, Schedule
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

_START, _XFER, _DONE, _ARRIVE, _EDGE, _LINK, _HOP = 0, 1, 2, 3, 4, 5, 6
_MAX_HOPS = 64


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


def simulate_schedule(schedule: Schedule, topology: Topology, router: Optional[Router] = None, elem_bytes: int = 4,
                 reduce_gbps: Optional[float] = None, copy_gbps: Optional[float] = None,
                 chunk_overhead_us: float = CHUNK_OVERHEAD_US, edge_gbps: Optional[float] = None) -> SimResult:
    """Simulate ``schedule`` and return when every device finished and how busy each link was.

    ``reduce_gbps`` / ``copy_gbps`` override the per-device-kind rates; ``chunk_overhead_us`` is
    the per-chunk cost of a tree edge's stream (see :data:`CHUNK_OVERHEAD_US`); ``edge_gbps``
    caps one tree edge's rate (None: only the links do).
    """
    return _Run(schedule, topology, router or Router(topology), elem_bytes, reduce_gbps, copy_gbps,
                chunk_overhead_us * 1e-6, edge_gbps).result()


class _Run:
    """One simulation. Events: a step may start, a send asks for its tree edge, a hop asks for
    its link, a link or a tree edge becomes free, data arrives, a step completes.

    Everything a step needs while it runs (its bytes, each hop's link and transfer time, its
    route's latency, its compute delay) is worked out once up front, and links, shares and tree
    edges are numbered, so the event loop does list indexing instead of hashing tuples: a
    three-phase plan over 1,024 GPUs has ~600,000 steps.
    """

    def __init__(self, schedule, topology, router, elem_bytes, reduce_gbps, copy_gbps, overhead, edge_gbps=None):
        self.schedule, self.router, self.elem_bytes, self.overhead = schedule, router, elem_bytes, overhead
        self.edge_rate = edge_gbps * 1e9 if edge_gbps else 0.0
        kinds = {n.id: n.kind for n in topology.nodes}
        reduce_rate = {d: (reduce_gbps or REDUCE_GBPS.get(kinds.get(d), REDUCE_GBPS["gpu"])) * 1e9
                       for d in schedule.devices}
        copy_rate = {d: (copy_gbps or COPY_GBPS.get(kinds.get(d), COPY_GBPS["gpu"])) * 1e9
                     for d in schedule.devices}
        self.flat: List[Tuple[int, object]] = []
        self.base: Dict[int, int] = {}
        for device, steps in schedule.programs:
            self.base[device] = len(self.flat)
            self.flat.extend((device, st) for st in steps)
        n = len(self.flat)
        self.remaining = [0] * n
        self.ready_at = [0.0] * n
        self.done = [0.0] * n
        self.dependents: List[List[int]] = [[] for _ in range(n)]
        self.feeds = [-1] * n
        self.nbytes = [0] * n
        self.delay: List[Optional[float]] = [None] * n  # compute time before the step's result exists
        self.sends = [False] * n
        self.edge = [-1] * n                  # tree edge (src, dst, channel) id of a send
        self.hop_link: List[tuple] = [()] * n   # per hop: link id
        self.hop_share: List[tuple] = [()] * n  # per hop: (link, channel) share id
        self.hop_took: List[tuple] = [()] * n   # per hop: seconds on its link
        self.latency = [0.0] * n              # the route's latency, paid on arrival
        self.link_keys: List[Tuple] = []
        link_id: Dict[Tuple, int] = {}
        edge_id: Dict[Tuple, int] = {}
        share_id: Dict[Tuple, int] = {}
        # Each channel's share of a link is proportional to the bytes it must move over it, so
        # every tree gets the rate its plan assumed (weighted fair queueing on first hops).
        self.demand: List[float] = []
        queues: Dict[Tuple[int, int, int], List[int]] = {}
        route: Dict[Tuple, tuple] = {}  # per tree edge: its hops' link and share ids, GB/s, latency
        took_of: Dict[Tuple, tuple] = {}
        for gid, (device, st) in enumerate(self.flat):
            for d in st.deps:
                self.dependents[self.base[device] + d].append(gid)
            self.remaining[gid] = len(st.deps)
            nbytes = self.nbytes[gid] = st.count * elem_bytes
            if st.op in REDUCING_OPS:
                self.delay[gid] = st.count * elem_bytes / reduce_rate[device]
            elif st.op == "copy":
                self.delay[gid] = st.count * elem_bytes / copy_rate[device]
            if st.destination is None:
                continue
            self.sends[gid] = True
            edge = (device, st.destination, st.channel)
            queues.setdefault(edge, []).append(gid)
            if edge not in edge_id:
                edge_id[edge] = len(edge_id)
                route[edge] = self._route(edge, router.hops(device, st.destination, schedule.fabric(st.channel)),
                                          link_id, share_id)
            self.edge[gid] = edge_id[edge]
            links, shares, gbps, latency = route[edge]
            for share in shares:
                self.demand[share] = self.demand[share] + st.count * elem_bytes
            self.hop_link[gid] = links
            self.hop_share[gid] = shares
            took = (edge, nbytes)  # the chunks of one edge mostly have one size
            if took not in took_of:
                took_of[took] = tuple(nbytes / (g * 1e9) for g in gbps)
            self.hop_took[gid] = took_of[took]
            self.latency[gid] = latency
        taken: Dict[Tuple[int, int, int], int] = {}
        for gid, (device, st) in enumerate(self.flat):
            if st.op in RECEIVING_OPS:
                key = (st.peer, device, st.channel)
                k = taken.get(key, 0)
                taken[key] = k + 1
                self.feeds[queues[key][k]] = gid
                self.remaining[gid] += 1
        links = len(self.link_keys)
        self.hop_end = [0.0] * n
        self.paced = [0.0] * n  # the earliest a send may leave / arrive, by its edge's rate cap
        self.busy = [0.0] * links
        self.moved = [0.0] * links
        self.first_use: List[int] = []  # links in the order they first carried data
        self.sent = [0.0] * len(self.demand)
        self.link_busy = [False] * links
        self.link_queue: List[list] = [[] for _ in range(links)]
        self.edge_busy = [False] * len(edge_id)
        self.edge_waiting: List[collections.deque] = [collections.deque() for _ in range(len(edge_id))]
        self.heap = [(0.0, gid, _START, gid) for gid in range(n) if self.remaining[gid] == 0]
        heapq.heapify(self.heap)
        self.seq = n

    def _route(self, edge, hops, link_id, share_id):
        src, dst, channel = edge
        if len(hops) >= _MAX_HOPS:
            raise ScheduleError(f"route {src}->{dst} has {len(hops)} hops; at most {_MAX_HOPS - 1} are simulated")
        links, shares = [], []
        for link, _, _ in hops:
            if link not in link_id:
                link_id[link] = len(self.link_keys)
                self.link_keys.append(link)
            links.append(link_id[link])
            if (link, channel) not in share_id:
                share_id[(link, channel)] = len(self.demand)
                self.demand.append(0.0)
            shares.append(share_id[(link, channel)])
        return tuple(links), tuple(shares), tuple(gbps for _, gbps, _ in hops), sum(h[2] for h in hops)

    def push(self, t, kind, item):
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, item))

    def satisfy(self, gid, t):
        if t > self.ready_at[gid]:
            self.ready_at[gid] = t
        self.remaining[gid] -= 1
        if self.remaining[gid] == 0:
            self.push(self.ready_at[gid], _START, gid)

    def request(self, gid, hop, t):
        """Hop ``hop`` of send ``gid`` queues for its link, least-served channel first."""
        link = self.hop_link[gid][hop]
        share = self.hop_share[gid][hop]
        sent = self.sent[share] + self.nbytes[gid]
        self.sent[share] = sent
        heapq.heappush(self.link_queue[link], (sent / self.demand[share], self.seq, gid, hop))
        self.seq += 1
        if not self.link_busy[link]:
            self.dispatch(link, t)

    def dispatch(self, link, t):
        """The link is free at ``t``: send the waiting hop with the least-served channel."""
        queue = self.link_queue[link]
        if not queue:
            self.link_busy[link] = False
            return
        _, _, gid, hop = heapq.heappop(queue)
        took_all = self.hop_took[gid]
        took = took_all[hop]
        # Cut-through: a hop cannot finish before the hop feeding it.
        end = t + took
        if self.hop_end[gid] > end:
            end = self.hop_end[gid]
        self.hop_end[gid] = end
        if not self.moved[link] and not self.busy[link]:
            self.first_use.append(link)
        self.busy[link] += took
        self.moved[link] += self.nbytes[gid]
        self.link_busy[link] = True
        push = self.push
        push(end, _LINK, link)
        if hop == 0:
            if self.edge_rate:
                self.paced[gid] = t + self.nbytes[gid] / self.edge_rate
            left = end if end > self.paced[gid] else self.paced[gid]
            push(left, _DONE, gid)
            push(left + self.overhead, _EDGE, self.edge[gid])
        if hop + 1 < len(took_all):
            # The next link may start as soon as it can still stream at full speed behind this
            # one (a switch forwards while it receives, and buffers when the next port is busy).
            nxt = took_all[hop + 1]
            push(t if t > end - nxt else end - nxt, _HOP, gid * _MAX_HOPS + hop + 1)
        else:
            self.hop_end[gid] = 0.0
            arrive = end if end > self.paced[gid] else self.paced[gid]
            push(arrive + self.latency[gid], _ARRIVE, self.feeds[gid])

    def result(self) -> SimResult:
        flat, heap, heappop = self.flat, self.heap, heapq.heappop
        delay, sends, edge_of = self.delay, self.sends, self.edge
        edge_busy, edge_waiting = self.edge_busy, self.edge_waiting
        while heap:
            t, _, kind, item = heappop(heap)
            if kind == _LINK:
                self.dispatch(item, t)
            elif kind == _HOP:
                self.request(item // _MAX_HOPS, item % _MAX_HOPS, t)
            elif kind == _EDGE:
                waiting = edge_waiting[item]
                if waiting:
                    self.request(waiting.popleft(), 0, t)
                else:
                    edge_busy[item] = False
            elif kind == _START:
                if delay[item] is not None:
                    t += delay[item]
                self.push(t, _XFER if sends[item] else _DONE, item)
            elif kind == _XFER:
                edge = edge_of[item]
                if edge_busy[edge]:
                    # One chunk at a time per tree edge: a channel's stream sends in order.
                    edge_waiting[edge].append(item)
                else:
                    edge_busy[edge] = True
                    self.request(item, 0, t)
            elif kind == _DONE:
                self.done[item] = t
                for x in self.dependents[item]:
                    self.satisfy(x, t)
            else:  # _ARRIVE at the receiving step
                self.satisfy(item, t)
        stuck = [gid for gid, r in enumerate(self.remaining) if r > 0]
        if stuck:
            device, st = flat[stuck[0]]
            raise ScheduleError(f"simulation deadlocked: device {device} step {st.op} never became ready")
        sched = self.schedule
        per_rank = {d: max((self.done[self.base[d] + i] for i in range(len(steps))), default=0.0)
                    for d, steps in sched.programs}
        seconds = max(per_rank.values(), default=0.0)
        keys = self.link_keys
        util = {keys[i]: (self.busy[i] / seconds if seconds > 0 else 0.0) for i in self.first_use}
        moved = {keys[i]: self.moved[i] for i in self.first_use}
        return SimResult(collective=sched.collective, seconds=seconds, size_bytes=sched.nelems * self.elem_bytes,
                         per_rank=per_rank, link_utilisation=util, link_bytes=moved,
                         chunk_elems=sched.chunk_elems, nsteps=len(flat), ndevices=len(sched.devices))
