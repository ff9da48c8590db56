"""One GPU per rank, as users run: each rank's collectives on its own GPU, the runtime's threads
working there too, the receive arena mapping only the GPU pairs its schedules use and staging
through host memory between GPUs without peer access. Under the fake CuPy with several devices,
where work issued on the wrong GPU and IPC between GPUs without a peer path fail as on hardware
(tests/fake_cupy/README.md); tests/gpu/devices_worker.py is the worker."""
import os
import re

import pytest

from mpi_launch import fake_cupy_env, run_mpi

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(HERE, "gpu", "devices_worker.py")


def _run(n, **env):
    settings = {"FAKE_CUPY_DEVICES": str(n), "BLINKFLOW_TOPOLOGY": f"cpu-host:{n}", **env}
    out = run_mpi(n, ["python", WORKER], timeout=240, env=fake_cupy_env(**settings))
    assert out.stdout.count(f"DEVICES OK {n} ranks") == n, out.stdout + out.stderr
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in
            re.finditer(r"rank (\d+) links .* mapped \[([\d, ]*)\] staged \[([\d, ]*)\]", out.stdout)}


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])
def test_each_rank_works_on_its_own_gpu(n):
    """The executor's packing, zeros for a joined rank and result copies run on the rank's GPU:
    no GPU can reach another's memory here, so work issued from device 0 fails on every other rank."""
    everyone = ",".join(f"{a}-{b}" for a in range(n) for b in range(a + 1, n))
    routes = _run(n, FAKE_CUPY_NO_PEER=everyone)
    # ... and every pair of ranks then talks through pinned host memory.
    assert all(mapped == "" and staged != "" for mapped, staged in routes.values()), routes


@pytest.mark.mpi
def test_a_pcie_only_pair_is_staged_through_the_host():
    """A 4-GPU box where GPUs 0 and 3 have no peer path: they stage, the rest map each other."""
    routes = _run(4, FAKE_CUPY_NO_PEER="0-3")
    assert routes[0] == ("1, 2", "3") and routes[3] == ("1, 2", "0"), routes
    assert routes[1] == ("0, 2, 3", "") and routes[2] == ("0, 1, 3", ""), routes


@pytest.mark.mpi
def test_pairs_the_schedule_does_not_use_are_never_opened(tmp_path):
    """GPUs 0, 1, 4, 5 of a DGX-1 (V100): 0-5 and 1-4 have no NVLink and no peer access; the plan's
    trees never use them, so nothing is staged and those pairs are never mapped."""
    from blinkflow.topology.io import save_topology
    from blinkflow.topology.presets import dgx1

    topology = tmp_path / "dgx1_0145.json"
    save_topology(dgx1("v100").subset([0, 1, 4, 5]), str(topology))
    routes = _run(4, FAKE_CUPY_DEVICES="8", BLINKFLOW_TOPOLOGY=str(topology), CUDA_VISIBLE_DEVICES="0,1,4,5",
                  FAKE_CUPY_NO_PEER="0-5,1-4")
    assert routes == {0: ("1, 2", ""), 1: ("0, 3", ""), 2: ("0, 3", ""), 3: ("1, 2", "")}, routes
