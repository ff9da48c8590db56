"""``make_plan``: Topology in, verified Plan out — the planner's public entry point.

It picks the fabric (:mod:`.network`), runs the collective's algorithm (:mod:`.single`), adds
Blink's PCIe channel when asked (:mod:`.hybrid`), builds the three-phase plan when the devices
span hosts (:mod:`.multihost`) and verifies the result (:mod:`.verify`) before returning it; the
NCCL ring baseline (:mod:`.ring`, a linear program) is attached only when asked (``ring=True``),
by the tools that show it, not at every job's start-up. Pure and deterministic: the same topology and
arguments give the same plan (and the same :meth:`Plan.digest`) on every rank.
"""
from __future__ import annotations

import time
from typing import List, Optional, Sequence

from ..errors import PlanError, TopologyError
from ..topology.model import Topology
from .assemble import run_collective, to_plan
from .crosshost import cross_host_plan
from .hybrid import combine
from .multihost import three_phase
from .network import PRIMARY_KINDS, main_network, pcie_network
from .plan import COLLECTIVES, Plan, Tree
from .ring import ring_gbps
from .verify import verify_plan


def make_plan(topology: Topology, collective: str, devices: Optional[Sequence[int]] = None,
              root: Optional[int] = None, hybrid: bool = False, ring: bool = False) -> Plan:
    """A verified plan of ``collective`` over ``devices`` (rank order; default: all devices).

    ``root`` (broadcast and reduce; default the first device) must be one of the devices.
    ``hybrid=True`` adds trees on the PCIe fabric (channel "pcie") when the primary fabric is
    NVLink / NVSwitch and PCIe connects the devices too. Devices on several hosts give a
    three-phase all-reduce plan. ``ring=True`` fills ``ring_gbps`` with the NCCL-style ring
    baseline (what ``blinkrun plan`` shows); otherwise it stays 0. ``plan_seconds`` is the time
    spent planning, without the baseline. Raises TopologyError for devices the topology lacks
    and PlanError for everything the planner cannot do.

    >>> from blinkflow.topology.presets import get_preset
    >>> round(make_plan(get_preset("dgx1-v100"), "broadcast").rate_gbps, 1)
    150.0
    """
    start = time.perf_counter()
    devices = _check_devices(topology, devices)
    if collective not in COLLECTIVES:
        raise PlanError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    if collective in ("broadcast", "reduce"):
        root = devices[0] if root is None else root
        if root not in devices:
            raise PlanError(f"root {root} is not one of the devices {list(devices)}")
    elif root is not None:
        raise PlanError(f"{collective} has no root (got --root {root})")
    hosts = {topology.node(d).host for d in devices}
    if len(devices) == 1:
        plan = _single_device(topology, collective, devices, root)
    elif len(hosts) > 1 and collective == "allreduce":
        plan = three_phase(topology, devices)
    elif len(hosts) > 1:
        plan = cross_host_plan(topology, collective, devices, root)
    else:
        plan = _one_host(topology, collective, devices, root, hybrid)
    plan = plan.with_figures(plan_seconds=time.perf_counter() - start)
    verify_plan(plan, topology)
    if ring:
        plan = plan.with_figures(ring_gbps=ring_gbps(topology, devices, collective))
    return plan


def _check_devices(topology: Topology, devices) -> List[int]:
    if devices is None:
        return list(topology.compute_ids)
    devices = list(devices)
    if not devices:
        raise TopologyError("the device list is empty", "devices")
    if len(set(devices)) != len(devices):
        raise TopologyError(f"device list {devices} repeats a device", "devices")
    present = set(topology.compute_ids)
    for d in devices:
        if d not in present:
            raise TopologyError(f"device {d} is not in topology {topology.name!r} "
                                f"(devices: {','.join(map(str, topology.compute_ids))})", "devices")
    return devices


def _one_host(topology: Topology, collective: str, devices: List[int], root, hybrid: bool) -> Plan:
    net = main_network(topology, devices)
    packed = run_collective(net, collective, root)
    if hybrid and net.kinds == PRIMARY_KINDS:
        pnet = pcie_network(topology, devices)
        if pnet.capacity and pnet.strongly_connected():
            return combine(topology, collective, devices, root, packed, run_collective(pnet, collective, root))
    return to_plan(topology, collective, devices, root, [packed])


def _single_device(topology: Topology, collective: str, devices, root) -> Plan:
    """One device moves nothing: a one-node tree, rate 0 (nothing is transferred)."""
    return Plan(collective=collective, topology=topology.name, devices=tuple(devices),
                trees=(Tree(root=devices[0], fraction=1.0, edges=()),), rate_gbps=0.0, optimal_gbps=0.0,
                root=root, algorithm="local")
