"""Blink's heterogeneous channels: NVLink trees and PCIe trees carrying one buffer together.

NVLink (or NVSwitch) and PCIe are disjoint sets of links, so a plan on each fabric runs at its
own rate without slowing the other. Splitting the buffer in proportion to the two rates,
``r_main / (r_main + r_pcie)`` to the NVLink trees and the rest to the PCIe trees, makes both
finish together, and the whole moves at ``r_main + r_pcie`` (Blink, MLSys 2020, §3.3 "hybrid
transfers"). PCIe trees ride on channel ``"pcie"`` so executors put them on their own streams.
"""
from __future__ import annotations

from ..topology.model import Topology
from .assemble import to_plan
from .plan import Plan
from .single import PackedPlan


def combine(topology: Topology, collective: str, devices, root, main: PackedPlan, pcie: PackedPlan) -> Plan:
    """One plan over both channels with the rate-proportional split."""
    total = main.rate + pcie.rate
    weights = (main.rate / total, pcie.rate / total)
    return to_plan(topology, collective, devices, root, [main, pcie], weights=weights,
                   rate=total, optimal=main.optimal + pcie.optimal)
