"""What the call-shape policy would run for a simulated call, and its predicted time.

``blinkrun simulate`` asks :func:`~blinkflow.schedule.policy.choose` what a job on the
topology would run (the cuda backend on GPUs, the cpu backend on CPU ranks) and simulates that
algorithm's schedule at the policy's chunk, charging the algorithm's per-chunk cost on that
backend; an algorithm the simulator cannot model (the cpu single copy, a plain all-to-all) is
reported as not simulated.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..config import Config
from ..planner.plan import Plan
from ..schedule.policy import ALGORITHMS, Capabilities, Choice, choose
from ..topology.model import Topology
from .api import simulate_plan


@dataclasses.dataclass(frozen=True)
class Prediction:
    backend: str
    choice: Choice
    seconds: Optional[float]
    """None: the simulator cannot model the algorithm."""

    def describe(self) -> str:
        chunk = f", chunk {self.choice.chunk_bytes} bytes" if self.choice.chunk_bytes else ""
        head = f"  policy ({self.backend} backend): {self.choice.algorithm}{chunk}"
        if self.seconds is None:
            return f"{head}: not simulated"
        return f"{head}: predicted {self.seconds * 1e6:.1f} us"

    def to_json(self) -> dict:
        return {"backend": self.backend, "algorithm": self.choice.algorithm, "chunk_bytes": self.choice.chunk_bytes,
                "seconds": self.seconds, "simulated": self.seconds is not None}


def predict(plan: Plan, topology: Topology, size_bytes: int, elem_bytes: int = 4,
            config: Optional[Config] = None, caps: Optional[Capabilities] = None) -> Prediction:
    """The policy's choice for ``size_bytes`` on ``plan``'s devices (one rank per device, hosts
    as the topology says) and its simulated time. ``caps`` defaults to what a backend on that
    topology finds: the cuda backend on GPUs, the cpu backend with cross-memory attach on CPUs."""
    from ..backends.base import Layout

    gpus = any(topology.node(d).kind == "gpu" for d in plan.devices)
    caps = caps or (Capabilities("cuda") if gpus else Capabilities("cpu", single_copy=True))
    host_index = {}
    hosts = tuple(host_index.setdefault(topology.node(d).host, len(host_index)) for d in plan.devices)
    layout = Layout(0, hosts, tuple(plan.devices))
    choice = choose(plan.collective, size_bytes, elem_bytes, layout, config or Config(), caps,
                    ntrees=max(1, len(plan.trees)))
    algorithm = ALGORITHMS[choice.algorithm]
    if not algorithm.simulated:
        return Prediction(caps.backend, choice, None)
    tuned = simulate_plan(plan, topology, size_bytes, elem_bytes=elem_bytes, chunk_elems=choice.chunk_elems(elem_bytes),
                          chunk_overhead_us=algorithm.cost_us(caps.backend))
    return Prediction(caps.backend, choice, tuned.result.seconds)
