"""NCCL where NCCL is already optimal: over the presets, with NCCL present (as a policy input,
where it is absent here), the policy takes NCCL on a whole NVSwitch box and Blink's trees on the
DGX-1 subsets without an NVLink ring."""
import itertools

import pytest

from blinkflow.backends.base import Layout
from blinkflow.config import Config
from blinkflow.planner import make_plan
from blinkflow.schedule.policy import Capabilities, choose, plan_rates
from blinkflow.sim.rings import nvlink_rings, nvlink_units
from blinkflow.topology.presets import get_preset

NCCL = Capabilities("cuda", nccl=True)


def _choice(topo, devices):
    plan = make_plan(topo, "allreduce", devices)
    layout = Layout(0, (0,) * len(plan.devices), tuple(plan.devices))
    return choose("allreduce", 256 << 20, 4, layout, Config(), NCCL, ntrees=len(plan.trees),
                  rates=plan_rates(plan, topo))


@pytest.mark.parametrize("preset, algorithm", [("hgx-h100", "nccl"), ("dgx-a100", "nccl"), ("dgx2", "nccl"),
                                               ("dgx1-v100", "nccl"), ("pcie-8gpu", "runner")])
def test_whole_boxes(preset, algorithm):
    """Every GPU of a box: NCCL's rings reach the plan's rate on NVSwitch boxes and the full
    DGX-1; on PCIe the trees beat the socket-crossing ring."""
    topo = get_preset(preset)
    assert _choice(topo, None).algorithm == algorithm


def _nvlink_connected(topo, devices) -> bool:
    import networkx as nx

    graph = nx.Graph(list(nvlink_units(topo, devices)))
    graph.add_nodes_from(devices)
    return nx.is_connected(graph)


def test_dgx1_subsets_without_an_nvlink_ring_take_the_trees():
    """Where NVLink connects the GPUs but has no ring, Blink's trees beat NCCL's PCIe fallback and
    run; where NVLink does not even connect them, trees cross PCIe too, and NCCL runs where they
    do not beat its ring (22 subsets at the same PCIe rate)."""
    topo = get_preset("dgx1-v100")
    without = [s for k in (3, 4) for s in itertools.combinations(range(8), k) if not nvlink_rings(topo, s)]
    assert len(without) == 48 + 62  # 48 of 56 three-GPU, 62 of 70 four-GPU subsets
    chosen = {s: _choice(topo, s) for s in without}
    for s, c in chosen.items():
        assert c.algorithm == "runner" or not _nvlink_connected(topo, s), (s, c.why)
    trees = [s for s, c in chosen.items() if c.algorithm == "runner"]
    assert len(trees) == 88 and all("beat NCCL's rings" in chosen[s].why for s in trees)
    assert all("do not beat" in c.why for s, c in chosen.items() if s not in trees)


def test_without_nccl_the_trees_run_and_say_why():
    topo = get_preset("hgx-h100")
    plan = make_plan(topo, "allreduce")
    layout = Layout(0, (0,) * 8, tuple(plan.devices))
    c = choose("allreduce", 256 << 20, 4, layout, Config(), Capabilities("cuda"), ntrees=8, rates=plan_rates(plan, topo))
    assert c.algorithm == "runner" and c.why.startswith("no NCCL here")
