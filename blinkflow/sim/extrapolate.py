"""NCCL's ring across many identical hosts, too large to simulate step by step, read off the same
ring on fewer hosts.

A ring all-reduce over ``n`` ranks moves each of its ``n`` slices ``n − 1`` hops while reducing
and ``n − 1`` more while gathering: ``2n²`` steps per ring in the schedule IR, 8.4 million for
four rings over 1,024 GPUs — beyond what the event simulator runs in a minute or in memory. Over
identical hosts the ring repeats host after host, so with the slice (and its chunking) held
fixed every rank does the same work in lockstep and the time is affine in the ring's length:
``T(n) = a·(n − 1) + b``, Hockney's α-β form (1994), which NCCL's tuning model uses for rings
too. We simulate the same ring on the first ``H1`` and ``H2`` hosts with the full-size slice, fit
``a`` and ``b``, and read off ``T(n)``. At that size MIAD would not chunk a slice either: one
chunk per slice already exceeds any step budget, so the full-size tuning would stop at its first
probe. A test holds the prediction within 2% of the full simulation where both run.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence, Tuple

from ..planner.hosts import hosts_in_order, identical_hosts
from ..topology.model import Topology
from .baselines import Baseline, nccl_ring, simulate_baseline
from .chunking import STEP_BUDGET, Tuning
from .engine import SimResult

#: Rings whose one-chunk schedule has more steps than this are extrapolated (and more than the
#: caller's step budget, so the full-size tuning would have used one chunk per slice).
RING_STEP_LIMIT = 1_000_000
PROXY_HOSTS = (2, 4)


def one_chunk_steps(b: Baseline) -> int:
    """Steps of the baseline's schedule with one chunk per job: a tree of E edges and L leaves
    takes E + L steps to reduce up or to broadcast down."""
    total = 0
    for job in b.jobs:
        for tree in (job.reduce, job.bcast):
            if tree is not None:
                edges = tree[1]
                total += 2 * len(edges) + 1 - len({a for a, _ in edges})
    return total


def extrapolates(b: Baseline, topology: Topology, step_budget: int) -> bool:
    """Whether ``b`` is a ring over more identical hosts than the proxies, too large to simulate."""
    hosts = hosts_in_order(topology, b.devices)
    return (b.name == "nccl-ring" and b.collective == "allreduce"
            and len(hosts) > PROXY_HOSTS[-1] and one_chunk_steps(b) > max(RING_STEP_LIMIT, step_budget)
            and identical_hosts(topology, b.devices))


def simulate_at_scale(b: Baseline, topology: Topology, size_bytes: int, elem_bytes: int = 4,
                      **options) -> Tuple[Baseline, Tuning]:
    """:func:`.baselines.simulate_baseline`, or for a ring too large to simulate over identical
    hosts, :func:`extrapolated_ring` (its name then says so)."""
    if extrapolates(b, topology, options.get("step_budget", STEP_BUDGET)):
        return extrapolated_ring(b, topology, size_bytes, elem_bytes, **options)
    return b, simulate_baseline(b, topology, size_bytes, elem_bytes, **options)


def extrapolated_ring(b: Baseline, topology: Topology, size_bytes: int, elem_bytes: int = 4,
                      **options) -> Tuple[Baseline, Tuning]:
    """The ring's simulated time from the same ring on ``PROXY_HOSTS`` hosts (module docstring)."""
    nelems = max(0, size_bytes // elem_bytes)
    job = max(1, b.largest_job(nelems))
    chunk = min(job, options.pop("chunk_elems", None) or job)
    options.pop("step_budget", None)
    points = []
    for count in PROXY_HOSTS:
        small, ring = proxy_ring(b, topology, count)
        tuned = simulate_baseline(ring, small, job * len(ring.jobs) * elem_bytes, elem_bytes, chunk_elems=chunk, **options)
        points.append((len(ring.devices), tuned.result.seconds))
    (n1, t1), (n2, t2) = points
    slope = (t2 - t1) / (n2 - n1)
    seconds = t1 + slope * (len(b.devices) - n1)
    result = SimResult(collective=b.collective, seconds=seconds, size_bytes=nelems * elem_bytes, per_rank={},
                       link_utilisation={}, link_bytes={}, chunk_elems=chunk, nsteps=one_chunk_steps(b),
                       ndevices=len(b.devices))
    named = dataclasses.replace(b, name=f"{b.name} (extrapolated from {PROXY_HOSTS[0]} and {PROXY_HOSTS[1]} hosts)")
    return named, Tuning(chunk, result, ((chunk, seconds),))


def proxy_ring(b: Baseline, topology: Topology, count: int) -> Tuple[Topology, Baseline]:
    """The same ring on the first ``count`` hosts of the allocation."""
    hosts = hosts_in_order(topology, b.devices)
    devices: Sequence[int] = [d for devs in list(hosts.values())[:count] for d in devs]
    small = topology.subset(devices, where="ring extrapolation")
    return small, nccl_ring(small, devices, b.collective, b.root)
