"""NCCL's algorithms lowered to the same schedule IR and run in the same simulator as blinkflow.

* Ring (NCCL's only intra-node algorithm): the buffer is split evenly over the rings
  (:mod:`.rings`). Broadcast is a pipelined chain from the root along the ring; reduce the
  chain into the root; all-gather and reduce-scatter pass every shard once around the ring;
  all-reduce is reduce-scatter then all-gather (shard ``j`` is reduced along the ring into the
  ring's ``j``-th device, then passed on around the ring) — 2(n−1) steps, ``2(n−1)/n`` of the
  buffer over every ring link.
* Double binary tree (NCCL ≥ 2.4, across nodes): two binary trees over the hosts, the second the
  mirror image (or, for an odd count, the shift) of the first so a host that is inner in one is
  a leaf in the other, each carrying
  half of the buffer; inside a host a chain of its GPUs hangs off the tree's head GPU. All-reduce
  reduces up each tree and broadcasts back down it (Sanders, Speck & Träff 2009; NCCL's
  ``ncclGetDtree``).

Each job is one tree-shaped pipeline on its own channel, lowered with the same pipeline code as
blinkflow's plans, so the comparison measures the algorithms, not two simulators.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..schedule.builder import ScheduleBuilder
from ..schedule.emit import TreeShape, emit_broadcast, emit_reduce
from ..planner.plan import split_counts
from ..schedule.ir import Schedule
from ..topology.model import Topology
from .chunking import STEP_BUDGET, Tuning, miad
from .engine import SimResult
from .rings import hamiltonian_path, multi_host_rings, nic_gpus, nvlink_rings, nvlink_units
from .routes import Router

Edges = Tuple[Tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class Job:
    """One tree pipeline: reduce ``[range]`` up ``reduce`` into its root and/or broadcast it
    down ``bcast``. ``owner`` names the shard an all-gather / reduce-scatter job serves."""

    fraction: float
    reduce: Optional[Tuple[int, Edges]] = None
    bcast: Optional[Tuple[int, Edges]] = None
    fabric: str = "main"
    owner: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Baseline:
    """An NCCL algorithm on a device set: its jobs, ready to lower at any size."""

    name: str
    collective: str
    devices: Tuple[int, ...]
    jobs: Tuple[Job, ...]
    root: Optional[int] = None

    def lower(self, nelems: int, chunk_elems: int) -> Schedule:
        return lower_jobs(self, nelems, chunk_elems)

    def largest_job(self, nelems: int) -> int:
        if self.collective in ("allgather", "reducescatter"):
            nelems = -(-nelems // len(self.devices))
        return max(split_counts([j.fraction for j in self.jobs], nelems)) if self.jobs else nelems


def _path(order: Sequence[int]) -> Edges:
    return tuple(zip(order[:-1], order[1:]))


def _rotate(ring: Sequence[int], start: int) -> List[int]:
    i = list(ring).index(start)
    return list(ring[i:]) + list(ring[:i])


def ring_jobs(collective: str, rings: Sequence[Sequence[int]], root: Optional[int], fabric: str) -> List[Job]:
    """The pipelines of NCCL's ring algorithms (see the module docstring)."""
    jobs: List[Job] = []
    share = 1.0 / len(rings)
    for ring in rings:
        n = len(ring)
        if collective == "broadcast":
            order = _rotate(ring, root)
            jobs.append(Job(share, bcast=(root, _path(order)), fabric=fabric))
        elif collective == "reduce":
            order = _rotate(ring, root)  # data flows along the ring into the root:
            jobs.append(Job(share, reduce=(root, _path([root] + order[1:][::-1])), fabric=fabric))
        else:
            for j in range(n):
                owner = ring[j]
                order = _rotate(ring, owner)
                down = (owner, _path(order))                        # owner -> next -> ... around
                up = (owner, _path([owner] + order[1:][::-1]))      # ... -> prev -> owner
                if collective == "allgather":
                    jobs.append(Job(share, bcast=down, fabric=fabric, owner=owner))
                elif collective == "reducescatter":
                    jobs.append(Job(share, reduce=up, fabric=fabric, owner=owner))
                else:
                    jobs.append(Job(share / n, reduce=up, bcast=down, fabric=fabric))
    return jobs


def nccl_ring(topology: Topology, devices: Sequence[int], collective: str, root: Optional[int] = None) -> Baseline:
    """NCCL's rings: NVLink (or NVSwitch) rings when a Hamiltonian cycle exists, else one ring over
    PCIe / the CPU interconnect ("nccl-ring-pcie"), or shared memory between CPU ranks
    ("nccl-ring-shm"); across hosts one ring per NIC."""
    devices = tuple(devices)
    if collective in ("broadcast", "reduce") and root is None:
        root = devices[0]
    hosts = {topology.node(d).host for d in devices}
    if len(hosts) > 1:
        rings, fabric, name = multi_host_rings(topology, devices), "main", "nccl-ring"
    else:
        rings, fabric, name = nvlink_rings(topology, devices), "main", "nccl-ring"
        if not rings:
            ring = sorted(devices)
            shm = all(getattr(topology.link(a, b), "kind", None) == "shm" for a, b in zip(ring, ring[1:] + ring[:1]))
            rings, fabric, name = [ring], "pcie", ("nccl-ring-shm" if shm else "nccl-ring-pcie")
    if len(devices) == 1:
        return Baseline(name, collective, devices, (), root)
    return Baseline(name, collective, devices, tuple(ring_jobs(collective, rings, root, fabric)), root)


def _binary_tree(n: int, second: bool) -> Tuple[List[Tuple[int, int]], int]:
    """Parent -> child pairs and root of a balanced in-order binary tree over 0..n-1; the second
    tree is its mirror image (n even) or its shift by one (n odd), NCCL's rule for making the
    inner nodes of one tree the leaves of the other."""
    edges: List[Tuple[int, int]] = []

    def build(lo: int, hi: int) -> Optional[int]:
        if lo > hi:
            return None
        mid = (lo + hi) // 2
        for child in (build(lo, mid - 1), build(mid + 1, hi)):
            if child is not None:
                edges.append((mid, child))
        return mid

    root = build(0, n - 1)
    if not second:
        return edges, root
    relabel = (lambda i: n - 1 - i) if n % 2 == 0 else (lambda i: (i + 1) % n)
    return [(relabel(a), relabel(b)) for a, b in edges], relabel(root)


def nccl_double_tree(topology: Topology, devices: Sequence[int]) -> Baseline:
    """NCCL's double binary tree all-reduce across hosts (two trees, half the buffer each)."""
    hosts: Dict[str, List[int]] = {}
    for d in devices:
        hosts.setdefault(topology.node(d).host, []).append(d)
    names = list(hosts)
    if len(names) < 2:
        raise PlanError("the double binary tree runs across hosts; these devices are on one host")
    jobs = []
    for t, second in enumerate((False, True)):
        chains = []
        for h in names:
            devs = sorted(hosts[h])
            nics = nic_gpus(topology, h, devs)
            head = nics[t % len(nics)][0] if nics else devs[0]
            units = nvlink_units(topology, devs)
            chains.append(hamiltonian_path(units, devs, head) or [head] + [d for d in devs if d != head])
        host_edges, host_root = _binary_tree(len(names), second)
        edges = [e for chain in chains for e in _path(chain)]
        edges += [(chains[a][0], chains[b][0]) for a, b in host_edges]
        root = chains[host_root][0]
        jobs.append(Job(0.5, reduce=(root, tuple(edges)), bcast=(root, tuple(edges))))
    return Baseline("nccl-tree", "allreduce", tuple(devices), tuple(jobs))


def lower_jobs(b: Baseline, nelems: int, chunk_elems: int) -> Schedule:
    """The schedule of a baseline: each job's range pipelined on its own channel."""
    builder = ScheduleBuilder(b.collective, b.devices, nelems)
    shards: Tuple[Tuple[int, int, int], ...] = ()
    if b.collective in ("allgather", "reducescatter"):
        counts = split_counts([1.0] * len(b.devices), nelems)
        offsets = list(itertools.accumulate([0] + counts[:-1]))
        shards = tuple(zip(b.devices, offsets, counts))
        ranges: Dict[int, Tuple[int, int]] = {}
        for device, off, cnt in shards:
            mine = [i for i, j in enumerate(b.jobs) if j.owner == device]
            if not mine:
                continue
            sub = split_counts([b.jobs[i].fraction for i in mine], cnt)
            for i, o, c in zip(mine, itertools.accumulate([off] + sub[:-1]), sub):
                ranges[i] = (o, c)
        spans = [ranges.get(i, (0, 0)) for i in range(len(b.jobs))]
    else:
        counts = split_counts([j.fraction for j in b.jobs], nelems) if b.jobs else []
        spans = list(zip(itertools.accumulate([0] + counts[:-1]), counts))
    for channel, (job, (off, cnt)) in enumerate(zip(b.jobs, spans)):
        if cnt <= 0:
            continue
        if job.reduce is not None:
            emit_reduce(builder, TreeShape(job.reduce[0], job.reduce[1], b.devices), off, cnt, chunk_elems, channel)
        if job.bcast is not None:
            emit_broadcast(builder, TreeShape(job.bcast[0], job.bcast[1], b.devices), off, cnt, chunk_elems, channel)
    return builder.build(chunk_elems, root=b.root, shards=shards, fabrics=tuple(j.fabric for j in b.jobs))


def simulate_baseline(b: Baseline, topology: Topology, size_bytes: int, elem_bytes: int = 4,
                      chunk_elems: Optional[int] = None, step_budget: int = STEP_BUDGET, **options) -> Tuning:
    """Simulate a baseline with MIAD-tuned chunks (as NCCL tunes its own chunking)."""
    from .api import simulate
    nelems = max(0, size_bytes // elem_bytes)
    router = Router(topology, None, options.pop("latency_us", None))
    lowered = {}  # the one-chunk schedule below, if MIAD asks for that chunk (it does at scale)

    def run(chunk: int) -> SimResult:
        schedule = lowered.pop(chunk, None) or b.lower(nelems, chunk)
        return simulate(schedule, topology, elem_bytes=elem_bytes, router=router, **options)

    if chunk_elems is not None:
        r = run(chunk_elems)
        return Tuning(chunk_elems, r, ((chunk_elems, r.seconds),))
    largest = b.largest_job(nelems)
    steps = 1
    if nelems:
        lowered[max(1, largest)] = one_chunk = b.lower(nelems, max(1, largest))
        steps = sum(len(p) for _, p in one_chunk.programs)
    return miad(run, largest, elem_bytes, steps_per_chunk=steps, step_budget=step_budget)


def best_baseline(topology: Topology, devices: Sequence[int], collective: str, size_bytes: int,
                  root: Optional[int] = None, elem_bytes: int = 4, simulate: Optional[Callable] = None,
                  **options) -> Tuple[Baseline, Tuning]:
    """What NCCL would run: rings; across hosts for all-reduce also the double binary tree,
    whichever simulates faster (NCCL picks by its own cost model). ``simulate(baseline, topology,
    size_bytes, elem_bytes, **options)`` returns ``(baseline, tuning)``; by default
    :func:`simulate_baseline` (``compare`` passes :func:`.extrapolate.simulate_at_scale`)."""
    simulate = simulate or _simulated
    candidates = [nccl_ring(topology, devices, collective, root)]
    if collective == "allreduce" and len({topology.node(d).host for d in devices}) > 1:
        candidates.append(nccl_double_tree(topology, devices))
    results = [simulate(b, topology, size_bytes, elem_bytes, **dict(options)) for b in candidates]
    return min(results, key=lambda bt: bt[1].result.seconds)


def _simulated(b: Baseline, topology: Topology, size_bytes: int, elem_bytes: int, **options) -> Tuple[Baseline, Tuning]:
    return b, simulate_baseline(b, topology, size_bytes, elem_bytes, **options)
