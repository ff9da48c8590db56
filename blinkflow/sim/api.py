"""The simulator's entry points: run a schedule, or a plan at a byte size with tuned chunks."""
from __future__ import annotations

from typing import Optional

from ..schedule.lower import lower
from ..planner.plan import Plan, split_counts
from ..schedule.ir import Schedule
from ..topology.model import Topology
from .chunking import STEP_BUDGET, Tuning, miad
from .engine import CHUNK_OVERHEAD_US, SimResult, simulate_schedule
from .routes import Router


def simulate(schedule: Schedule, topology: Topology, plan: Optional[Plan] = None, elem_bytes: int = 4,
             reduce_gbps: Optional[float] = None, latency_us: Optional[dict] = None,
             chunk_overhead_us: float = CHUNK_OVERHEAD_US, router: Optional[Router] = None,
             edge_gbps: Optional[float] = None) -> SimResult:
    """Run ``schedule`` in virtual time on ``topology``.

    ``plan`` supplies the routes of edges between devices with no direct link (otherwise the
    fastest path through switches is used). ``latency_us`` overrides the per-kind default
    latencies (``{"nvlink": 1.0}``); a ``Link.latency_us`` in the topology overrides both.
    ``edge_gbps`` caps each tree edge's rate (an executor's bytes in flight per connection).
    """
    router = router or Router(topology, plan, latency_us)
    return simulate_schedule(schedule, topology, router, elem_bytes=elem_bytes, reduce_gbps=reduce_gbps,
                        chunk_overhead_us=chunk_overhead_us, edge_gbps=edge_gbps)


def largest_job(plan: Plan, nelems: int) -> int:
    """Elements of the largest single-tree range of ``plan`` for ``nelems`` (what chunking cuts)."""
    if plan.is_three_phase:
        return max(largest_job(p, nelems) for p in plan.intra)
    if not plan.trees:
        return nelems
    if plan.collective in ("allgather", "reducescatter"):
        nelems = -(-nelems // max(1, len(plan.devices)))
    return max(split_counts([t.fraction for t in plan.trees], nelems))


def simulate_plan(plan: Plan, topology: Topology, size_bytes: int, elem_bytes: int = 4,
                  chunk_elems: Optional[int] = None, step_budget: int = STEP_BUDGET, **options) -> Tuning:
    """Lower ``plan`` for ``size_bytes`` and simulate it; the chunk size is tuned by MIAD unless
    ``chunk_elems`` is given. Returns the chosen chunk, its result and every probe.

    >>> from blinkflow.planner import make_plan
    >>> from blinkflow.topology.presets import get_preset
    >>> topo = get_preset("dgx1-v100")
    >>> plan = make_plan(topo, "broadcast", [0, 1, 2, 5])     # no NVLink ring among these
    >>> plan.rate_gbps
    50.0
    >>> tuned = simulate_plan(plan, topo, 2**28)
    >>> 45 < tuned.result.algbw_gbps < 50                    # the rate, less pipeline fill
    True
    """
    nelems = max(0, size_bytes // elem_bytes)
    router = Router(topology, plan, options.pop("latency_us", None))
    lowered = {}  # the one-chunk schedule below, if MIAD asks for that chunk (it does at scale)

    def run(chunk: int) -> SimResult:
        schedule = lowered.pop(chunk, None) or lower(plan, nelems, chunk)
        return simulate(schedule, topology, elem_bytes=elem_bytes, router=router, **options)

    if chunk_elems is not None:
        r = run(chunk_elems)
        return Tuning(chunk_elems, r, ((chunk_elems, r.seconds),))
    largest = largest_job(plan, nelems)
    one_chunk = lower(plan, nelems, max(1, largest)) if nelems else None
    steps = sum(len(p) for _, p in one_chunk.programs) if one_chunk else 1
    if one_chunk is not None:
        lowered[max(1, largest)] = one_chunk
    return miad(run, largest, elem_bytes, steps_per_chunk=steps, step_budget=step_budget)
