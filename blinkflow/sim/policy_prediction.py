"""What the call-shape policy would run for a simulated call, and what each algorithm that could
run it is predicted to take, at the chunk it really uses.

``blinkrun simulate`` asks :func:`~blinkflow.schedule.policy.choose` what a job on the topology
would run (the cuda backend on GPUs, one rank per GPU, NCCL installed; the cpu backend with
cross-memory attach on CPU ranks), and on GPUs predicts, side by side:

* the host runner at its arena-capped chunk, charged its measured host cost per action: each
  chunk step of a tree edge pays it, and a rank's actions run one after the other, so the call
  takes at least the busiest rank's actions times that cost;
* the device executor at its chunk: one launch, a flag handshake per chunk, and every (peer,
  channel) connection capped by its blocks' bytes in flight (Little's law);
* NCCL's rings (the simulator's NCCL baseline), which the policy takes where the plan's trees do
  not beat them.

On CPU ranks the cpu backend reads local peers' memory in place (the single copy) only where a
host has more than one rank and every host as many; otherwise it runs the packed runner, an
all-reduce a stage at a time (each stage a program that starts when the one before has ended),
and so does the prediction.

The figures are projections from :mod:`blinkflow.schedule.step_costs` (docs/cuda.md, "The cost
model"). An algorithm the simulator cannot model (the cpu single copy, a plain all-to-all) is
reported as not simulated; so is MPI's own all-reduce, which the cpu backend takes for small
all-reduces.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional

from ..config import Config
from ..planner.plan import Plan
from ..schedule import device_geometry, step_costs
from ..schedule.lower import lower
from ..schedule.policy import ALGORITHMS, Capabilities, Choice, choose, plan_rates
from ..schedule.program import compile_program
from ..topology.model import Topology
from .api import simulate, simulate_plan
from .engine import bus_factor

FLOAT_OF_WIDTH = {2: "float16", 4: "float32", 8: "float64"}
"""The dtype a simulated call of ``elem_bytes``-wide elements is taken to have: the float of that
width, as a training step's gradients are (the policy's ``mpi`` depends on the dtype)."""
RUNNER_FUSE_INPUTS = 7
"""Receives the cuda runner fuses into one action (its reduce kernel's 8 inputs, less the local
value: ``blinkflow.backends.cuda.kernels.MAX_INPUTS - 1``)."""


@dataclasses.dataclass(frozen=True)
class Prediction:
    backend: str
    choice: Choice
    seconds: Optional[float]
    """None: the simulator cannot model the algorithm."""
    ndevices: int = 0
    size_bytes: int = 0
    collective: str = ""
    bound: str = ""
    """What limits the prediction (links, host actions, connection rate), when known."""

    @property
    def busbw_gbps(self) -> Optional[float]:
        if not self.seconds:
            return None
        return self.size_bytes / self.seconds / 1e9 * bus_factor(self.collective, self.ndevices)

    def describe(self, label: str = "policy") -> str:
        chunk = f", chunk {self.choice.chunk_bytes} bytes" if self.choice.chunk_bytes else ""
        head = f"  {label} ({self.backend} backend): {self.choice.algorithm}{chunk}"
        if self.seconds is None:
            return f"{head}: not simulated"
        bus = f", busbw {self.busbw_gbps:.1f} GB/s" if self.ndevices else ""
        bound = f" [{self.bound}]" if self.bound else ""
        return f"{head}: predicted {self.seconds * 1e6:.1f} us{bus}{bound}"

    def to_json(self) -> dict:
        return {"backend": self.backend, "algorithm": self.choice.algorithm, "chunk_bytes": self.choice.chunk_bytes,
                "seconds": self.seconds, "simulated": self.seconds is not None, "busbw_gbps": self.busbw_gbps,
                "why": self.choice.why, "bound": self.bound}


@dataclasses.dataclass(frozen=True)
class Predictions:
    """The policy's choice and, on GPUs, every cuda algorithm's prediction by name."""

    choice: Prediction
    algorithms: Dict[str, Prediction]

    def describe(self) -> str:
        lines = [self.choice.describe()]
        if self.choice.choice.why:
            lines.append(f"    why: {self.choice.choice.why}")
        lines += [p.describe(name) for name, p in self.algorithms.items()]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return dict(self.choice.to_json(), algorithms={name: p.to_json() for name, p in self.algorithms.items()})


def _layout(plan: Plan, topology: Topology):
    from ..backends.base import Layout

    host_index: Dict[str, int] = {}
    hosts = tuple(host_index.setdefault(topology.node(d).host, len(host_index)) for d in plan.devices)
    return Layout(0, hosts, tuple(plan.devices))


def predict(plan: Plan, topology: Topology, size_bytes: int, elem_bytes: int = 4,
            config: Optional[Config] = None, caps: Optional[Capabilities] = None,
            nccl_seconds: Optional[float] = None) -> Prediction:
    """The policy's choice for ``size_bytes`` on ``plan``'s devices (one rank per device, hosts
    as the topology says) and its predicted time. ``caps`` defaults to what a backend on that
    topology finds: the cuda backend on GPUs (with NCCL: one rank per GPU), the cpu backend with
    cross-memory attach on CPUs. ``nccl_seconds`` is NCCL's simulated time, where known."""
    gpus = any(topology.node(d).kind == "gpu" for d in plan.devices)
    layout = _layout(plan, topology)
    # The cpu backend reads its peers' memory only where a host has more than one rank, and
    # across hosts only where every host has as many (CpuBackend._probe_single_copy).
    caps = caps or (Capabilities("cuda", nccl=True) if gpus else
                    Capabilities("cpu", single_copy=layout.local_size > 1 and layout.even))
    rates = plan_rates(plan, topology) if caps.nccl and plan.collective == "allreduce" else None
    choice = choose(plan.collective, size_bytes, elem_bytes, layout, config or Config(), caps,
                    ntrees=max(1, len(plan.trees)), rates=rates, dtype=FLOAT_OF_WIDTH.get(elem_bytes))
    shape = dict(ndevices=len(plan.devices), size_bytes=size_bytes, collective=plan.collective)
    if not ALGORITHMS[choice.algorithm].simulated:
        return Prediction(caps.backend, choice, None, **shape)
    if choice.algorithm == "nccl":
        return Prediction(caps.backend, choice, nccl_seconds, bound="NCCL's rings", **shape)
    if choice.algorithm == "device":
        seconds, bound = _device_seconds(plan, topology, size_bytes, elem_bytes, choice)
        return Prediction(caps.backend, choice, seconds, bound=bound, **shape)
    if caps.backend == "cuda":
        seconds, bound = _runner_seconds(plan, topology, size_bytes, elem_bytes, choice)
        return Prediction(caps.backend, choice, seconds, bound=bound, **shape)
    seconds, bound = _staged_seconds(plan, topology, size_bytes, elem_bytes, choice, caps)
    return Prediction(caps.backend, choice, seconds, bound=bound, **shape)


def predict_all(plan: Plan, topology: Topology, size_bytes: int, elem_bytes: int = 4,
                config: Optional[Config] = None, nccl_seconds: Optional[float] = None) -> Predictions:
    """The policy's choice and, on GPUs, the runner's, the device executor's and NCCL's
    predictions, each at the chunk it uses."""
    config = config or Config()
    chosen = predict(plan, topology, size_bytes, elem_bytes, config, nccl_seconds=nccl_seconds)
    if chosen.backend != "cuda":
        return Predictions(chosen, {})
    out = {"runner": predict(plan, topology, size_bytes, elem_bytes, dataclasses.replace(config, algorithm="runner"),
                             caps=Capabilities("cuda")),
           "device": predict(plan, topology, size_bytes, elem_bytes, dataclasses.replace(config, algorithm="device"),
                             caps=Capabilities("cuda", device_executor=True))}
    if plan.collective == "allreduce":
        out["nccl"] = predict(plan, topology, size_bytes, elem_bytes, dataclasses.replace(config, algorithm="nccl"),
                              caps=Capabilities("cuda", nccl=True), nccl_seconds=nccl_seconds)
    return Predictions(chosen, out)


def _staged_seconds(plan: Plan, topology: Topology, size_bytes: int, elem_bytes: int, choice: Choice,
                    caps: Capabilities):
    """The cpu runner's all-reduce stage after stage (``Choice.stage_elems``: each stage is a
    program of its own, which starts when the one before has ended), other calls whole."""
    nelems = max(0, size_bytes // elem_bytes)
    stage = choice.stage_elems(nelems, elem_bytes) if plan.collective == "allreduce" and nelems else nelems

    def seconds(n: int) -> float:
        return simulate_plan(plan, topology, n * elem_bytes, elem_bytes=elem_bytes,
                             chunk_elems=choice.chunk_elems(elem_bytes),
                             chunk_overhead_us=ALGORITHMS[choice.algorithm].cost_us(caps.backend)).result.seconds

    if stage >= nelems:
        return seconds(nelems), ""
    full, rest = divmod(nelems, stage)
    return full * seconds(stage) + (seconds(rest) if rest else 0.0), \
        f"{full + bool(rest)} stages of at most {stage * elem_bytes} bytes, one after another"


def _runner_seconds(plan: Plan, topology: Topology, size_bytes: int, elem_bytes: int, choice: Choice):
    """The links' time with the runner's per-chunk host cost, or the busiest rank's host
    actions one after the other, whichever is longer."""
    nelems = max(0, size_bytes // elem_bytes)
    schedule = lower(plan, nelems, choice.chunk_elems(elem_bytes))
    per_action = step_costs.RUNNER_US_PER_ACTION
    links = simulate(schedule, topology, plan, elem_bytes=elem_bytes, chunk_overhead_us=per_action).seconds
    rank_of = {d: r for r, d in enumerate(plan.devices)}
    actions = max(len(compile_program(schedule, d, rank_of, RUNNER_FUSE_INPUTS).actions) for d in plan.devices)
    host = actions * per_action * 1e-6
    if host > links:
        return host, f"host: {actions} actions x {per_action:g} us on the busiest rank"
    return links, "links and per-chunk host cost"


def _device_seconds(plan: Plan, topology: Topology, size_bytes: int, elem_bytes: int, choice: Choice):
    """One launch, then the schedule with a handshake per chunk and each connection capped by
    its blocks' bytes in flight."""
    nelems = max(0, size_bytes // elem_bytes)
    schedule = lower(plan, nelems, choice.chunk_elems(elem_bytes))
    lanes = device_geometry.lanes_for(schedule)  # the blocks the device tables give each connection
    per_connection = step_costs.device_connection_gbps(lanes)
    seconds = simulate(schedule, topology, plan, elem_bytes=elem_bytes, chunk_overhead_us=step_costs.DEVICE_HANDSHAKE_US,
                       edge_gbps=per_connection).seconds
    return (seconds + step_costs.DEVICE_LAUNCH_US * 1e-6,
            f"{lanes} blocks x {device_geometry.bytes_in_flight() // 1024} KiB in flight / "
            f"{device_geometry.LATENCY_US:g} us = {per_connection:.1f} GB/s per connection")
