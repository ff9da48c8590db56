"""The NCCL-style ring baseline: NVLink Hamiltonian rings, or the PCIe/socket fallback."""
from itertools import combinations

import pytest

from blinkflow.planner.ring import ring_bandwidth, ring_gbps
from blinkflow.topology.presets import get_preset


@pytest.fixture(scope="module")
def dgx1v():
    return get_preset("dgx1-v100")


def test_dgx1_subsets_without_nvlink_ring(dgx1v):
    # DESIGN §4: 62 of 70 four-GPU and 48 of 56 three-GPU DGX-1 subsets have no NVLink ring.
    for k, expected in ((3, 48), (4, 62)):
        subsets = list(combinations(range(8), k))
        fallback = [s for s in subsets if ring_bandwidth(dgx1v, s) < 25.0]
        assert len(fallback) == expected


def test_fallback_figures(dgx1v):
    assert ring_bandwidth(dgx1v, (0, 1, 4)) == 10.0  # crosses sockets
    assert ring_bandwidth(dgx1v, (0, 1, 2)) >= 25.0  # 0-1-2 is an NVLink ring
    assert ring_bandwidth(get_preset("pcie-8gpu"), (0, 1)) == 12.0


def test_full_dgx1v_rings_and_algbw(dgx1v):
    assert ring_bandwidth(dgx1v, range(8)) == pytest.approx(150.0)
    assert ring_gbps(dgx1v, range(8), "allreduce") == pytest.approx(150.0 * 8 / 14)
    assert ring_gbps(dgx1v, range(8), "allgather") == pytest.approx(150.0 * 8 / 7)


def test_switch_and_mesh(dgx1v):
    assert ring_bandwidth(get_preset("dgx2"), range(16)) == pytest.approx(150.0)
    assert ring_bandwidth(get_preset("cpu-host:4"), range(4)) == pytest.approx(30.0)


def test_a_failed_ring_lp_raises_instead_of_returning_a_number(monkeypatch):
    from blinkflow.errors import PlanError
    from blinkflow.planner import ring

    monkeypatch.setattr(ring.pywraplp.Solver, "Solve", lambda self: ring.pywraplp.Solver.ABNORMAL)
    with pytest.raises(PlanError, match="not OPTIMAL"):
        ring._pack_cycles({(0, 1): 25.0, (1, 0): 25.0}, [(0, 1)])
