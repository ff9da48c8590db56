"""blinkflow's plan against NCCL's algorithm for one collective call (``blinkrun simulate``).

Both run through the same lowering and the same simulator with MIAD-tuned chunks; the baseline
is what NCCL would pick (:func:`.baselines.best_baseline`).
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

from ..errors import PlanError
from ..planner.plan import Plan
from ..topology.model import Topology
from .api import simulate_plan
from .baselines import best_baseline
from .chunking import STEP_BUDGET
from .engine import bus_factor
from .extrapolate import simulate_at_scale


@dataclasses.dataclass(frozen=True)
class Comparison:
    topology: str
    devices: Tuple[int, ...]
    collective: str
    size_bytes: int
    seconds: float
    baseline_name: str
    baseline_seconds: float
    rate_gbps: float
    """The plan's steady-state rate (link loads), GB/s of buffer."""
    latency_s: Optional[float]
    """The plan's fixed cost: its simulated time for the smallest buffer (one element per tree);
    None when not asked for (``compare(..., latency=False)``)."""
    plan_algorithm: str
    chunk_elems: int
    baseline_chunk_elems: int

    @property
    def algbw_gbps(self) -> float:
        return self.size_bytes / self.seconds / 1e9

    @property
    def baseline_algbw_gbps(self) -> float:
        return self.size_bytes / self.baseline_seconds / 1e9

    @property
    def speedup(self) -> float:
        return self.baseline_seconds / self.seconds

    def to_json(self) -> dict:
        """The ``blinkrun simulate --json`` object (``docs/planner.md``)."""
        factor = bus_factor(self.collective, len(self.devices))
        return {
            "topology": self.topology, "gpus": list(self.devices), "collective": self.collective,
            "size_bytes": self.size_bytes,
            "blinkflow": {"seconds": self.seconds, "algbw_gbps": self.algbw_gbps,
                          "busbw_gbps": self.algbw_gbps * factor},
            "baseline": {"name": self.baseline_name, "seconds": self.baseline_seconds,
                         "algbw_gbps": self.baseline_algbw_gbps, "busbw_gbps": self.baseline_algbw_gbps * factor},
            "speedup": self.speedup,
        }

    def describe(self) -> str:
        factor = bus_factor(self.collective, len(self.devices))
        return "\n".join([
            f"{self.collective} of {self.size_bytes} bytes on {self.topology} devices {','.join(map(str, self.devices))}",
            f"  blinkflow ({self.plan_algorithm}): {self.seconds * 1e6:.1f} us, algbw {self.algbw_gbps:.2f} GB/s, "
            f"busbw {self.algbw_gbps * factor:.2f} GB/s (plan rate {self.rate_gbps:.2f} GB/s)",
            f"  {self.baseline_name}: {self.baseline_seconds * 1e6:.1f} us, algbw {self.baseline_algbw_gbps:.2f} GB/s, "
            f"busbw {self.baseline_algbw_gbps * factor:.2f} GB/s",
            f"  speedup {self.speedup:.2f}x",
        ])


def make_plan_for(topology: Topology, collective: str, devices: Optional[Sequence[int]], root: Optional[int]) -> Plan:
    from ..planner.make import make_plan  # OR-Tools: loaded only when a plan is made
    return make_plan(topology, collective, devices, root)


def compare(topology: Topology, collective: str, size_bytes: int, devices: Optional[Sequence[int]] = None,
            root: Optional[int] = None, elem_bytes: int = 4, chunk_elems: Optional[int] = None,
            plan: Optional[Plan] = None, step_budget: int = STEP_BUDGET, latency: bool = True) -> Comparison:
    """Plan (unless ``plan`` is given), simulate blinkflow and NCCL's choice, and compare.

    ``latency=False`` skips the extra simulation of the smallest buffer behind ``latency_s``
    (a sweep needs it once per plan, a single comparison not at all)."""
    plan = plan or make_plan_for(topology, collective, devices, root)
    devices = tuple(plan.devices)
    if len(devices) < 2:
        raise PlanError("a simulation needs at least 2 devices (one device moves no data)")
    if collective in ("broadcast", "reduce"):
        root = plan.root if plan.root is not None else devices[0]
    ours = simulate_plan(plan, topology, size_bytes, elem_bytes=elem_bytes, chunk_elems=chunk_elems,
                         step_budget=step_budget)
    latency_s = plan_latency(plan, topology, elem_bytes) if latency else None
    baseline, theirs = best_baseline(topology, devices, collective, size_bytes, root, elem_bytes=elem_bytes,
                                     simulate=simulate_at_scale,
                                     chunk_elems=chunk_elems, step_budget=step_budget)
    return Comparison(topology=topology.name, devices=devices, collective=collective, size_bytes=size_bytes,
                      seconds=ours.result.seconds, baseline_name=baseline.name,
                      baseline_seconds=theirs.result.seconds, rate_gbps=plan.rate_gbps,
                      latency_s=latency_s, plan_algorithm=plan.algorithm or "trees",
                      chunk_elems=ours.chunk_elems, baseline_chunk_elems=theirs.chunk_elems)


def plan_latency(plan: Plan, topology: Topology, elem_bytes: int = 4) -> float:
    """The plan's fixed cost: its simulated time for one element per tree (or device)."""
    return simulate_plan(plan, topology, elem_bytes * max(len(plan.devices), len(plan.trees), 1),
                         elem_bytes=elem_bytes).result.seconds


def compare_sizes(topology: Topology, collective: str, sizes: Sequence[int],
                  devices: Optional[Sequence[int]] = None, root: Optional[int] = None, **options) -> List[Comparison]:
    """``compare`` at every size with one plan, its fixed cost simulated once."""
    plan = options.pop("plan", None) or make_plan_for(topology, collective, devices, root)
    latency_s = plan_latency(plan, topology, options.get("elem_bytes", 4))
    return [dataclasses.replace(compare(topology, collective, s, devices, root, plan=plan, latency=False, **options),
                                latency_s=latency_s) for s in sizes]


def sweep_sizes(largest: int, smallest: int = 1024, factor: int = 4) -> List[int]:
    """Sizes from ``smallest`` up by ``factor`` to ``largest`` (always included)."""
    sizes, s = [], smallest
    while s < largest:
        sizes.append(s)
        s *= factor
    sizes.append(largest)
    return sizes
