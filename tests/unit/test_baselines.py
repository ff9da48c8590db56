"""NCCL baselines: the rings NCCL would find, their schedules are correct, and their simulated
bandwidth is what the ring formulas say."""
import itertools

import pytest

from blinkflow.schedule.symbolic import check
from blinkflow.sim.baselines import best_baseline, nccl_double_tree, nccl_ring, simulate_baseline
from blinkflow.sim.rings import multi_host_rings, nvlink_rings
from blinkflow.topology.presets import get_preset

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")


def test_nvlink_rings_on_dgx1_subsets_match_the_paper():
    topo = get_preset("dgx1-v100")
    no_ring = {k: sum(1 for s in itertools.combinations(range(8), k) if not nvlink_rings(topo, s)) for k in (3, 4)}
    assert no_ring == {3: 48, 4: 62}  # DESIGN §4 / Blink §2
    assert len(nvlink_rings(topo, range(8))) == 6   # every GPU's six NVLinks in use
    assert len(nvlink_rings(get_preset("dgx1-p100"), range(8))) == 4
    for ring in nvlink_rings(topo, range(8)):
        assert sorted(ring) == list(range(8))
        assert all(topo.link(a, b).kind == "nvlink" for a, b in zip(ring, ring[1:] + ring[:1]))


def test_fallback_switch_and_multi_host_rings():
    topo = get_preset("dgx1-v100")
    assert nccl_ring(topo, (0, 1, 6), "allreduce").name == "nccl-ring-pcie"
    assert nccl_ring(topo, (0, 1, 2), "allreduce").name == "nccl-ring"
    assert nccl_ring(get_preset("cpu-host:3"), (0, 1, 2), "allreduce").name == "nccl-ring-shm"
    assert nvlink_rings(get_preset("dgx2"), range(16)) == [list(range(16))]
    two = get_preset("2xdgx1-v100")
    rings = multi_host_rings(two, two.compute_ids)
    assert len(rings) == 4 and all(sorted(r) == list(range(16)) for r in rings)


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("preset, devices", [("dgx1-v100", (0, 1, 2, 3, 4, 5, 6, 7)), ("dgx1-v100", (0, 5, 6)),
                                             ("dgx-a100", (0, 3, 5)), ("2xcpu-host:2", (0, 1, 2, 3))])
def test_ring_schedules_pass_the_checker(collective, preset, devices):
    topo = get_preset(preset)
    check(nccl_ring(topo, devices, collective, devices[-1] if collective in ("broadcast", "reduce") else None)
          .lower(47, 3))


def test_double_binary_tree_passes_the_checker_and_mirrors():
    for spec in ("2xdgx1-v100", "3xcpu-host:2", "5xcpu-host:1"):
        topo = get_preset(spec)
        tree = nccl_double_tree(topo, topo.compute_ids)
        check(tree.lower(101, 4))
        roots = {j.reduce[0] for j in tree.jobs}
        assert len(tree.jobs) == 2 and len(roots) == 2


@pytest.mark.parametrize("collective, factor", [("allreduce", lambda n: n / (2 * (n - 1))),
                                                ("allgather", lambda n: n / (n - 1)),
                                                ("broadcast", lambda n: 1.0)])
def test_ring_bandwidth_follows_the_ring_formulas(collective, factor):
    # (0,1,2,3) on a DGX-1P: a full NVLink mesh, 2 rings of one 20 GB/s link each.
    topo = get_preset("dgx1-p100")
    ring = nccl_ring(topo, (0, 1, 2, 3), collective)
    res = simulate_baseline(ring, topo, 2**28).result
    expected = 2 * 20.0 * factor(4)
    assert 0.9 * expected < res.algbw_gbps <= expected * 1.001


def test_pcie_fallback_runs_at_pcie_and_qpi_speeds():
    topo = get_preset("pcie-8gpu")
    same_socket = simulate_baseline(nccl_ring(topo, (0, 1, 2), "broadcast"), topo, 2**26).result
    assert 10.0 < same_socket.algbw_gbps <= 12.0  # PCIe Gen3 x16
    cross = simulate_baseline(nccl_ring(topo, (0, 1, 4), "broadcast"), topo, 2**26).result
    assert 8.0 < cross.algbw_gbps <= 10.0  # the ring crosses QPI


def test_best_baseline_across_hosts_considers_the_tree():
    topo = get_preset("2xcpu-host:2")
    chosen, tuning = best_baseline(topo, topo.compute_ids, "allreduce", 2**12)
    assert chosen.name in ("nccl-ring", "nccl-tree") and tuning.result.seconds > 0
