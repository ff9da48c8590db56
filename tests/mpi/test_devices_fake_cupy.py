"""One GPU per rank, as users run: each rank's collectives on its own GPU, the runtime's threads
working there too, the receive arena mapping only the GPU pairs its schedules use and staging
through host memory between GPUs without peer access. Under the fake CuPy with several devices,
where work issued on the wrong GPU and IPC between GPUs without a peer path fail as on hardware
(tests/fake_cupy/README.md); tests/gpu/devices_script.py is the case script, one launch per
configuration, each case a test."""
import os
import re

import pytest

from harness import case_names, fake_cupy_env, launch

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(HERE, "gpu", "devices_script.py")
CASES = case_names(WORKER)


def _no_peer_anywhere(n):
    return ",".join(f"{a}-{b}" for a in range(n) for b in range(a + 1, n))


def _dgx1_0145(tmp_dir):
    from blinkflow.topology.io import save_topology
    from blinkflow.topology.presets import dgx1

    path = os.path.join(tmp_dir, "dgx1_0145.json")
    if not os.path.exists(path):
        save_topology(dgx1("v100").subset([0, 1, 4, 5]), path)
    return path


def _launch(n, **env):
    settings = {"FAKE_CUPY_DEVICES": str(n), "BLINKFLOW_TOPOLOGY": f"cpu-host:{n}", **env}
    return launch(n, WORKER, env=fake_cupy_env(**settings))


def _routes(job):
    """rank -> (the GPUs its arena maps, the GPUs it stages to), from the last case's lines."""
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in
            re.finditer(r"rank (\d+) links .* mapped \[([\d, ]*)\] staged \[([\d, ]*)\]", job.stdout)}


def _config(name, tmp_dir):
    if name.startswith("no-peer-"):
        n = int(name.rsplit("-", 1)[1])
        return _launch(n, FAKE_CUPY_NO_PEER=_no_peer_anywhere(n))
    if name == "pcie-pair":
        return _launch(4, FAKE_CUPY_NO_PEER="0-3")
    return _launch(4, FAKE_CUPY_DEVICES="8", BLINKFLOW_TOPOLOGY=_dgx1_0145(tmp_dir), CUDA_VISIBLE_DEVICES="0,1,4,5",
                   FAKE_CUPY_NO_PEER="0-5,1-4")


CONFIGS = ["no-peer-2", "no-peer-3", "pcie-pair", "dgx1-0145"]


@pytest.fixture(scope="session")
def topology_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("devices_topologies"))


@pytest.mark.mpi
@pytest.mark.parametrize("config, case", [
    pytest.param(c, case, marks=pytest.mark.xdist_group(f"devices-{c}")) for c in CONFIGS for case in CASES])
def test_each_rank_works_on_its_own_gpu(config, case, topology_dir):
    """The executor's packing, zeros for a joined rank and result copies run on the rank's GPU:
    where no GPU can reach another's memory, work issued from device 0 fails on every other rank."""
    _config(config, topology_dir).expect(case)


@pytest.mark.mpi
@pytest.mark.parametrize("config", [pytest.param(c, marks=pytest.mark.xdist_group(f"devices-{c}")) for c in CONFIGS])
def test_the_arena_maps_the_pairs_with_a_peer_path_and_stages_the_rest(config, topology_dir):
    """No peer access anywhere: every pair talks through pinned host memory. A 4-GPU box where
    GPUs 0 and 3 have no peer path: they stage, the rest map each other. GPUs 0, 1, 4, 5 of a
    DGX-1 (V100): 0-5 and 1-4 have no NVLink and no peer access; the plan's trees never use them,
    so nothing is staged and those pairs are never mapped."""
    job = _config(config, topology_dir)
    job.expect("the_receive_arena_opened_links")
    routes = _routes(job)
    assert sorted(routes) == list(range(job.n)), job.stdout[-3000:]
    if config.startswith("no-peer-"):
        assert all(mapped == "" and staged != "" for mapped, staged in routes.values()), routes
    elif config == "pcie-pair":
        assert routes[0] == ("1, 2", "3") and routes[3] == ("1, 2", "0"), routes
        assert routes[1] == ("0, 2, 3", "") and routes[2] == ("0, 1, 3", ""), routes
    else:
        assert routes == {0: ("1, 2", ""), 1: ("0, 3", ""), 2: ("0, 3", ""), 3: ("1, 2", "")}, routes
